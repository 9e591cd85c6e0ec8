"""`bench latency`'s figures of one run and its verdict, from its records and counts alone (pure:
tested without a daemon; bench/latency.py says what each figure means)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench import harness


def run_stats(
    records: Sequence[Mapping[str, Any]],
    done_times: Sequence[float],
    *,
    output: int,
    dropped: int,
    stale: int,
    failed: int,
    overflow: int = 0,
    first_out: float | None,
    stop: float,
    fps: float,
) -> dict[str, Any]:
    """Counts, latency percentiles and the lag behind the live stream of one run.

    `records` are the JSONL records in seq order and `done_times` the wall time each was done with
    (the hub's progress callback, in the same order: outputs release frames in seq order). The lag
    of a frame is when it was done less when the server sent it; the server's clock is put where
    the frame that reached decode soonest after its pts says (the earliest arrival has the least
    queueing in it), so the lag is never below zero and is exact to within that frame's own wait.
    """
    totals = [float(r["latency_ms"]["total"]) for r in records if "total" in r.get("latency_ms", {})]
    seqs = [int(r["seq"]) for r in records]
    lag = lag_ms(records, done_times)
    window = (stop - first_out) if first_out is not None else None
    decoded = [
        t - float(r["latency_ms"]["total"]) / 1000.0
        for r, t in zip(records, done_times)
        if "total" in r.get("latency_ms", {})
    ]
    read = output + dropped
    read_span = (stop - min(decoded)) if decoded else None
    return {
        "frames": {
            "read": read,
            "output": output,
            "dropped_policy": dropped - stale - overflow,
            "dropped_stale": stale,
            "dropped_overflow": overflow,
            "failed": failed,
            # Every seq the source sent is in the output or a drop in the hub (stale, overflow).
            "seqs_accounted": (max(seqs) + 1 <= output + stale + overflow) if seqs else None,
        },
        "window_s": window,
        "output_fps": (sum(1 for t in done_times if first_out <= t <= stop) / window)
        if window and first_out is not None
        else None,
        "read_fps": read / read_span if read_span else None,
        "source_fps": fps,
        "latency_ms": summary(totals),
        "lag_ms": {**summary(lag), "at_end": _tail_mean(lag), "growth_s_per_s": growth(lag, done_times)},
    }


def summary(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "p50": harness.percentile(values, 50),
        "p90": harness.percentile(values, 90),
        "p99": harness.percentile(values, 99),
        "max": max(values) if values else None,
    }


def lag_ms(records: Sequence[Mapping[str, Any]], done_times: Sequence[float]) -> list[float]:
    """Per frame, ms from when the live source sent it (its stream time) to when it was done."""
    if len(records) != len(done_times) or not records:
        return []
    pairs = [
        (float(r["time"]), t, t - float(r["latency_ms"]["total"]) / 1000.0)
        for r, t in zip(records, done_times)
        if "total" in r.get("latency_ms", {})
    ]
    if not pairs:
        return []
    origin = min(decoded - stream for stream, _, decoded in pairs)  # wall time of stream time 0
    return [(done - (origin + stream)) * 1000.0 for stream, done, _ in pairs]


def growth(lag: Sequence[float], done_times: Sequence[float]) -> float | None:
    """Least-squares slope of the lag against wall time: seconds of lag gained per second."""
    if len(lag) < 3 or len(lag) != len(done_times):
        return None
    t0 = done_times[0]
    xs = [t - t0 for t in done_times]
    ys = [v / 1000.0 for v in lag]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def _tail_mean(values: Sequence[float], fraction: float = 0.05) -> float | None:
    """The mean of the last `fraction` of the values (at least one)."""
    if not values:
        return None
    n = max(1, int(len(values) * fraction))
    tail = values[-n:]
    return sum(tail) / len(tail)


def verdict(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the run shows what issue 5 asks for, and a line that says so.

    A drop policy: p99 end-to-end latency <= the latency budget, and every frame read is output or
    counted as dropped (so the drops are counted). Block: nothing dropped; its latency and lag are
    reported, not judged (a live source read more slowly than it sends falls behind)."""
    frames = stats["frames"]
    budget = stats.get("latency_budget_ms")
    p99 = stats["latency_ms"]["p99"]
    within = p99 <= budget if (p99 is not None and budget is not None) else None
    drops = frames["dropped_policy"] + frames["dropped_stale"] + frames.get("dropped_overflow", 0)
    counted = frames["read"] == frames["output"] + drops
    counted = counted and frames.get("seqs_accounted") is not False
    if stats.get("exit_code"):
        return {
            "holds": False,
            "p99_within_budget": within,
            "drops_counted": counted,
            "text": f"the run failed: {stats.get('error')}",
        }
    if stats["policy"] == "block":
        dropped = frames["dropped_policy"] + frames["dropped_stale"]
        lag = stats["lag_ms"]
        text = f"{dropped} dropped" + (
            f"; {lag['at_end'] / 1000:.1f} s behind the live stream at the end, "
            f"falling behind by {lag['growth_s_per_s']:.2f} s a second"
            if lag.get("at_end") is not None and lag.get("growth_s_per_s") is not None
            else ""
        )
        return {
            "holds": dropped == 0 and frames["output"] > 0,
            "p99_within_budget": within,
            "drops_counted": counted,
            "text": text,
        }
    holds = bool(within) and counted and frames["output"] > 0
    if p99 is None:
        text = "no frames out"
    else:
        word = "<=" if within else ">"
        text = f"p99 {p99:.0f} ms {word} budget {budget:g} ms; " + (
            "every frame read is output or counted as dropped" if counted else "drops do not add up"
        )
    return {"holds": holds, "p99_within_budget": within, "drops_counted": counted, "text": text}
