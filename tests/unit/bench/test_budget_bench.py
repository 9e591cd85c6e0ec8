"""`bench budget`: the limit's arithmetic, the work alone timed on a real clip, the looped clip, the
live job it derives, the per-stream statistics, the py-spy summariser (classifying real stack shapes,
parsing raw output, splitting CPU seconds), and a smoke run of the file job on a few frames."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import av
import pytest

from bench import budget_file, budget_live, harness, limit, pyspy
from framewire import cli
from framewire.config import Policy, load_config

pytestmark = pytest.mark.timeout(60)


# --- the limit -----------------------------------------------------------------------------------


def test_file_share_sets_framewire_against_the_work_and_the_cores() -> None:
    share = limit.file_share(frames=100, cpu_s=1.5, wall_s=0.6, work_ms_per_frame=10.0, cores=2)
    assert share["framewire_ms_per_frame"] == pytest.approx(15.0)
    assert share["own_ms_per_frame"] == pytest.approx(5.0)
    assert share["cpu_ratio"] == pytest.approx(1.5)
    assert share["work_core_s"] == pytest.approx(1.0)
    assert share["limit_wall_s"] == pytest.approx(0.5)  # 1 core-second over 2 cores
    assert share["wall_ratio"] == pytest.approx(1.2)
    assert share["after_startup_ratio"] is None
    later = limit.file_share(
        frames=100, cpu_s=1.5, wall_s=0.6, work_ms_per_frame=10.0, cores=2, startup_s=0.2
    )
    assert later["after_startup_ratio"] == pytest.approx(0.8)  # 0.4 s from the first frame out


def test_live_share_gives_cores_a_stream_and_the_streams_the_cores_hold() -> None:
    # 3.35 ms of work a frame at 25 fps: 8.4% of a core a stream, 23.9 streams on 2 cores (issue 20).
    share = limit.live_share(streams=16, cpu_s=49.6, wall_s=25.0, work_ms_per_frame=3.35, fps=25, cores=2)
    assert share["work_cores_per_stream"] == pytest.approx(0.08375)
    assert share["stream_limit"] == pytest.approx(2 / 0.08375)
    assert share["framewire_cores_per_stream"] == pytest.approx(49.6 / 25.0 / 16)
    assert share["cpu_ratio"] == pytest.approx(0.124 / 0.08375)
    assert share["framewire_stream_limit"] == pytest.approx(2 / 0.124)
    assert share["framewire_ms_per_frame_out"] is None  # not told how many frames came out
    # A machine too busy to keep 16 streams: 6000 frames out in 25 s, not 10000; 8.27 ms a frame.
    busy = limit.live_share(streams=16, cpu_s=49.6, wall_s=25.0, work_ms_per_frame=3.35, fps=25, cores=2,
                            frames_out=6000)  # fmt: skip
    assert busy["framewire_ms_per_frame_out"] == pytest.approx(49.6 / 6000 * 1000)
    assert busy["frame_ratio"] == pytest.approx(49.6 / 6000 * 1000 / 3.35)
    assert busy["framewire_stream_limit_per_frame"] == pytest.approx(2 / (49.6 / 6000 * 25))


def test_work_counts_encode_only_when_the_job_writes_a_video() -> None:
    pieces = {"decode": 1.0, "model": 2.0, "encode": 4.0}
    assert limit.work_ms(pieces, with_encode=True) == 7.0
    assert limit.work_ms(pieces, with_encode=False) == 3.0
    assert limit.work_ms({"decode": 1.0, "model": None}, with_encode=True) == 1.0


def test_the_work_alone_times_decode_model_and_encode_on_one_thread(tiny_job: Path) -> None:
    config = load_config(str(tiny_job))
    work = limit.work_alone(config, config.sources[0].uri)
    assert work["frames"] == 12 and work["model_frames"] == 12
    assert work["encode"] == {"codec": "libx264", "preset": "ultrafast", "crf": 23}
    assert all(work["ms_per_frame"][k] > 0 for k in limit.WORK)
    assert work["work_ms_per_frame"] == pytest.approx(sum(work["ms_per_frame"].values()))
    timed = sum(work["cpu_s"].values())
    assert timed <= work["process_cpu_s"]  # one thread: the timed pieces are part of the process's time
    sampled = limit.work_alone(config, config.sources[0].uri, frames=6, model_every=3)
    assert sampled["frames"] == 6 and sampled["model_frames"] == 2


def test_the_plain_loop_s_own_steps_are_timed_beside_the_work_not_in_it(tiny_job: Path) -> None:
    config = load_config(str(tiny_job))
    work = limit.work_alone(config, config.sources[0].uri)
    loop = work["loop"]
    assert set(loop["ms_per_frame"]) == set(limit.LOOP) and all(v > 0 for v in loop["ms_per_frame"].values())
    assert loop["own_ms_per_frame"] == pytest.approx(sum(loop["ms_per_frame"].values()))
    assert loop["ratio"] == pytest.approx((work["work_ms_per_frame"] + loop["own_ms_per_frame"]) / work["work_ms_per_frame"])
    assert set(work["cpu_s"]) == set(limit.WORK)  # the limit holds the work only


def test_framewire_against_the_plain_loop_is_its_cpu_over_the_work_and_the_loop_s_steps() -> None:
    work = {"work_ms_per_frame": 4.0, "loop": {"own_ms_per_frame": 1.0}}
    assert limit.versus_loop(7.5, work) == pytest.approx(1.5)
    assert limit.versus_loop(None, work) is None
    assert limit.versus_loop(5.0, {"work_ms_per_frame": 4.0}) == pytest.approx(1.25)  # no loop timed: the work alone


def test_a_live_stream_s_work_is_timed_back_to_back_on_the_packets_it_kept(tiny_job: Path) -> None:
    # Live frames come 40 ms apart and work done as each comes runs cold: the limit is the work back
    # to back, on the stream's packets decoded again by a decoder of its own.
    config = load_config(str(tiny_job))
    work = limit.work_alone(config, config.sources[0].uri, live=True)
    assert work["frames"] == 12 and work["model_frames"] == 12
    assert all(work["ms_per_frame"][k] > 0 for k in limit.WORK)
    paced = work["paced"]
    assert all(paced["ms_per_frame"][k] > 0 for k in limit.WORK)
    assert paced["work_ms_per_frame"] == pytest.approx(sum(paced["ms_per_frame"].values()))
    assert set(work["cpu_s"]) == set(limit.WORK)  # the demuxing is in decode, not a piece of its own
    assert limit.work_alone(config, config.sources[0].uri)["paced"] is None  # a file runs back to back already


def test_the_kept_packets_decode_again_to_the_same_frames(tiny_job: Path) -> None:
    config = load_config(str(tiny_job))
    with av.open(config.sources[0].uri) as container:
        stream = limit._one_thread_decoder(container)
        packets: list[Any] = []
        first = [f.to_ndarray(format="yuv420p").tobytes() for f in limit._decoded(container, stream, limit.WorkTimer(), None, keep=packets)]
        timer = limit.WorkTimer()
        again = [f.to_ndarray(format="yuv420p").tobytes() for f in limit._redecoded(packets, stream, timer, None)]
        assert len(first) == 12 and again == first
        assert timer.count["decode"] == 12 and timer.cpu_s["decode"] > 0
        assert [f.pts for f in limit._redecoded(packets, stream, limit.WorkTimer(), 5)] == [
            f.pts for f in limit._redecoded(packets, stream, limit.WorkTimer(), None)][:5]


def test_the_reference_encoder_codes_each_frame_at_its_own_time(tiny_job: Path) -> None:
    # x264's rate control reads frame durations from the timestamps: without them it codes fewer
    # bits with less work than the job's writer does, and the limit would be too low.
    config = load_config(str(tiny_job))

    class Seen:
        def __init__(self) -> None:
            self.frames: list[tuple[Any, Any]] = []

        def encode(self, frame: Any) -> list[Any]:
            self.frames.append((frame.pts, frame.time_base))
            return []

    with av.open(config.sources[0].uri) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        codec = limit._encoder(frames[0].width, frames[0].height, stream.average_rate, stream.time_base,
                               config.outputs[0])  # fmt: skip
        assert codec.time_base == stream.time_base
        seen = Seen()
        for frame in frames:
            limit._encode(seen, frame.reformat(format="rgb24"), limit.WorkTimer())  # converted, still timed
    assert seen.frames == [(f.pts, stream.time_base) for f in frames]
    assert len({pts for pts, _ in seen.frames}) == len(frames)


def test_a_short_clip_is_looped_without_re_encoding(tiny_job: Path, tmp_path: Path) -> None:
    clip = load_config(str(tiny_job)).sources[0].uri
    path, frames = budget_file.looped_clip(clip, 30, tmp_path)
    assert (path, frames) == (str(tmp_path / "looped-face.mp4"), 36)
    with av.open(path) as container:
        decoded = list(container.decode(video=0))
    assert len(decoded) == 36
    times = [f.time for f in decoded]
    assert times == sorted(times) and len(set(times)) == 36  # the copies follow one another
    assert budget_file.looped_clip(clip, 12, tmp_path) == (clip, 12)  # long enough: itself


# --- the live job --------------------------------------------------------------------------------

LIVE = """
sources:
  - {id: cam, uri: clip.mp4, realtime: true, max_frames: 50, policy: block}
