"""The push and hls output stages on frames (no hub): one sender per source, ended on the source's
end of stream, counted over the output's life; an hls folder cleared of an earlier run's files."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from framewire.config.video_out import HlsOutput, PushOutput
from framewire.pipeline.frame import Frame, StageContext
from framewire.stages.outputs.live import HlsSink, PushSink
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(60)

STREAM = {"width": 64, "height": 48, "fps": "25/1", "time_base": "1/25"}


def frame(source_id: str, seq: int) -> Frame:
    image = np.full((48, 64, 3), seq % 256, np.uint8)
    return Frame(source_id, seq, seq, 0.0, 64, 48, inline={"image": image})


def test_hls_one_stream_per_source_ended_on_its_end(tmp_path: Path) -> None:
    stale = tmp_path / "a" / "seg00042.ts"
    stale.parent.mkdir()
    stale.write_bytes(b"old")
    (tmp_path / "a" / "keep.txt").write_text("not ours")
    sink = HlsSink(HlsOutput(kind="hls", path=str(tmp_path / "{source_id}"), segment_s=1, queue_frames=100))
    sink.start(StageContext("output1.hls", 0, {"a": STREAM, "b": STREAM}))
    for seq in range(50):
        sink.process(frame("a", seq))
        sink.process(frame("b", seq))
    sink.flush("a")
    assert set(sink.senders) == {"b"}
    sink.stop()
    for name in ("a", "b"):
        playlist = (tmp_path / name / "index.m3u8").read_text()
        assert playlist.count(".ts") == 2 and "#EXT-X-ENDLIST" in playlist
        with av.open(str(tmp_path / name / "index.m3u8")) as container:
            assert len(list(container.decode(video=0))) == 50
    assert not stale.exists() and (tmp_path / "a" / "keep.txt").exists()
    counts = sink.counters()["output1.hls"]
    assert (counts["frames"], counts["sent"], counts["dropped"], counts["connects"]) == (100, 100, 0, 2)


def test_push_to_nobody_counts_every_frame_dropped() -> None:
    config = PushOutput(kind="push", url=f"rtsp://127.0.0.1:{free_port()}/{{source_id}}",
                        reconnect_backoff_s=(0.05, 0.1), queue_frames=2)  # fmt: skip
    sink = PushSink(config)
    sink.start(StageContext("output0.push", 0, {"cam": STREAM}))
    for seq in range(30):
        sink.process(frame("cam", seq))
    sink.stop()
    counts = sink.counters()["output0.push"]
    assert counts["frames"] == 30 and counts["sent"] == 0 and counts["dropped"] == 30 and counts["failures"] >= 1
