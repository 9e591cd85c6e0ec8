"""Live video outputs: the composited frames of each source pushed to an RTSP/RTMP server (`push`)
or written as a rolling HLS window (`hls`), each by a sender thread of its own (media.live), so a
dead receiver or a slow disk never slows the pipeline; what is dropped and every reconnect is counted
and logged."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path

from framewire.config.video_out import HlsOutput, LiveVideoOutput, PushOutput
from framewire.media.live import Encoding, LiveCounts, LiveSender, Target, counts_line, push_target
from framewire.pipeline import paths, uris
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.stages.outputs.record import composited_image

log = logging.getLogger(__name__)

PLAYLIST = "index.m3u8"
SEGMENTS = "seg%05d.ts"
OWN_FILES = re.compile(r"^(index\.m3u8|seg\d{5,}\.ts)(\.tmp)?$")
"""The files an hls output writes in its folder: those left by an earlier run are removed at open."""


class _LiveSink(Stage):
    """One sender per source, started on its first frame and ended on its end of stream."""

    facts = Facts(writes_output=True)

    reads = ("image", "output")  # the composited image when there is one (record.composited_image)

    def __init__(self, config: LiveVideoOutput) -> None:
        self.config = config
        self.streams: dict[str, dict[str, object]] = {}
        self.senders: dict[str, LiveSender] = {}
        self.ended = LiveCounts()
        """The counts of the streams that ended (every source's, every run's)."""
        self.name = config.kind

    def start(self, ctx: StageContext) -> None:
        self.streams = ctx.streams
        self.name = ctx.stage

    def counters(self) -> dict[str, dict[str, int]]:
        """This output's running totals over its sources (frames, sent, dropped, reconnects...): the
        job's report and metrics carry them where the runtime asks for them."""
        total = LiveCounts(**vars(self.ended))
        for sender in list(self.senders.values()):
            total.add(sender.counts)
        return {self.name: total.as_dict()}

    def _sender(self, source_id: str) -> LiveSender:
        raise NotImplementedError

    def _encoding(self, source_id: str, keyint_s: float) -> Encoding:
        info = self.streams.get(source_id) or {}
        fps = Fraction(str(info.get("fps") or "25"))
        time_base = Fraction(str(info.get("time_base") or f"1/{fps}"))
        c = self.config
        keyint = c.keyint or max(1, round(float(fps) * keyint_s))
        return Encoding(fps, time_base, c.preset, c.tune, c.bitrate_kbps, keyint)

    def process(self, frame: Frame) -> Iterable[Frame]:
        sender = self.senders.get(frame.source_id)
        if sender is None:
            sender = self.senders[frame.source_id] = self._sender(frame.source_id)
        sender.put(composited_image(frame), frame.pts)
        return ()

    def flush(self, source_id: str) -> Iterable[Frame]:
        self._finish(source_id, self.config.timeout_s * 2)
        return ()

    def _finish(self, source_id: str, timeout_s: float) -> None:
        sender = self.senders.pop(source_id, None)
        if sender is None:
            return
        counts = sender.close(timeout_s)
        lossy = counts.dropped or counts.failures
        log.log(logging.WARNING if lossy else logging.INFO, "%s: ended: %s", sender.name, counts_line(counts))
        self.ended.add(counts)

    def stop(self) -> None:
        """Every stream ended at once, then waited for together: N stuck receivers cost one timeout, not N."""
        for sender in self.senders.values():
            sender.end()
        deadline = time.monotonic() + self.config.timeout_s * 2
        for source_id in list(self.senders):
            self._finish(source_id, max(0.1, deadline - time.monotonic()))

    def describe(self) -> dict[str, object]:
        return {"live_video": self.config.kind}


class PushSink(_LiveSink):
    """`kind: push`: each source's composited video sent to an RTSP (TCP) or RTMP server."""

    Config = PushOutput

    def __init__(self, config: PushOutput) -> None:
        super().__init__(config)
        self.push = config

    def _sender(self, source_id: str) -> LiveSender:
        url = paths.render(self.push.url, source_id)
        c = self.push
        target = push_target(url, c.muxer, c.timeout_s, uris.redact(url))
        return LiveSender(
            f"push output {source_id}", lambda: target, self._encoding(source_id, 2.0),
            queue_frames=c.queue_frames, backoff_s=c.reconnect_backoff_s, timeout_s=c.timeout_s,
        )  # fmt: skip


class HlsSink(_LiveSink):
    """`kind: hls`: each source's playlist and rolling segments in its folder (FFmpeg's hls muxer)."""

    Config = HlsOutput

    def __init__(self, config: HlsOutput) -> None:
        super().__init__(config)
        self.hls = config

    def _sender(self, source_id: str) -> LiveSender:
        folder = Path(paths.render(self.hls.path, source_id))
        c = self.hls
        options = {
            "hls_time": f"{c.segment_s:g}",
            "hls_list_size": str(c.keep_segments),
            # delete_segments: a rolling window; temp_file: a segment appears under its name only
            # once complete, so the HTTP server never serves half of one.
            "hls_flags": "delete_segments+temp_file+independent_segments",
            "hls_segment_filename": str(folder / SEGMENTS),
        }
        target = Target(str(folder / PLAYLIST), "hls", options, str(folder / PLAYLIST))
        return LiveSender(
            f"hls output {source_id}", lambda: target, self._encoding(source_id, c.segment_s),
            queue_frames=c.queue_frames, backoff_s=c.reconnect_backoff_s, timeout_s=c.timeout_s,
            prepare=lambda: _clear(folder),
        )  # fmt: skip


def _clear(folder: Path) -> None:
    """Make the folder, and remove the playlist and segments an earlier run left there (only those:
    a player must not be handed an old window as if it were live)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(folder):
        if OWN_FILES.match(name):
            try:
                (folder / name).unlink()
            except FileNotFoundError:
                pass
