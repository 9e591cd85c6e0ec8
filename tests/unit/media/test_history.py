"""The event history: events, clips and snapshots in SQLite, queried, pruned, and whole after a SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framewire.media.history import CUT, DONE, History

pytestmark = pytest.mark.timeout(60)


def event(source: str, wall: float, name: str = "crossed", **fields: object) -> dict[str, object]:
    return {"v": 2, "event": name, "source": source, "wall": wall, "time": wall - 1000, **fields}


def test_events_are_found_by_source_label_place_and_time_range_in_pages(tmp_path: Path) -> None:
    store = History.open(str(tmp_path / "events.db"))
    for i in range(30):
        store.add_event(event("cam" if i % 2 else "door", 1000.0 + i, label="car" if i % 3 else "person",
                              line="kerb", track_id=i))  # fmt: skip
    store.add_event(event("cam", 2000.0, "entered", zone="yard", label="person"))
    in_range = store.events(since=1010.0, until=1020.0, limit=100).items
    assert sorted(e["wall"] for e in in_range) == [1010.0 + i for i in range(10)]
    assert {e["source"] for e in store.events(source="door", limit=100).items} == {"door"}
    assert len(store.events(source="door", limit=100).items) == 15
    assert all(e["label"] == "person" for e in store.events(label="person", limit=100).items)
    assert [e["place"] for e in store.events(place="yard").items] == ["yard"]
    seen, before = [], None
    while True:
        page = store.events(limit=7, before=before)
        seen += [e["id"] for e in page.items]
        if page.next is None:
            break
        before = page.next
    assert seen == sorted(seen, reverse=True) and len(seen) == 31 == len(set(seen))
    store.close()


def test_an_event_comes_back_with_its_clip_and_snapshot(tmp_path: Path) -> None:
    store = History.open(str(tmp_path / "events.db"))
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"x" * 100)
    clip_id = store.start_clip("cam", str(clip), 1000.0, 10.0)
    event_id = store.add_event(event("cam", 1003.0, line="kerb"), clip_id)
    shot = tmp_path / "1.jpg"
    shot.write_bytes(b"j" * 10)
    store.put_snapshot(event_id, "cam", str(shot), 0.5)
    store.put_snapshot(event_id, "cam", str(shot), 0.9)  # pick: best replaces it
    store.finish_clip(clip_id, 1008.0, 18.0, 200, 100)
    found = store.events().items
    assert len(found) == 1 and found[0]["clip"] == str(clip) and found[0]["snapshot"] == str(shot)
    clips = store.clips().items
    assert clips[0]["state"] == DONE and clips[0]["events"] == [event_id]
    reader = History.open(str(tmp_path / "events.db"), readonly=True)
    assert reader.events().items[0]["id"] == event_id
    reader.close()
    store.close()


def test_retention_prunes_the_oldest_first_and_never_the_clip_being_written(tmp_path: Path) -> None:
    store = History.open(str(tmp_path / "events.db"))
    paths = []
    for i in range(4):
        path = tmp_path / f"{i}.mp4"
        path.write_bytes(b"x" * 1000)
        paths.append(path)
        clip_id = store.start_clip("cam", str(path), 1000.0 + i, float(i))
        if i < 3:
            store.finish_clip(clip_id, 1000.5 + i, i + 0.5, 10, 1000)
    pruned = store.prune("cam", days=None, max_bytes=1500)
    assert pruned.clips == [str(paths[0]), str(paths[1])]  # oldest first, down to 1000 bytes finished
    assert not paths[0].exists() and paths[2].exists() and paths[3].exists()
    pruned = store.prune("cam", days=1, max_bytes=0, now=1000.0 + 3 * 86400)
    assert pruned.clips == [str(paths[2])] and paths[3].exists(), "the clip being written stays"
    store.close()


def test_a_store_killed_mid_clip_is_consistent_and_keeps_the_cut_clip(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    clip = tmp_path / "clip.mp4"
    script = (
        "import os\n"
        "from framewire.media.history import History\n"
        f"h = History.open({str(db)!r})\n"
        "for i in range(50): h.add_event({'event': 'crossed', 'source': 'cam', 'wall': 1000.0 + i})\n"
        f"c = h.start_clip('cam', {str(clip)!r}, 1000.0, 0.0)\n"
        f"open({str(clip)!r}, 'wb').write(b'x' * 4096)\n"
        "h.db.execute('BEGIN IMMEDIATE')\n"
        "h.db.execute(\"INSERT INTO events (source, event, wall, data) VALUES ('cam', 'half', 1.0, '{}')\")\n"
        "os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", script], timeout=30, check=False)
    store = History.open(str(db))
    assert len(store.events(limit=500).items) == 50, "the uncommitted event is gone, the others stay"
    clips = store.clips().items
    assert [(c["state"], c["bytes"]) for c in clips] == [(CUT, 4096)]
    assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.close()
    assert os.path.exists(clip)
