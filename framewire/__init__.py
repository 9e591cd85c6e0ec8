"""framewire's Python API: read a running daemon's results (`Client`), or run a job in this program
and take its results as they come (`Pipeline`). The README's "Python" section shows both."""

from pkgutil import extend_path

# From a checkout's root (`python run_pipeline.py`, pytest), this folder is found before the installed
# package, but framewire.pipeline, .stages and .engines live in folders beside it (pyproject's
# package-dir). The strict editable install's link tree has them all: adding every `framewire` folder on
# sys.path finds them there. In an ordinary install there is one such folder and this changes nothing.
__path__ = extend_path(__path__, __name__)

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framewire.client import Client, EndOfStream, FrameRecord, Message, ProtocolError, SegmentClosed, parse
    from framewire.embed import Pipeline

# Loaded on first use: every module of the runtime is under this package, and a worker importing
# framewire.pipeline.* must not pay for OpenCV and the composition root it never uses.
_PUBLIC = {
    "Client": "framewire.client", "EndOfStream": "framewire.client", "FrameRecord": "framewire.client",
    "Message": "framewire.client", "ProtocolError": "framewire.client", "SegmentClosed": "framewire.client",
    "parse": "framewire.client", "Pipeline": "framewire.embed",
}

__all__ = ["Client", "EndOfStream", "FrameRecord", "Message", "Pipeline", "ProtocolError", "SegmentClosed", "parse"]


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
