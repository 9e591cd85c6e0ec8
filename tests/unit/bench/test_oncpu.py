"""bench/oncpu.py: `perf script` lines (as perf 6.1 prints them) counted by process and library,
the work told from framewire's own, the arithmetic of CPU ms a frame, and the errors without perf."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import budget, oncpu
from framewire import cli

pytestmark = pytest.mark.timeout(60)

SITE = "/work/main/.venv/lib/python3.11/site-packages"
# `perf script -F pid,tid,ip,dso` of a live run: pid/tid, the address, (the library).
SCRIPT = f"""\
   101/101      7f0f596750af ({SITE}/onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so)
   101/101      7f0f596750b0 ({SITE}/onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so)
   101/101      7f5fe4501322 (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
   101/105      ffffffff813a2413 ([kernel.kallsyms])
   101/101      7efcbc15e866 ({SITE}/cv2/cv2.abi3.so)
   101/101      7efcbc15e867 ({SITE}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so)
   202/202      7f0f11111111 ({SITE}/av.libs/libavcodec-5e6b81c2.so.62.28.102)
   202/207      7f0f11111112 ({SITE}/av.libs/libavcodec-5e6b81c2.so.62.28.102)
   202/202      7f0f11111113 ({SITE}/av/video/frame.abi3.so)
   202/202      7f0f11111114 (/usr/lib/x86_64-linux-gnu/libc.so.6)
   202/208      7f0f11111115 ({SITE}/pyzmq.libs/libzmq-2f02442c.so.5.2.5)
   303/303      7f0f22222222 ({SITE}/av.libs/libx264-d6533a8d.so.165)
   303/303      7f0f22222223 ({SITE}/av.libs/libavformat-4639def2.so.62.12.102)
   303/303      7f0f22222224 ({SITE}/msgpack/_cmsgpack.cpython-311-x86_64-linux-gnu.so)
   404/404      7f0f33333333 (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
   505/505      7f0f55555555 ({SITE}/onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so)
   999/999      7f0f44444444 (/usr/lib/x86_64-linux-gnu/libc.so.6)
   303/303      7f0f22222225 ([unknown])
not a sample line
"""
NAMES = {101: "infer[0]", 202: "decode[3]", 303: "output[0]", 404: "hub (bench process)", 505: "python -B -c"}


def test_each_library_goes_to_its_bucket_and_ffmpeg_is_work_only_in_a_decode_process() -> None:
    counts = oncpu.count(SCRIPT, NAMES)
    assert counts[("infer[0]", "model")] == 2
    assert counts[("infer[0]", "python")] == counts[("infer[0]", "kernel")] == 1  # a thread of it too
    assert counts[("infer[0]", "opencv")] == counts[("infer[0]", "numpy")] == 1
    assert counts[("decode[3]", "decode")] == 3  # FFmpeg and PyAV's own code, its threads included
    assert counts[("decode[3]", "libc")] == counts[("decode[3]", "zeromq")] == 1
    assert counts[("output[0]", "encode")] == 1
    assert counts[("output[0]", "ffmpeg other")] == 1  # the muxer: not the work
    assert counts[("output[0]", "msgpack")] == counts[("output[0]", "other")] == 1
    assert counts[("hub (bench process)", "python")] == 1
    # The fork server loads ONNX Runtime but runs no frame through it: not the model's work.
    assert counts[("python -B -c", "other")] == 1 and ("python -B -c", "model") not in counts
    assert sum(counts.values()) == 17  # pid 999 is not the job's, the last line is no sample


def test_summary_gives_cpu_ms_a_frame_per_stage_and_the_own_part_biggest_first() -> None:
    counts = oncpu.count(SCRIPT, {**NAMES, 102: "infer[1]"} | {101: "infer[0]"})
    # 100 samples a second: each is 10 ms of CPU; over 10 frames, 1 ms a frame.
    summary = oncpu.summarise(counts, rate=100, frames=10)
    assert summary["samples"] == 17
    assert summary["stages"]["infer"]["model"] == pytest.approx(2.0)
    assert summary["stages"]["decode"]["decode"] == pytest.approx(3.0)
    assert summary["ms_per_frame"]["python"] == pytest.approx(2.0)  # infer and the hub
    assert summary["work_ms_per_frame"] == pytest.approx(6.0)  # model 2, decode 3, encode 1
    assert summary["own_ms_per_frame"] == pytest.approx(11.0)
    assert summary["own_top"][0] == "python"
    header, *rows = oncpu.table(summary)
    assert header[0] == "process" and "model" in header and "decode" in header
    assert [r[0] for r in rows] == ["decode", "hub (bench process)", "infer", "output", "python -B -c", "all"]


def test_without_perf_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oncpu.shutil, "which", lambda name: None)
    with pytest.raises(oncpu.PerfUnavailable, match="linux-perf"):
        oncpu.check()


def test_a_perf_that_may_not_sample_every_cpu_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "perf"
    fake.write_text("#!/bin/sh\necho 'Error: Access to performance monitoring is limited' >&2\nexit 255\n")
    fake.chmod(0o755)
    monkeypatch.setattr(oncpu.shutil, "which", lambda name: str(fake))
    with pytest.raises(oncpu.PerfUnavailable, match="perf_event_paranoid.*|limited"):
        oncpu.check()


def test_bench_budget_perf_is_for_the_live_job(capsys: pytest.CaptureFixture[str]) -> None:
    config = Path(budget.__file__).resolve().parents[1] / "configs" / "default.yaml"
    code = cli.main(["bench", "budget", "-c", str(config), "--perf"])
    assert code != 0
    err = capsys.readouterr().err
    assert "--perf" in err and "--streams" in err and len(err.strip().splitlines()) == 1