model: {path: model.onnx, task: face_detection}
composite: [{kind: blur}]
outputs: [{kind: video_file, path: "out/{source_id}.mp4"}, {kind: jsonl, path: "out/{source_id}.jsonl"}]
"""


def test_the_live_job_reads_n_streams_dropping_the_oldest(tmp_path: Path) -> None:
    job = budget_live.live_job(load_config("job.yaml", text=LIVE), "rtsp://127.0.0.1:5554/live", 3, 500, tmp_path)
    assert [s.id for s in job.sources] == ["cam0", "cam1", "cam2"]
    for source in job.sources:
        assert source.uri == "rtsp://127.0.0.1:5554/live" and source.is_live
        assert source.policy == Policy.DROP_OLDEST and source.max_staleness_ms == 500
        assert (source.realtime, source.max_frames) == (False, None)
    assert [o.kind for o in job.outputs] == ["jsonl"] and str(tmp_path) in job.outputs[0].path
    assert not job.composite  # nothing shows the pixels


def _record(stream_s: float, total_ms: float) -> dict[str, Any]:
    return {"time": stream_s, "latency_ms": {"total": total_ms}}


def test_stream_stats_see_dropped_frames_as_gaps_and_leave_out_the_start() -> None:
    every = [_record(i / 25, 10.0 + i % 5) for i in range(250)]
    stats = harness.stream_stats(every)
    assert stats["fps"] == pytest.approx(25.0) and stats["records"] == 250
    half = [r for i, r in enumerate(every) if i < 50 or i % 2 == 0]  # half dropped after 2 s
    assert harness.stream_stats(half)["fps"] == pytest.approx(12.5, rel=0.05)
    slow_start = [_record(0.0, 5000.0), *every[60:]]  # a slow first frame, before the window
    assert harness.stream_stats(slow_start)["latency_p99_ms"] < 20
    assert harness.stream_stats([])["fps"] is None


# --- the profile ---------------------------------------------------------------------------------

LIBC = "0x7f3695ea3f16 (libc.so.6)"
HUB = ["run (framewire/pipeline/hub/core.py:99)", "turn (framewire/pipeline/hub/core.py:107)"]
INFER = [
    "worker_main (framewire/pipeline/worker/stage.py:60)",
    "_work (framewire/pipeline/worker/stage.py:190)",
]


@pytest.mark.parametrize(
    ("stack", "bucket"),
    [
        ([*INFER, "infer (framewire/engines/onnxruntime.py:80)",
          "0x7f (onnxruntime/capi/onnxruntime_pybind11_state.so)", "MlasSgemm (libonnxruntime.so)"], "model"),
        (["read (framewire/media/video_reader.py:200)", "VideoStream_decode (stream.c:4666)",
          "CodecContext_decode (context.c:11464)", "0x7f (libavcodec-5e6b81c2.so.62)"], "decode"),
        (["write (framewire/media/video_writer.py:181)", "0x7f26ca598c5a (libx264-d6533a8d.so.165)"], "encode"),
        (["write (framewire/media/video_writer.py:181)", "CodecContext_encode (context.c:900)",
          "0x7f (libavcodec-5e6b81c2.so.62)"], "encode"),
        (["write (framewire/media/video_writer.py:170)", "VideoFrame_from_ndarray (frame.c:100)",
          "sws_scale (libswscale.so.8)"], "colour/scale"),
        ([*INFER, "fill (framewire/stages/tasks/image.py:40)", "0x7f26bc98116e (cv2/cv2.abi3.so)"], "colour/scale"),
        ([*INFER, "apply (framewire/stages/composite/blur.py:30)", "0x7f26bc98116e (cv2/cv2.abi3.so)"], "image ops"),
        ([*INFER, "decode (framewire/stages/tasks/face_detection.py:200)"], "pre/postprocess"),
        ([*HUB, "receive_all (framewire/pipeline/hub/core.py:140)", "recv_multipart (zmq/sugar/socket.py:813)",
          "0x7f (zmq/backend/cython/_zmq.cpython-311-x86_64-linux-gnu.so)"], "zmq"),
        (["0x7f26c8ea1b50 (libzmq-2f02442c.so.5.2.5)", "write (libc.so.6)"], "zmq"),
        ([*HUB, "route (framewire/pipeline/hub/routing.py:50)"], "hub"),
        ([*HUB, "encode (framewire/pipeline/wire/messages.py:60)", "dumps (pickle)"], "serialisation"),
        ([*INFER, "to_wire (framewire/pipeline/frame.py:80)", "array_copyto (_multiarray_umath.so)",
          "__memmove_avx_unaligned_erms (libc.so.6)"], "copies"),
        (["write (framewire/stages/outputs/jsonl.py:30)", "dumps (json/__init__.py:231)",
          "encoder_call (_json.c:1305)"], "json"),
        ([*HUB, "lock_PyThread_acquire_lock (libpython3.11.so.1.0)",
          "PyThread_acquire_lock_timed (libpython3.11.so.1.0)", LIBC, LIBC], "idle"),
        (["0x7f (libx264.so)", "x264_8_threadpool_wait (libx264.so)", "pthread_cond_wait (libc.so.6)", LIBC], "idle"),
        (["0x7f26c8ea1b50 (libzmq.so.5)", "epoll_wait (libc.so.6)"], "idle"),
        (["<module> (<string>:1)", "_find_and_load (<frozen importlib._bootstrap>:1173)",
          "<module> (framewire/config/outputs.py:122)"], "start-up"),
        (["_run (bench/harness.py:214)", "children (psutil/__init__.py:978)"], "bench sampler"),
        (["main (multiprocessing/forkserver.py:265)", "fork (libc.so.6)"], "python/other"),
    ],
)  # fmt: skip
def test_a_sample_falls_in_the_bucket_of_what_it_was_doing(stack: list[str], bucket: str) -> None:
    assert pyspy.classify(stack) == bucket


RAW = (
    'process 10:"python -m bench budget";run (framewire/pipeline/hub/core.py:99);'
    "route (framewire/pipeline/hub/routing.py:50) 6\n"
    'process 10:"python -m bench budget";process 11:"python -B -c a;b";process 12:"framewire: infer[0]";'
    "infer (framewire/engines/onnxruntime.py:80);MlasSgemm (libonnxruntime.so) 30\n"
    'process 10:"python -m bench budget";process 11:"python -B -c a;b";process 12:"framewire: infer[0]";'
    "_reply (framewire/pipeline/worker/stage.py:234);send (zmq/sugar/socket.py:713) 10\n"
    'process 10:"python -m bench budget";process 11:"python -B -c a;b";process 12:"framewire: infer[0]";'
    "receive (framewire/pipeline/worker/hub_link.py:124);epoll_wait (libc.so.6) 60\n"
    'process 10:"python -m bench budget";process 13:"py-spy record";main (libc.so.6) 4\n'
    "a line that is not a sample\n"
)


def test_raw_output_is_read_per_process_and_bucket() -> None:
    samples = pyspy.parse_raw(RAW)
    assert samples[10] == Counter({"hub": 6})
    assert samples[12] == Counter({"model": 30, "zmq": 10, "idle": 60})  # `;` inside quotes kept
    assert 11 not in samples


def test_each_process_cpu_is_split_over_its_busy_samples() -> None:
    processes = {10: ("hub (bench process)", 0.6), 12: ("infer[0]", 4.0), 14: ("decode[0]", 1.0)}
    summary = pyspy.summarise(pyspy.parse_raw(RAW), processes, frames=100, wall_s=10.0)
    infer = summary["processes"]["infer[0]"]
    assert infer["ms_per_frame"] == pytest.approx({"model": 30.0, "zmq": 10.0})  # 4 s over 40 busy samples
    assert infer["cores"] == pytest.approx(0.4) and infer["samples"]["idle"] == 60
    assert summary["processes"]["hub (bench process)"]["ms_per_frame"] == pytest.approx({"hub": 6.0})
    assert "decode[0]" not in summary["processes"]  # no samples: left out, not guessed
    assert summary["cpu_s"] == pytest.approx(4.6)
    assert summary["work_cpu_s"] == pytest.approx(3.0) and summary["own_cpu_s"] == pytest.approx(1.6)
    assert summary["own_top"] == ["zmq", "hub"]
    header, *rows = pyspy.table(summary)
    assert header == ["process", "cores", "model", "zmq", "hub"]
    assert rows[-1][0] == "all" and rows[-1][2:] == pytest.approx([30.0, 10.0, 6.0])


# --- the command ---------------------------------------------------------------------------------


def test_bench_budget_runs_the_file_job_and_the_work_alone(
    tiny_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "budget.json"
    code = cli.main(["bench", "budget", "-c", str(tiny_job), "--min-frames", "24", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["mode"] == "file" and result["clip"]["frames"] == 24
    (one,) = result["runs"]
    assert one["framewire"]["frames"] == 24 and one["work"]["frames"] == 24
    share = result["share"]
    assert share["work_ms_per_frame"] == pytest.approx(one["work"]["work_ms_per_frame"], rel=1e-3)
    assert share["cpu_ratio"] > 1.0  # framewire does the work and more: its processes, its hub
    assert share["limit_wall_s"] == pytest.approx(share["work_core_s"] / result["cores"], abs=2e-3)
    assert share["wall_ratio"] > share["after_startup_ratio"] > 0
    assert share["framewire_vs_loop"] == pytest.approx(limit.versus_loop(share["framewire_ms_per_frame"], one["work"]), rel=1e-3)
    # The command line's start-up: its own interpreter, imports and config besides the fork server's.
    assert share["cli_startup_s"] > 0.3
    table = capsys.readouterr().out
    assert "framewire wall / limit" in table and "work: model ms / frame" in table
    assert "`run` start-up s (the command to its first frame)" in table
    assert "plain loop's own steps ms / frame" in table and "framewire / plain loop" in table


def test_a_run_that_puts_out_nothing_fails_the_start_up_probe_with_its_error(tiny_job: Path, tmp_path: Path) -> None:
    """The command line's start-up probe: a `run` that ends without a record (its clip gone) is an
    error naming the config it ran and the command's last line, not a time."""
    import shutil

    from bench.budget_file import cli_startup
    from framewire import load_config

    clip = tmp_path / "gone.mp4"
    job = load_config(tiny_job)
    shutil.copy(job.sources[0].uri, clip)
    job = job.model_copy(update={"sources": (job.sources[0].model_copy(update={"uri": str(clip)}),)})
    clip.unlink()
    with pytest.raises(RuntimeError, match=r"`run` of .*cli\.yaml put out no record \(exit [12]: .*gone\.mp4"):
        cli_startup(job, tmp_path / "cli")


def test_the_summary_says_which_frames_each_bucket_s_time_was_spent_in() -> None:
    where: Counter[tuple[str, str]] = Counter()
    pyspy.parse_raw(RAW, where)
    found = pyspy.where_summary(where)
    assert found["model"] == [["MlasSgemm (libonnxruntime.so)", 1.0]]
    assert found["hub"] == [["route (framewire/pipeline/hub/routing.py:50)", 1.0]]
    assert "idle" not in found
