"""The passthrough recording: the source's own packets in key-frame segments, without re-encoding."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import av
import pytest

from framewire.media.adts import adts, audio_specific_config, without_adts
from framewire.media.remux import PassthroughRecording, Templates, annex_b, init_segment, length_prefixed
from framewire.media.segments import Retention
from framewire.sources.file import FileSource
from framewire.sources.packets import PacketTap, TapSpec, tapped
from tests.support import clips

pytestmark = pytest.mark.timeout(120)

VIDEOS = Path(__file__).resolve().parents[3] / "assets" / "videos"


def read_all(source: object) -> int:
    source.open()  # type: ignore[attr-defined]
    count = sum(1 for _ in source.frames())  # type: ignore[attr-defined]
    source.close()  # type: ignore[attr-defined]
    return count


def packets_of(path: Path | str, kind: str = "video") -> list[tuple[bytes, int | None, bool]]:
    """(sha1 of the bytes, pts, key) of every packet of the first stream of `kind`."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0] if kind == "video" else container.streams.audio[0]
        return [
            (hashlib.sha1(bytes(p)).digest(), p.pts, p.is_keyframe) for p in container.demux(stream) if p.size
        ]


def test_a_file_recorded_in_key_frame_segments_holds_its_packets_unchanged(tmp_path: Path) -> None:
    src = clips.make_clip(tmp_path / "in.mp4", frames=125, audio=True, width=320, height=240)
    # make_clip puts a key frame every 250 frames by default: re-encode with one a second.
    src = make_gop_clip(tmp_path / "gop.mp4", frames=125)
    spec = TapSpec(passthrough=((str(tmp_path / "rec" / "{source_id}-{index:04d}.mp4"), 1.0, Retention()),))
    frames = read_all(tapped(lambda: FileSource("cam", str(src)), "cam", spec))
    assert frames == 125
    segments = sorted((tmp_path / "rec").glob("cam-*.mp4"))
    assert [s.name for s in segments] == [f"cam-{i:04d}.mp4" for i in range(5)]  # a key frame a second
    recorded = [p for s in segments for p in packets_of(s)]
    assert [(h, k) for h, _, k in recorded] == [(h, k) for h, _, k in packets_of(src)]
    assert all(packets_of(s)[0][2] for s in segments), "every segment starts at a key frame"
    times = [t for s in segments for t in clips.video_times(s)]
    assert times == clips.video_times(src), "the segments' times go on from one to the next"
    assert not list((tmp_path / "rec").glob("*.part"))


def make_gop_clip(path: Path, frames: int, fps: int = 25, audio: bool = True) -> Path:
    """An H.264 clip with a key frame every second (a camera's), AAC audio beside it."""
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = 320, 240, "yuv420p"
        video.options = {
            "preset": "ultrafast",
            "g": str(fps),
            "keyint_min": str(fps),
            "sc_threshold": "0",
            "bf": "0",
        }
        sound = container.add_stream("aac", rate=48000, layout="mono") if audio else None
        written = 0
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(clips.draw_frame(index, 320, 240), format="bgr24")
            frame.pts = index
            container.mux(video.encode(frame))
            if sound is not None:
                written = clips._write_tone(container, sound, written, round((index + 1) / fps * 48000))
        container.mux(video.encode(None))
        if sound is not None:
            container.mux(sound.encode(None))
    return path


def test_the_audio_is_copied_beside_the_pictures(tmp_path: Path) -> None:
    src = make_gop_clip(tmp_path / "gop.mp4", frames=50)
    spec = TapSpec(passthrough=((str(tmp_path / "rec-{index}.mp4"), 60.0, Retention()),))
    read_all(tapped(lambda: FileSource("cam", str(src)), "cam", spec))
    out = tmp_path / "rec-0.mp4"
    assert clips.audio_codec(out) == "aac"
    recorded, source = (
        [h for h, _, _ in packets_of(out, "audio")],
        [h for h, _, _ in packets_of(src, "audio")],
    )
    # What came before the first picture has no segment to go in: at most the first packet or two.
    assert recorded == source[len(source) - len(recorded) :] and len(source) - len(recorded) <= 2


