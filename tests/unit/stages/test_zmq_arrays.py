"""The zmq output carries a secondary model's embeddings as binary parts after the header, each
described in the header's `arrays`, and the record's version is 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zmq

from framewire.config import ZmqOutput
from framewire.pipeline.frame import Frame, StageContext
from framewire.stages.outputs.sinks import ZmqSink

pytestmark = pytest.mark.timeout(30)


def test_embeddings_follow_the_header_as_described(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/out.sock"
    sink = ZmqSink(ZmqOutput(kind="zmq", endpoint=endpoint, mode="push"))
    sink.start(StageContext("output0.zmq", 0))
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(endpoint)
    try:
        vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
        frame = Frame("cam", 4, 4, 0.16, 64, 48)
        frame.result = {"detections": [
            {"box": [1, 2, 3, 4], "score": 0.9, "class_id": 0, "label": "person", "attributes": {"reid": {"size": 3, "embedding": 0}}},
            {"box": [5, 6, 7, 8], "score": 0.8, "class_id": 0, "label": "person", "attributes": {"reid": {"size": 3, "embedding": 1}}},
        ]}  # fmt: skip
        frame.tensors = {"embeddings.reid": vectors}
        list(sink.process(frame))
        assert pull.poll(5000)
        topic, header, *rest = pull.recv_multipart()
        record = json.loads(header)
        assert topic == b"cam" and record["v"] == 2
        assert record["arrays"] == [{"name": "embeddings.reid", "dtype": "float32", "shape": [2, 3]}]
        assert len(rest) == 1
        received = np.frombuffer(rest[0], dtype=np.float32).reshape(2, 3)
        row = record["results"]["detections"][1]["attributes"]["reid"]["embedding"]
        np.testing.assert_array_equal(received[row], vectors[1])
        list(sink.flush("cam"))
        end = json.loads(pull.recv_multipart()[1])
        assert end == {"v": 2, "source": "cam", "eos": True, "msg": 1}  # msg: its number on the topic
    finally:
        pull.close(linger=0)
        ctx.term()
        sink.stop()
