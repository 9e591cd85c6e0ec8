"""The Client's public surface: one name for every wait (`timeout`, the old `idle_timeout` still
taken with a DeprecationWarning), and docstrings that name every parameter, what comes back and what
is raised, for the generated API reference."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest

from framewire.client import Client, decode_jpeg, parse
from framewire.pipeline.errors import UsageError

pytestmark = pytest.mark.timeout(30)


def test_every_wait_is_timeout_and_the_old_name_still_works(tmp_path: Path) -> None:
    with Client(f"ipc://{tmp_path}/nobody.sock") as client:  # no publisher: every wait runs out
        started = time.monotonic()
        assert client.receive(timeout=0.1) is None
        assert list(client.messages(timeout=0.1)) == []
        with pytest.warns(DeprecationWarning, match=r"idle_timeout=\) is now timeout="):
            assert list(client.messages(idle_timeout=0.1)) == []
        assert time.monotonic() - started < 5
        with pytest.raises(UsageError, match="not both it and idle_timeout"):
            client.messages(timeout=1, idle_timeout=1)
    with pytest.raises(UsageError, match="mode must be sub or pull, got 'pub'"):
        Client(f"ipc://{tmp_path}/x.sock", mode="pub")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "function", [Client.__init__, Client.receive, Client.messages, parse, decode_jpeg], ids=lambda f: f.__qualname__
)
def test_public_functions_document_every_parameter_return_and_error(function: object) -> None:
    doc = inspect.getdoc(function) or ""
    names = [n for n in inspect.signature(function).parameters if n != "self"]  # type: ignore[arg-type]
    for name in names:
        assert f"    {name}: " in doc, f"{function!r}: parameter {name} is not documented"
    sections = {line.strip() for line in doc.splitlines() if line.strip().endswith(":")}
    if names and function is not Client.__init__:
        assert "Returns:" in sections or "Yields:" in sections
    assert "Raises:" in sections or function is Client.receive


def test_every_public_method_says_what_it_does() -> None:
    for name, member in inspect.getmembers(Client, inspect.isfunction):
        if not name.startswith("_") or name in ("__init__", "__iter__", "__enter__"):
            assert inspect.getdoc(member), f"Client.{name} has no docstring"


def test_a_clip_announcement_is_read_as_a_closed_clip() -> None:
    import json

    from framewire.client import ClipClosed, parse

    header = {"v": 2, "source": "cam", "event": "clip", "output": "output1.recording", "path": "rec/cam/clips/a.mp4",
              "id": 4, "start_s": 1.0, "end_s": 9.5, "first_event_s": 4.0, "last_event_s": 4.5, "frames": 212,
              "bytes": 1000, "events": [7, 8], "deleted": []}  # fmt: skip
    message = parse([b"cam", json.dumps(header).encode()])
    assert isinstance(message, ClipClosed)
    found = (message.path, message.frames, message.events, message.annotated, message.url)
    assert found == ("rec/cam/clips/a.mp4", 212, (7, 8), False, None)
    url = "http://127.0.0.1:8700/clips/4?output=output1.recording"
    message = parse([b"cam", json.dumps({**header, "url": url}).encode()])
    assert isinstance(message, ClipClosed) and message.url == url
