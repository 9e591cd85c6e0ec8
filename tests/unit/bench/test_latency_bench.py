"""`bench latency`'s pure parts: the job it derives, the statistics, the lag, the verdict, the table,
and the socket queues read from a /proc/net/tcp table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import latency, latency_stats
from framewire.config import Policy, load_config

pytestmark = pytest.mark.timeout(30)

CONFIG = """
sources:
  - {id: cam, uri: clip.mp4, realtime: true, max_frames: 50, policy: drop_oldest,
     max_staleness_ms: 400, latency_budget_ms: 2000}
model: {path: model.onnx, task: matting}
outputs: [{kind: jsonl, path: "out/{source_id}.jsonl"}]
"""


def record(seq: int, stream_s: float, total_ms: float) -> dict[str, Any]:
    return {"seq": seq, "time": stream_s, "latency_ms": {"infer": 1.0, "total": total_ms}}


@pytest.mark.parametrize("policy", latency.POLICIES)
def test_the_job_reads_the_server_under_each_policy(tmp_path: Path, policy: str) -> None:
    config = load_config("job.yaml", text=CONFIG)
    job = latency.live_job(config, "rtsp://127.0.0.1:5554/live", policy, tmp_path)
    (source,) = job.sources
    assert source.uri == "rtsp://127.0.0.1:5554/live" and source.is_live
    assert source.policy == Policy(policy)
    assert (source.realtime, source.max_frames) == (False, None)  # a file's keys are gone
    assert source.latency_budget_ms == 2000  # the bound stays, whatever the policy
    assert source.max_staleness_ms == (None if policy == "block" else 400)  # block refuses it
    assert str(tmp_path) in job.outputs[0].path


def test_stats_count_every_frame_and_the_lag_behind_the_stream() -> None:
    # A source at 10 fps; seqs 0, 3 and 6 come out, each 300 ms after it was read (seqs 1, 2, 4, 5
    # went stale; 3 more frames were dropped before they had a seq); frame 0 was read 50 ms after
    # its stream time, the later ones 150 ms after (they waited in a socket).
    origin = 1000.0
    records = [record(0, 0.0, 300.0), record(3, 0.3, 300.0), record(6, 0.6, 300.0)]
    done = [origin + 0.05 + 0.3, origin + 0.3 + 0.15 + 0.3, origin + 0.6 + 0.15 + 0.3]
    stats = latency_stats.run_stats(
        records, done, output=3, dropped=7, stale=4, failed=0, first_out=done[0], stop=origin + 2.0, fps=10
    )
    assert stats["frames"] == {
        "read": 10, "output": 3, "dropped_policy": 3, "dropped_stale": 4, "dropped_overflow": 0, "failed": 0,
        "seqs_accounted": True,
    }  # fmt: skip
    assert stats["latency_ms"]["p50"] == pytest.approx(300.0) and stats["latency_ms"]["max"] == 300.0
    # The stream's clock is set by frame 0, the soonest read (50 ms late): the lag is measured from
    # there, so the socket's 150 ms show as 100 more than frame 0's.
    assert latency_stats.lag_ms(records, done) == pytest.approx([300.0, 400.0, 400.0])
    assert stats["lag_ms"]["p50"] == pytest.approx(400.0) and stats["lag_ms"]["max"] == pytest.approx(400.0)
    assert stats["output_fps"] == pytest.approx(3 / (origin + 2.0 - done[0]))


def test_seqs_missing_without_a_stale_drop_are_caught() -> None:
    records = [record(0, 0.0, 100.0), record(5, 0.5, 100.0)]  # seqs 1-4 sent, only 2 counted stale
    stats = latency_stats.run_stats(
        records, [1.1, 1.6], output=2, dropped=2, stale=2, failed=0, first_out=1.1, stop=2.0, fps=10
    )
    assert stats["frames"]["seqs_accounted"] is False
    assert latency_stats.verdict({**stats, "policy": "drop_oldest", "latency_budget_ms": 500})["holds"] is False


def test_lag_growth_is_the_slope_in_seconds_per_second() -> None:
    done = [0.0, 1.0, 2.0, 3.0]
    assert latency_stats.growth([100.0, 1000.0, 1900.0, 2800.0], done) == pytest.approx(0.9)
    assert latency_stats.growth([500.0, 500.0, 500.0, 500.0], done) == pytest.approx(0.0)
    assert latency_stats.growth([1.0, 2.0], [0.0, 1.0]) is None
    assert latency_stats.lag_ms([record(0, 0.0, 1.0)], []) == []  # records and times must pair up


def stats_for(policy: str, *, p99: float | None, read: int, output: int, policy_drops: int, stale: int,
              budget: float = 2000.0, exit_code: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "policy": policy,
        "latency_budget_ms": budget,
        "exit_code": exit_code,
        "error": "boom" if exit_code else None,
        "frames": {"read": read, "output": output, "dropped_policy": policy_drops, "dropped_stale": stale,
                   "failed": 0, "seqs_accounted": True},  # fmt: skip
        "latency_ms": {"p50": p99, "p90": p99, "p99": p99, "max": p99},
        "lag_ms": {"p99": 30_000.0, "at_end": 90_000.0, "growth_s_per_s": 0.9},
    }


@pytest.mark.parametrize(
    ("stats", "holds", "words"),
    [
        (stats_for("drop_oldest", p99=1900, read=100, output=10, policy_drops=50, stale=40), True,
         "p99 1900 ms <= budget 2000 ms; every frame read is output or counted as dropped"),
        (stats_for("drop_newest", p99=2100, read=100, output=10, policy_drops=50, stale=40), False,
         "p99 2100 ms > budget 2000 ms"),
        (stats_for("drop_oldest", p99=100, read=100, output=10, policy_drops=50, stale=30), False,
         "drops do not add up"),
        (stats_for("drop_oldest", p99=None, read=0, output=0, policy_drops=0, stale=0), False, "no frames out"),
        (stats_for("block", p99=9000, read=50, output=50, policy_drops=0, stale=0), True,
         "0 dropped; 90.0 s behind the live stream at the end, falling behind by 0.90 s a second"),
        (stats_for("block", p99=9000, read=51, output=50, policy_drops=1, stale=0), False, "1 dropped"),
        (stats_for("drop_oldest", p99=100, read=10, output=10, policy_drops=0, stale=0, exit_code=1), False,
         "the run failed: boom"),
    ],
)  # fmt: skip
def test_verdict(stats: dict[str, Any], holds: bool, words: str) -> None:
    found = latency_stats.verdict(stats)
    assert found["holds"] is holds
    assert words in found["text"]


def test_block_is_judged_on_drops_not_on_the_budget() -> None:
    found = latency_stats.verdict(stats_for("block", p99=9000, read=50, output=50, policy_drops=0, stale=0))
    assert found["holds"] is True and found["p99_within_budget"] is False


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:15B2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:15B2 0100007F:D431 01 00010000:00000000 01:00000014 00000000     0        0 2 1
   2: 0100007F:D431 0100007F:15B2 01 00000000:00020000 00:00000000 00000000     0        0 3 1
   3: 0100007F:1F90 0100007F:D432 01 00000400:00000400 00:00000000 00000000     0        0 4 1
   4: 0100007F:D433 0100007F:15B2 06 00000000:00000500 00:00000000 00000000     0        0 5 1
"""


