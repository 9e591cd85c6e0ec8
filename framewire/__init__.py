"""framewire's Python API: start a job from a config and wait for its report (`start`, `Job`), run a
job in this program and take its results as they come (`Pipeline`), or read a running daemon's
results (`Client`). The README's "Python" section and docs/guides/plugins.md show them.
`framewire.components` holds the building blocks for a loop of one's own (tasks, engines, video)."""

from pkgutil import extend_path

# From a checkout's root (`python run_pipeline.py`, pytest), this folder is found before the installed
# package, but framewire.pipeline, .stages and .engines live in folders beside it (pyproject's
# package-dir). The strict editable install's link tree has them all: adding every `framewire` folder on
# sys.path finds them there. In an ordinary install there is one such folder and this changes nothing.
__path__ = extend_path(__path__, __name__)

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framewire.client import (
        ClipClosed, Client, EndOfStream, FrameRecord, KeyRefused, Message, ProtocolError, SegmentClosed,
        parse,
    )
    from framewire.config import Config, load_config, validate_config
    from framewire.embed import Pipeline
    from framewire.pipeline.errors import (
        ConfigError, EngineError, FramewireError, JobFailed, JobTimeout, SourceError, UsageError,
    )
    from framewire.pipeline.plan import Report
    from framewire.registry import Registry
    from framewire.runner import Job, start

# Loaded on first use: every module of the runtime is under this package, and a worker importing
# framewire.pipeline.* must not pay for OpenCV and the composition root it never uses.
_PUBLIC = {
    "Client": "framewire.client", "EndOfStream": "framewire.client", "FrameRecord": "framewire.client",
    "Message": "framewire.client", "ProtocolError": "framewire.client", "SegmentClosed": "framewire.client",
    "parse": "framewire.client", "Pipeline": "framewire.embed", "start": "framewire.runner",
    "Job": "framewire.runner", "Report": "framewire.pipeline.plan", "Config": "framewire.config",
    "load_config": "framewire.config", "validate_config": "framewire.config", "Registry": "framewire.registry",
    "FramewireError": "framewire.pipeline.errors", "ConfigError": "framewire.pipeline.errors",
    "EngineError": "framewire.pipeline.errors", "SourceError": "framewire.pipeline.errors",
    "UsageError": "framewire.pipeline.errors", "JobFailed": "framewire.pipeline.errors",
    "JobTimeout": "framewire.pipeline.errors", "KeyRefused": "framewire.client",
    "ClipClosed": "framewire.client",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'framewire' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
