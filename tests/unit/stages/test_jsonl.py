"""JsonlWriter: one compact JSON line per record, parent directories made, close idempotent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from framewire.pipeline.errors import FramewireError
from framewire.stages.outputs.jsonl import JsonlWriter

pytestmark = pytest.mark.timeout(60)


def test_one_compact_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "out.jsonl"
    writer = JsonlWriter(str(path))
    writer.open()
    writer.write({"source": "cam", "seq": 0, "faces": []})
    writer.write({"source": "cam", "seq": 1, "faces": [{"box": [1, 2, 3, 4], "score": 0.5}], "name": "é"})
    writer.close()
    writer.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == '{"source":"cam","seq":0,"faces":[]}'
    assert [json.loads(line)["seq"] for line in lines] == [0, 1]
    assert json.loads(lines[1])["name"] == "é"
    assert writer.records == 2


def test_numpy_values_become_plain_json(tmp_path: Path) -> None:
    path = tmp_path / "np.jsonl"
    with JsonlWriter(str(path)) as writer:
        writer.write({"score": np.float32(0.25), "n": np.int64(3), "box": np.array([1, 2])})
    assert json.loads(path.read_text()) == {"score": 0.25, "n": 3, "box": [1, 2]}


def test_records_that_are_not_json_are_refused(tmp_path: Path) -> None:
    with JsonlWriter(str(tmp_path / "x.jsonl")) as writer:
        with pytest.raises(FramewireError, match="record 0 is not JSON"):
            writer.write({"bad": object()})
        with pytest.raises(FramewireError, match="record 0 is not JSON"):
            writer.write({"nan": float("nan")})


def test_write_outside_open_and_unwritable_path(tmp_path: Path) -> None:
    writer = JsonlWriter(str(tmp_path / "x.jsonl"))
    with pytest.raises(FramewireError, match="before open"):
        writer.write({})
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FramewireError, match=f"jsonl output {blocker}/out.jsonl: cannot write"):
        JsonlWriter(str(blocker / "out.jsonl")).open()