def test_socket_queues_of_the_server_and_its_client(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(PROC_NET_TCP)
    # Port 0x15B2 = 5554: the server's Send-Q (64 KiB) and its client's Recv-Q (128 KiB); the
    # listening socket, another port's connection and a TIME_WAIT one are left out.
    assert latency.socket_queues(5554, str(table)) == (0x10000, 0x20000)
    assert latency.socket_queues(5554, str(tmp_path / "missing")) == (0, 0)
    summary = latency.backlog_summary([(1.0, 1024, 0), (2.0, 0x10000, 0x20000), (3.0, 2048, 1024)])
    assert summary["server_send_q_max"] == 64.0 and summary["client_recv_q_max"] == 128.0
    assert summary["queued_at_end"] == 3.0
    assert latency.backlog_summary([]) == {}


def test_the_table_has_a_column_per_policy_and_a_verdict_line() -> None:
    run = latency_stats.run_stats(
        [record(0, 0.0, 400.0)], [10.4], output=1, dropped=3, stale=1, failed=0, first_out=10.4, stop=11.0, fps=25
    )
    run.update(policy="drop_oldest", max_staleness_ms=300.0, latency_budget_ms=2000.0, over_budget=0,
               reconnects=0, cores_used=1.5, peak_rss_mib=900.0, memory={"pss_mib": 600.0},
               socket_backlog_kib={"server_send_q_max": 1.0, "client_recv_q_max": 2.0}, exit_code=0)  # fmt: skip
    run["verdict"] = latency_stats.verdict(run)
    result = {"config": "live.yaml", "seconds": 1.0, "latency_budget_ms": 2000.0, "runs": {"drop_oldest": run},
              "source": {"clip": "clip.mp4", "width": 64, "height": 48, "fps": 25}}  # fmt: skip
    text = latency.format_table(result)
    assert "drop_oldest" in text and "latency p99 ms" in text and "dropped: stale" in text
    assert text.splitlines()[-1] == "drop_oldest: p99 400 ms <= budget 2000 ms; every frame read is output or counted as dropped"
