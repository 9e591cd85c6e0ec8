"""`bench soak`: the daemon for a long while, with sources added and removed through the control API.

Runs `run_pipeline.py run` as a user would (http enabled, `keep_running`), then:
1. `--cycles N` add/remove cycles of a source through the control API (each source runs until its
   first frames are out, then is removed);
2. `--minutes M` at real-time pace with one source looping the clip;
and samples every process's resident memory (RSS, and USS where the kernel gives it) and open file
descriptors. Growth is measured from the end of a warm-up to the end. JSON plus a table.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def add_arguments(parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    add_config_args(parser)
    parser.add_argument("--cycles", type=int, default=200, help="add/remove cycles (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=30.0, help="real-time run afterwards (default: %(default)s)")
    parser.add_argument("--clip", default=str(ROOT / "assets" / "videos" / "carphone_pristine.mp4"))
    parser.add_argument("--warmup-cycles", type=int, default=20, help="cycles before memory is measured")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples in the timed run")
    parser.add_argument("--json", metavar="PATH", help="write the results here")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _snapshot(pid: int) -> dict[str, dict[str, float]]:
    import psutil

    out: dict[str, dict[str, float]] = {}
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            title = " ".join(proc.cmdline()).strip()
            name = title.removeprefix("framewire: ") if title.startswith("framewire: ") else (
                "supervisor" if proc.pid == pid else f"helper-{proc.pid}"
            )
            info = proc.memory_full_info()
            out[name] = {"rss_mib": info.rss / 2**20, "uss_mib": info.uss / 2**20, "fds": float(proc.num_fds())}
        except Exception:  # a process that ended between the listing and the reading
            continue
    return out


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def run(args: argparse.Namespace) -> int:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    out = Path(args.json).parent if args.json else Path("out")
    work = out / "soak"
    work.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, str(ROOT / "run_pipeline.py"), "run", "-c", args.config, "--no-progress",
        *sum((["--set", o] for o in args.overrides), []),
        "--set", f"sources.0.uri={args.clip}",
        "--set", "sources.0.id=base", "--set", "sources.0.realtime=true", "--set", "sources.0.max_frames=1",
        "--set", "http.enabled=true", "--set", f"http.port={port}", "--set", "http.keep_running=true",
        "--set", f"outputs=[{{kind: video_file, path: '{work}/{{source_id}}.mp4'}}, "
                 f"{{kind: jsonl, path: '{work}/{{source_id}}.jsonl'}}]",
    ]  # fmt: skip
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[str, float, dict[str, dict[str, float]]]] = []
    started = time.monotonic()
    try:
        _wait(lambda: _call(url + "/healthz")[0] == 200 if _port_open(port) else False, 120, "the daemon")
        for i in range(args.cycles):
            sid = f"cycle{i % 4}"
            status, body = _call(url + "/sources", "POST", {"id": sid, "uri": args.clip})
            if status != 201:
                raise RuntimeError(f"adding {sid}: {status} {body}")
            _wait(lambda: _frames(url, sid) >= 3, 60, f"frames of {sid}")
            _call(url + f"/sources/{sid}", "DELETE")
            _wait(lambda: sid not in [s["id"] for s in _call(url + "/sources")[1]["sources"]], 60, f"{sid} to end")
            if i + 1 == args.warmup_cycles or i + 1 == args.cycles:
                samples.append((f"cycle {i + 1}", time.monotonic() - started, _snapshot(daemon.pid)))
        if args.minutes > 0:
            status, body = _call(url + "/sources", "POST", {"id": "long", "uri": args.clip, "realtime": True})
            end = time.monotonic() + args.minutes * 60
            loops = 0
            while time.monotonic() < end:
                time.sleep(min(args.sample_s, max(0.0, end - time.monotonic())))
                samples.append((f"{(time.monotonic() - started) / 60:.1f} min", time.monotonic() - started, _snapshot(daemon.pid)))
                if "long" not in [s["id"] for s in _call(url + "/sources")[1]["sources"]]:
                    loops += 1  # the clip ended: read it again, as a camera would go on
                    _call(url + "/sources", "POST", {"id": "long", "uri": args.clip, "realtime": True})
        _call(url + "/drain", "POST")
        daemon.wait(60)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    return _report(args, samples, daemon.returncode)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _frames(url: str, sid: str) -> int:
    for source in _call(url + "/sources")[1]["sources"]:
        if source["id"] == sid:
            return int(source["frames"])
    return 0


def _report(args: argparse.Namespace, samples: list[tuple[str, float, dict[str, dict[str, float]]]], code: int | None) -> int:
    if len(samples) < 2:
        print("framewire: soak: too few samples", file=sys.stderr)
        return 1
    base_label, _, base = samples[0]
    last_label, elapsed, last = samples[-1]
    rows = []
    for name in sorted(set(base) & set(last)):
        if name.startswith("helper-"):
            continue
        b, e = base[name], last[name]
        rows.append({
            "process": name,
            "rss_mib": [round(b["rss_mib"], 1), round(e["rss_mib"], 1)],
            "uss_mib": [round(b["uss_mib"], 1), round(e["uss_mib"], 1)],
            "rss_growth_pct": round(100 * (e["rss_mib"] - b["rss_mib"]) / b["rss_mib"], 2),
            "fds": [int(b["fds"]), int(e["fds"])],
        })  # fmt: skip
    result = {
        "cycles": args.cycles,
        "minutes": args.minutes,
        "from": base_label,
        "to": last_label,
        "elapsed_s": round(elapsed, 1),
        "exit_code": code,
        "processes": rows,
        "max_rss_growth_pct": max(r["rss_growth_pct"] for r in rows),
        "fd_growth": max(r["fds"][1] - r["fds"][0] for r in rows),
        "samples": [{"at": label, "t": round(t, 1), "processes": snap} for label, t, snap in samples],
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"soak: {args.cycles} add/remove cycles, {args.minutes} min real time; from {base_label} to {last_label}")
    print(f"{'process':<16}{'RSS MiB':>18}{'USS MiB':>18}{'RSS growth':>12}{'fds':>10}")
    for r in rows:
        rss = f"{r['rss_mib'][0]} -> {r['rss_mib'][1]}"
        uss = f"{r['uss_mib'][0]} -> {r['uss_mib'][1]}"
        fds = f"{r['fds'][0]} -> {r['fds'][1]}"
        print(f"{r['process']:<16}{rss:>18}{uss:>18}{r['rss_growth_pct']:>11.2f}%{fds:>10}")
    return 0 if code == 0 else 1
