"""The lines a run ends with: each source's frames and its own rate while it ran, the outputs'
totals, and one line for the job that says where the results went.

A source's rate is over the time it ran (its first frame in to its last frame written:
`Report.active_s`), not over the job's: a daemon kept running for a minute that read a 20-second
file says the file's rate, not its frames over the minute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from framewire.config import Config
from framewire.pipeline.plan import Report

MAX_DESTINATIONS = 8
"""The job's line names this many destinations at most, then how many more."""


@dataclass
class Summary:
    """What `framewire run` prints at its end (text), or the fields of its JSON object."""

    lines: list[str] = field(default_factory=list)
    """A line per source, then one per output that keeps totals."""
    job: str = ""
    """The job's line: frames, time, restarts, and where the outputs went."""
    fields: dict[str, Any] = field(default_factory=dict)


def summarize(report: Report, config: Config | None) -> Summary:
    """The summary of a finished job; `config` names the outputs' destinations."""
    done = Summary()
    sources: dict[str, dict[str, Any]] = {}
    for source_id in report.frames:
        counts = source_counts(report, source_id)
        sources[source_id] = counts
        done.lines.append(source_line(source_id, counts))
    for name, c in report.outputs.items():
        if "queued" not in c:  # another output's totals (a recording's packets lost): as they are
            done.lines.append(f"{name}: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in c.items()))
            continue
        done.lines.append(  # the sinks' totals: what reached the broker, what did not
            f"{name}: {c.get('delivered', 0)} delivered of {c.get('queued', 0)} queued, "
            f"{c.get('dropped', 0)} dropped, {c.get('failed', 0)} failed, "
            f"{c.get('reconnects', 0)} reconnect(s)"
        )
    total = sum(report.frames.values())
    restarts = sum(report.restarts.values())
    places = destinations(config, list(report.frames)) if config is not None else []
    shown = ", ".join(places[:MAX_DESTINATIONS]) + (
        f" (and {len(places) - MAX_DESTINATIONS} more)" if len(places) > MAX_DESTINATIONS else ""
    )
    many = f" from {len(report.frames)} sources" if len(report.frames) > 1 else ""
    done.job = (
        f"framewire: {total} frames{many} in {report.elapsed_s:.1f} s"
        + (f", {restarts} worker restart(s)" if restarts else "")
        + (", stopped early" if report.stopped else "")
        + (f"; outputs: {shown}" if places else "")
    )
    fps = total / report.elapsed_s if report.elapsed_s > 0 else 0.0
    done.fields = {
        "frames": total, "elapsed_s": round(report.elapsed_s, 3), "fps": round(fps, 2),
        "restarts": restarts, "stopped": report.stopped, "exit_code": report.exit_code,
        "sources": sources, "outputs": report.outputs, "destinations": places,
    }  # fmt: skip
    return done


def source_counts(report: Report, source_id: str) -> dict[str, Any]:
    """A source's totals, and its rate over the time it ran (None when it wrote no frame)."""
    frames = report.frames[source_id]
    active = report.active_s.get(source_id)
    return {
        "frames": frames, "read": report.read.get(source_id, frames),
        "dropped": report.dropped.get(source_id, 0), "failed": report.failed.get(source_id, 0),
        "error": report.source_errors.get(source_id),
        "active_s": active, "fps": round(frames / active, 2) if active else None,
    }  # fmt: skip


def source_line(source_id: str, counts: dict[str, Any]) -> str:
    """`cam: 120 frames in 4.0 s, 30.0 fps (125 read, 5 dropped)`."""
    frames = counts["frames"]
    extra = [f"{counts['read']} read"] if counts["read"] != frames else []
    extra += [f"{counts[k]} {k}" for k in ("dropped", "failed") if counts[k]]
    extra += ["error"] if counts["error"] else []
    ran = f" in {counts['active_s']:.1f} s, {counts['fps']:.1f} fps" if counts["fps"] else ""
    return f"{source_id}: {frames} frames{ran}" + (f" ({', '.join(extra)})" if extra else "")


def destinations(config: Config, source_ids: list[str]) -> list[str]:
    """Where the outputs wrote: each output's file, folder or endpoint per source, in config order,
    each named once (a zmq endpoint serves every source)."""
    places: list[str] = []
    for output in config.outputs:
        for source_id in source_ids:
            place = output.destination(source_id)
            if place is not None and place not in places:
                places.append(place)
    return places
