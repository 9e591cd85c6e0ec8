"""`bench engine`'s results shown: the table, the `--chart` PNG, and `--compare OLD.json NEW.json`,
the ratio NEW/OLD of each row of two saved results (bench/engine.py measures them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import harness


HEADERS = (
    "variant",
    "batch",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "ms/frame",
    "frames/s",
    "start-up s",
    "peak RSS MiB",
    "GPU MiB",
)


def render(report: Mapping[str, Any]) -> str:
    rows: list[list[Any]] = []
    notes: list[str] = []
    for result in report["results"]:
        label = result["variant"]
        if result.get("error"):
            rows.append([label, "-", None, None, None, None, None, None, None, None])
            notes.append(f"{label}: {result['error']}")
            continue
        for row in result["rows"]:
            if "skipped" in row:
                notes.append(f"{label} batch {row['batch']}: skipped, {row['skipped']}")
                continue
            lat = row["latency_ms"]
            rows.append(
                [
                    label,
                    row["batch"],
                    lat["p50"],
                    lat["p90"],
                    lat["p99"],
                    row["per_frame_ms"],
                    row["throughput_fps"],
                    result.get("startup_s"),
                    result.get("peak_rss_mib"),
                    result.get("gpu_mem_mib"),
                ]
            )
    machine = report.get("machine", {})
    head = (
        f"bench engine: {report['model']} on {report['video']} input {_shape(report)}, "
        f"{report['threads']} thread(s); {machine.get('cpu', '?')}, "
        f"{machine.get('logical_cores', '?')} cores, "
        f"load {machine.get('load_average')}"
    )
    return "\n".join([head, harness.table(HEADERS, rows), *notes])


def _shape(report: Mapping[str, Any]) -> str:
    for result in report["results"]:
        if result.get("input_shape"):
            return "x".join(str(d) for d in result["input_shape"])
    return "?"


def chart(report: Mapping[str, Any], path: str) -> None:
    """Throughput and per-frame latency against batch size, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for result in report["results"]:
        rows = [r for r in result.get("rows", []) if "skipped" not in r]
        if result.get("error") or not rows:
            continue
        sizes = [r["batch"] for r in rows]
        left.plot(sizes, [r["throughput_fps"] for r in rows], marker="o", label=result["variant"])
        right.plot(sizes, [r["per_frame_ms"] for r in rows], marker="o", label=result["variant"])
    for axis, title, unit in ((left, "throughput", "frames/s"), (right, "p50 latency per frame", "ms")):
        axis.set_title(title)
        axis.set_xlabel("batch size")
        axis.set_ylabel(unit)
        axis.set_xscale("log", base=2)
        axis.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    machine = report.get("machine", {})
    fig.suptitle(
        f"{Path(str(report['model'])).name}, input {_shape(report)}, {report['threads']} thread(s) "
        f"- {machine.get('cpu', '?')}",
        fontsize=10,
    )
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)


def compare(old_path: str, new_path: str, json_path: str | None = None) -> int:
    """Row by row (variant, batch): NEW / OLD of latency p50, throughput, start-up and peak RSS."""
    from framewire import UsageError

    def load(path: str) -> dict[tuple[str, int], dict[str, Any]]:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"--compare: cannot read {path}: {exc}") from None
        if data.get("benchmark") != "engine":
            raise UsageError(f"--compare: {path} is not a bench engine result")
        out = {}
        for result in data.get("results", []):
            for row in result.get("rows", []):
                if "skipped" not in row:
                    out[(result["variant"], int(row["batch"]))] = {**row, "_result": result}
        return out

    old, new = load(old_path), load(new_path)
    rows = []
    compared = []
    for key in [k for k in new if k in old] + [k for k in new if k not in old]:
        n = new[key]
        o = old.get(key)
        if o is None:
            rows.append([key[0], key[1], None, n["latency_ms"]["p50"], None, None, None, None])
            continue
        ratio = {
            "latency_p50": _ratio(n["latency_ms"]["p50"], o["latency_ms"]["p50"]),
            "throughput": _ratio(n["throughput_fps"], o["throughput_fps"]),
            "startup": _ratio(n["_result"].get("startup_s"), o["_result"].get("startup_s")),
            "peak_rss": _ratio(n["_result"].get("peak_rss_mib"), o["_result"].get("peak_rss_mib")),
        }
        compared.append({"variant": key[0], "batch": key[1], "new_over_old": ratio})
        rows.append(
            [
                key[0],
                key[1],
                o["latency_ms"]["p50"],
                n["latency_ms"]["p50"],
                ratio["latency_p50"],
                ratio["throughput"],
                ratio["startup"],
                ratio["peak_rss"],
            ]
        )
    headers = (
        "variant",
        "batch",
        "old p50 ms",
        "new p50 ms",
        "p50 new/old",
        "frames/s new/old",
        "start-up new/old",
        "RSS new/old",
    )
    harness.say(f"bench engine --compare: {old_path} -> {new_path}\n" + harness.table(headers, rows))
    missing = [k for k in old if k not in new]
    for variant, batch in missing:
        harness.say(f"{variant} batch {batch}: only in {old_path}")
    harness.write_json(
        json_path, {"benchmark": "engine-compare", "old": old_path, "new": new_path, "rows": compared}
    )
    return 0


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0:
        return None
    return new / old
