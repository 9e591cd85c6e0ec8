"""A config's job made ready for a benchmark run: its outputs moved into a folder of the run's own,
their files found and counted after, and the facts of the job a result records."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def describe_job(config: Any) -> dict[str, Any]:
    return {
        "sources": [
            {"id": s.id, "uri": s.uri, "realtime": s.realtime, "max_frames": s.max_frames}
            for s in config.sources
        ],
        "model": config.model.path,
        "task": config.model.task,
        "engine": config.engine.model_dump(mode="json"),
        "composite": [c.kind for c in config.composite],
        "outputs": [o.kind for o in config.outputs],
        "stages": config.stages.model_dump(mode="json"),
        "transport": config.transport.model_dump(mode="json"),
    }


def redirect_outputs(config: Any, folder: Path) -> Any:
    """The job with its output files in `folder`, its ZeroMQ outputs on ipc:// sockets there, and a
    JSONL output (for the latencies) when it has none."""
    from framewire import validate_config

    folder.mkdir(parents=True, exist_ok=True)
    raw = config.model_dump(mode="json", exclude_none=True)
    outputs = []
    for index, out in enumerate(raw["outputs"]):
        out = dict(out)
        if out["kind"] in ("video_file", "jsonl"):
            name = Path(out["path"]).name
            if "{source_id}" not in name:
                name = "{source_id}-" + name
            out["path"] = str(folder / f"{index}-{name}")
        elif out["kind"] == "zmq":
            out["endpoint"] = f"ipc://{folder}/zmq-{index}.sock"
        outputs.append(out)
    if not any(o["kind"] == "jsonl" for o in outputs):
        outputs.append({"kind": "jsonl", "path": str(folder / "records-{source_id}.jsonl")})
    raw["outputs"] = outputs
    return validate_config(raw, "bench")


def jsonl_paths(job: Any) -> dict[str, Path]:
    from framewire.components import JsonlOutput, resolve_path

    out = next(o for o in job.outputs if isinstance(o, JsonlOutput))
    return {s.id: Path(resolve_path(out.path, s.id)) for s in job.sources}


def count_outputs(job: Any) -> dict[str, int]:
    """Frames in every output file of the job: `<output index>:<source id>` -> frames."""
    import av

    from framewire.components import JsonlOutput, VideoFileOutput, resolve_path

    counts: dict[str, int] = {}
    for index, out in enumerate(job.outputs):
        for source in job.sources:
            if isinstance(out, VideoFileOutput):
                path = Path(resolve_path(out.path, source.id))
                n = -1
                if path.exists():  # counted by packet: a fragmented MP4's index says 0 frames
                    with av.open(str(path)) as container:
                        n = sum(1 for packet in container.demux(video=0) if packet.size)
                counts[f"{index}.video_file:{source.id}"] = n
            elif isinstance(out, JsonlOutput):
                path = Path(resolve_path(out.path, source.id))
                counts[f"{index}.jsonl:{source.id}"] = (
                    sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else -1
                )
    return counts
