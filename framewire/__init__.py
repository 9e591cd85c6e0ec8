"""framewire's Python API: read a running daemon's results (`Client`), or run a job in this program
and take its results as they come (`Pipeline`). The README's "Python" section shows both."""

from framewire.client import Client, EndOfStream, FrameRecord, Message, ProtocolError, SegmentClosed, parse
from framewire.embed import Pipeline

__all__ = ["Client", "EndOfStream", "FrameRecord", "Message", "Pipeline", "ProtocolError", "SegmentClosed", "parse"]
