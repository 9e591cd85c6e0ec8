"""ByteTrack (Zhang et al., ECCV 2022): multi-object tracking by associating every detection box.

A port of the authors' `yolox/tracker/byte_tracker.py` (MIT) to plain numpy, with `lap.lapjv` for
the assignment as the original uses it. Three changes, for a video daemon rather than a benchmark:
- Frames are numbered by the source's `seq`, so a gap (frames dropped before tracking, or skipped by
  `tracking.interval`) predicts each track that many steps, and `lost_frames` counts frames of video,
  not calls.
- `predict` moves the tracks to a frame the detector skipped and returns their boxes, without
  associating anything (DeepStream's `interval`).
- Each track remembers the detection it was matched to in the current frame, so the detector's own
  box (not the filtered one) is what gets a `track_id`. IoU has no +1 pixel in its areas.
Tests compare it with supervision's ByteTrack on the same boxes (tests/unit/stages/test_bytetrack.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import lap
import numpy as np

from framewire.stages.detections import iou

_WEIGHT_POSITION = 1.0 / 20
_WEIGHT_VELOCITY = 1.0 / 160


class KalmanFilter:
    """Constant-velocity Kalman filter on (cx, cy, aspect, height) and their velocities."""

    def __init__(self) -> None:
        self.motion = np.eye(8)
        for i in range(4):
            self.motion[i, 4 + i] = 1.0
        self.observe = np.eye(4, 8)

    def initiate(self, xyah: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean = np.r_[xyah, np.zeros(4)]
        h = xyah[3]
        p, v = _WEIGHT_POSITION * h, _WEIGHT_VELOCITY * h
        std = np.array([2 * p, 2 * p, 1e-2, 2 * p, 10 * v, 10 * v, 1e-5, 10 * v])
        return mean, np.diag(np.square(std))

    def predict(self, mean: np.ndarray, covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = mean[3]
        p, v = _WEIGHT_POSITION * h, _WEIGHT_VELOCITY * h
        noise = np.diag(np.square([p, p, 1e-2, p, v, v, 1e-5, v]))
        return self.motion @ mean, self.motion @ covariance @ self.motion.T + noise

    def update(
        self, mean: np.ndarray, covariance: np.ndarray, xyah: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        p = _WEIGHT_POSITION * mean[3]
        projected_mean = self.observe @ mean
        projected_cov = self.observe @ covariance @ self.observe.T + np.diag(np.square([p, p, 1e-1, p]))
        gain = np.linalg.solve(projected_cov, (covariance @ self.observe.T).T).T
        new_mean = mean + (xyah - projected_mean) @ gain.T
        return new_mean, covariance - gain @ projected_cov @ gain.T


class State(IntEnum):
    NEW = 0
    TRACKED = 1
    LOST = 2
    REMOVED = 3


@dataclass
class Track:
    """One track: its Kalman state and the detection it matched last."""

    tlwh: np.ndarray
    score: float
    detection: int
    """Index of the detection (in the frame's list) it was made from or matched to last."""
    mean: np.ndarray | None = None
    covariance: np.ndarray | None = None
    track_id: int = 0
    state: State = State.NEW
    activated: bool = False
    frame: int = 0
    start: int = 0
    predicted_to: int = 0
    """The frame its mean describes."""
    length: int = 0

    def box(self) -> np.ndarray:
        """(x1, y1, x2, y2) of the filtered state (the detection's box before the first update)."""
        if self.mean is None:
            x, y, w, h = self.tlwh
        else:
            cx, cy, aspect, h = self.mean[:4]
            w = aspect * h
            x, y = cx - w / 2, cy - h / 2
        return np.array([x, y, x + w, y + h])


@dataclass
class TrackerParams:
    """ByteTrack's thresholds (defaults: the authors')."""

    track_threshold: float = 0.5
    low_threshold: float = 0.1
    new_track_threshold: float = 0.6
    match_threshold: float = 0.8
    lost_frames: int = 30
    fuse_score: bool = True


@dataclass
class ByteTracker:
    """The tracks of one source. `update` with a frame's detections; `predict` for a skipped frame."""

    params: TrackerParams = field(default_factory=TrackerParams)
    tracked: list[Track] = field(default_factory=list)
    lost: list[Track] = field(default_factory=list)
    updates: int = 0
    next_id: int = 1
    kalman: KalmanFilter = field(default_factory=KalmanFilter)

    def update(self, frame: int, boxes: np.ndarray, scores: np.ndarray) -> dict[int, int]:
        """Associate the frame's detections (corner boxes); returns {detection index: track id} for
        the detections that belong to a confirmed track."""
        p = self.params
        self.updates += 1
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        high = [self._new(boxes[i], scores[i], int(i)) for i in np.flatnonzero(scores > p.track_threshold)]
        low_mask = (scores > p.low_threshold) & (scores < p.track_threshold)
        low = [self._new(boxes[i], scores[i], int(i)) for i in np.flatnonzero(low_mask)]
        unconfirmed = [t for t in self.tracked if not t.activated]
        pool = _join([t for t in self.tracked if t.activated], self.lost)
        self._advance(pool, frame)
        activated: list[Track] = []
        lost: list[Track] = []
        # First association: every track with the confident detections.
        matches, left_tracks, left_high = _assign(pool, high, p.match_threshold, p.fuse_score)
        for ti, di in matches:
            self._refresh(pool[ti], high[di], frame, activated)
        # Second: tracks still on screen with the low-score detections (occluded, blurred objects).
        remaining = [pool[i] for i in left_tracks if pool[i].state == State.TRACKED]
        matches, left_remaining, _ = _assign(remaining, low, 0.5, False)
        for ti, di in matches:
            self._refresh(remaining[ti], low[di], frame, activated)
        for i in left_remaining:
            remaining[i].state = State.LOST
            lost.append(remaining[i])
        # New tracks from last frame's leftovers must match again to be confirmed.
        leftovers = [high[i] for i in left_high]
        matches, left_unconfirmed, left_new = _assign(unconfirmed, leftovers, 0.7, p.fuse_score)
        for ti, di in matches:
            self._refresh(unconfirmed[ti], leftovers[di], frame, activated)
        removed = [unconfirmed[i] for i in left_unconfirmed]
        for i in left_new:
            if leftovers[i].score >= p.new_track_threshold:
                activated.append(self._start(leftovers[i], frame))
        self._settle(frame, activated, lost, removed)
        return {t.detection: t.track_id for t in self.tracked if t.activated and t.frame == frame}

    def predict(self, frame: int) -> list[Track]:
        """The confirmed tracks moved to `frame` (a frame the detector skipped), nothing associated."""
        confirmed = [t for t in self.tracked if t.activated and t.state == State.TRACKED]
        self._advance(confirmed, frame)
        return confirmed

    def _new(self, box: np.ndarray, score: float, index: int) -> Track:
        return Track(np.r_[box[:2], box[2:] - box[:2]], float(score), int(index))

    def _advance(self, tracks: list[Track], frame: int) -> None:
        """Predict each track up to `frame` (one step per frame of video since its last state)."""
        for track in tracks:
            assert track.mean is not None and track.covariance is not None
            for _ in range(max(0, frame - track.predicted_to)):
                if track.state != State.TRACKED:
                    track.mean[7] = 0.0  # a lost box keeps its size
                track.mean, track.covariance = self.kalman.predict(track.mean, track.covariance)
            track.predicted_to = max(track.predicted_to, frame)

    def _refresh(self, track: Track, detection: Track, frame: int, activated: list[Track]) -> None:
        """A track matched `detection`: update (or re-activate) it."""
        assert track.mean is not None and track.covariance is not None
        track.mean, track.covariance = self.kalman.update(track.mean, track.covariance, _xyah(detection.tlwh))
        track.length = track.length + 1 if track.state == State.TRACKED else 0
        track.state, track.activated = State.TRACKED, True
        track.frame, track.predicted_to = frame, frame
        track.score, track.detection = detection.score, detection.detection
        activated.append(track)

    def _start(self, track: Track, frame: int) -> Track:
        track.mean, track.covariance = self.kalman.initiate(_xyah(track.tlwh))
        track.track_id, self.next_id = self.next_id, self.next_id + 1
        track.state = State.TRACKED
        track.activated = self.updates == 1  # the first frame's tracks are confirmed at once
        track.frame = track.start = track.predicted_to = frame
        return track

    def _settle(self, frame: int, activated: list[Track], lost: list[Track], removed: list[Track]) -> None:
        """The bookkeeping at the end of `update`: which tracks are tracked, lost, or gone."""
        for track in self.lost:
            if frame - track.frame > self.params.lost_frames:
                removed.append(track)
        for track in removed:
            track.state = State.REMOVED
        gone = {id(t) for t in removed}
        tracked = _join([t for t in self.tracked if t.state == State.TRACKED], activated)
        still_lost = [t for t in _join(self.lost, lost) if id(t) not in gone and not _member(t, tracked)]
        self.tracked, self.lost = _dedupe(tracked, still_lost)


def _xyah(tlwh: np.ndarray) -> np.ndarray:
    x, y, w, h = tlwh
    return np.array([x + w / 2, y + h / 2, w / h if h > 0 else 0.0, h])


def _assign(
    tracks: list[Track], found: list[Track], threshold: float, fuse_score: bool
) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Matches (track, detection) of least total IoU cost under `threshold`, and the unmatched."""
    if not tracks or not found:
        return [], list(range(len(tracks))), list(range(len(found)))
    cost = 1.0 - iou(np.array([t.box() for t in tracks]), np.array([d.box() for d in found]))
    if fuse_score:
        cost = 1.0 - (1.0 - cost) * np.array([d.score for d in found])[None, :]
    _, rows, cols = lap.lapjv(cost, extend_cost=True, cost_limit=threshold)
    matches = [(int(i), int(j)) for i, j in enumerate(rows) if j >= 0]
    return matches, [i for i, j in enumerate(rows) if j < 0], [j for j, i in enumerate(cols) if i < 0]


def _join(a: list[Track], b: list[Track]) -> list[Track]:
    seen = {t.track_id for t in a}
    return a + [t for t in b if t.track_id not in seen]


def _member(track: Track, tracks: list[Track]) -> bool:
    return any(t.track_id == track.track_id for t in tracks)


def _dedupe(tracked: list[Track], lost: list[Track]) -> tuple[list[Track], list[Track]]:
    """A tracked and a lost track on the same box (IoU > 0.85): keep the older one."""
    if not tracked or not lost:
        return tracked, lost
    overlap = iou(np.array([t.box() for t in tracked]), np.array([t.box() for t in lost]))
    drop_tracked, drop_lost = set(), set()
    for i, j in zip(*np.nonzero(overlap > 0.85), strict=True):
        if tracked[i].frame - tracked[i].start > lost[j].frame - lost[j].start:
            drop_lost.add(int(j))
        else:
            drop_tracked.add(int(i))
    return (
        [t for i, t in enumerate(tracked) if i not in drop_tracked],
        [t for j, t in enumerate(lost) if j not in drop_lost],
    )