def test_retention_deletes_the_oldest_segments(tmp_path: Path) -> None:
    src = make_gop_clip(tmp_path / "gop.mp4", frames=150, audio=False)
    spec = TapSpec(passthrough=((str(tmp_path / "r" / "{index}.mp4"), 1.0, Retention(keep_segments=2)),))
    read_all(tapped(lambda: FileSource("cam", str(src)), "cam", spec))
    assert sorted(p.name for p in (tmp_path / "r").glob("*.mp4")) == ["4.mp4", "5.mp4"]


class FakeConnection:
    """The streams of a real file, read as a camera's connection would hand them over."""

    def __init__(self, path: Path) -> None:
        self.container = av.open(str(path))
        self.streams = [self.container.streams.video[0]]

    def packets(self) -> list[av.Packet]:
        return [p for p in self.container.demux(self.streams[0]) if p.size]


def test_a_reconnected_camera_goes_on_from_where_it_stopped(tmp_path: Path) -> None:
    src = make_gop_clip(tmp_path / "gop.mp4", frames=50, audio=False)
    recording = PassthroughRecording(str(tmp_path / "{index}.mp4"), "cam", segment_s=60)
    tap = PacketTap("cam", [recording], [])
    for _ in range(2):  # the camera's clock starts over at each connection
        connection = FakeConnection(src)
        tap.begin(connection.streams)
        for packet in connection.packets():
            tap.packet(packet)
        tap.end()
        time.sleep(0.3)
    first, second = clips.video_times(tmp_path / "0.mp4"), clips.video_times(tmp_path / "1.mp4")
    assert len(first) == len(second) == 50
    gap = second[0] - first[-1]
    assert 0.3 <= gap < 1.0, f"the second connection starts after the first plus the time offline ({gap})"


def test_a_killed_recording_plays_up_to_its_last_fragment(tmp_path: Path) -> None:
    src = make_gop_clip(tmp_path / "gop.mp4", frames=250, audio=False)
    script = (
        "import os, sys\n"
        "from framewire.media.remux import PassthroughRecording\n"
        "from framewire.sources.packets import PacketTap\n"
        "import av\n"
        f"c = av.open({str(src)!r}); s = c.streams.video[0]\n"
        f"r = PassthroughRecording({str(tmp_path / '{index}.mp4')!r}, 'cam', segment_s=600)\n"
        "tap = PacketTap('cam', [r], [])\n"
        "tap.begin([s])\n"
        "for i, p in enumerate(p for p in c.demux(s) if p.size):\n"
        "    tap.packet(p)\n"
        "    if i == 130: os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    out = tmp_path / "0.mp4"
    assert out.exists() and not list(tmp_path.glob("*.part"))
    played = clips.count_frames(out)
    assert 100 <= played <= 131, played  # every fragment closed before the kill (a key frame a second)


def test_the_init_segment_carries_the_codec_to_another_process(tmp_path: Path) -> None:
    src = make_gop_clip(tmp_path / "gop.mp4", frames=10)
    with av.open(str(src)) as container:
        init = init_segment(list(container.streams))
        video = container.streams.video[0]
        extradata = bytes(video.codec_context.extradata or b"")
    templates = Templates(init)
    kinds = [str(s.type) for s in templates.streams]
    assert kinds == ["video", "audio"]
    assert bytes(templates.streams[0].codec_context.extradata or b"") == extradata
    templates.close()
    assert os.path.getsize(src) > len(init)


def test_an_rtsp_camera_with_b_frames_is_recorded_from_its_first_key_frame(tmp_path: Path) -> None:
    """FFmpeg's RTSP demuxer gives the first packet no time and, with B-frames, the next ones a pts
    but no dts until it has seen as many as the stream reorders (two on bikes.mp4, as seen with
    GStreamer's RTSP server): none of them is lost, and each picture keeps its time in the file."""
    src = tmp_path / "street.mp4"
    clips.splice_gops(VIDEOS / "bikes.mp4", src, [(0.0, 3.0)])  # two groups of pictures, with B-frames
    recording = PassthroughRecording(str(tmp_path / "{index}.mp4"), "cam", segment_s=60)
    tap = PacketTap("cam", [recording], [])
    connection = FakeConnection(src)
    tap.begin(connection.streams)
    for index, packet in enumerate(connection.packets()):
        if index < 3:
            packet.dts = None
        if index == 0:
            packet.pts = None
        tap.packet(packet)
    tap.end()
    assert [(h, k) for h, _, k in packets_of(tmp_path / "0.mp4")] == [(h, k) for h, _, k in packets_of(src)]
    assert clips.video_times(tmp_path / "0.mp4") == clips.video_times(src)


def test_annex_b_packets_get_the_lengths_an_mp4_sample_holds(tmp_path: Path) -> None:
    """An RTSP camera's packets have start codes; a clip's MP4 (its parameters an avcC record, from
    the init segment) needs each NAL unit after its length, or its samples are neither decodable by a
    strict player nor marked as key frames."""
    with av.open(str(VIDEOS / "bikes.mp4")) as container:
        stream = container.streams.video[0]
        assert not annex_b(stream)
        samples = [bytes(p) for p in container.demux(stream) if p.size][:30]
    for sample in samples:
        units, at = [], 0
        while at < len(sample):
            size = int.from_bytes(sample[at : at + 4], "big")
            units.append(sample[at + 4 : at + 4 + size])
            at += 4 + size
        as_sent = b"".join(b"\x00\x00\x00\x01" + unit for unit in units)
        assert length_prefixed(as_sent) == sample
        assert length_prefixed(b"\x00\x00\x01" + units[0]) == sample[: 4 + len(units[0])]


def ts_copy(path: Path) -> Path:
    """bigbuckbunny.mp4's own packets in MPEG-TS (as an SRT or UDP camera sends): AAC with ADTS."""
    with av.open(str(VIDEOS / "bigbuckbunny.mp4")) as src, av.open(str(path), mode="w") as out:
        copies = {
            s.index: out.add_stream_from_template(s) for s in (src.streams.video[0], src.streams.audio[0])
        }
        for packet in src.demux():
            if packet.size:
                packet.stream = copies[packet.stream.index]
                out.mux(packet)
    return path


def audio_samples(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


def test_an_mpeg_ts_source_with_aac_is_recorded_with_its_sound(tmp_path: Path) -> None:
    """MP4 takes no ADTS: the recording gets the AudioSpecificConfig the ADTS headers say, and the
    packets without them (the source failed at its first frame before)."""
    src = ts_copy(tmp_path / "cam.ts")
    with av.open(str(src)) as container:
        stream = container.streams.audio[0]
        first = next(bytes(p) for p in container.demux(stream) if p.size)
        assert adts(stream)
        said = (
            ((first[2] >> 6) + 1) << 11
            | ((first[2] >> 2) & 15) << 7
            | ((first[2] & 1) << 2 | first[3] >> 6) << 3
        )
        assert audio_specific_config(stream) == said.to_bytes(2, "big")
        templates = Templates(init_segment([container.streams.video[0], stream]))
        assert templates.streams[1].codec_context.extradata == said.to_bytes(2, "big"), "the clips' too"
        templates.close()
    spec = TapSpec(passthrough=((str(tmp_path / "rec" / "{source_id}-{index}.mp4"), 60.0, Retention()),))
    assert read_all(tapped(lambda: FileSource("cam", str(src)), "cam", spec)) == 132
    recorded = tmp_path / "rec" / "cam-0.mp4"
    assert clips.count_frames(recorded) == 132 and clips.video_times(recorded) == clips.video_times(src)
    sound = after_the_first_picture(src)  # a segment starts at a key frame: the sound before it is not kept
    assert raw_audio(recorded) == [without_adts(d) for d in sound] and len(sound) > 100
    assert audio_samples(recorded) == 1024 * len(sound), "every AAC frame decodes"
    assert without_adts(sound[0]) == raw_audio(VIDEOS / "bigbuckbunny.mp4")[len(raw_audio(src)) - len(sound)]


def raw_audio(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(audio=0) if p.size]


def after_the_first_picture(path: Path) -> list[bytes]:
    """The audio packets demuxed after the first video packet, as they are (ADTS)."""
    seen, out = False, []
    with av.open(str(path)) as container:
        for packet in container.demux():
            seen = seen or packet.stream.type == "video"
            if seen and packet.stream.type == "audio" and packet.size:
                out.append(bytes(packet))
    return out
