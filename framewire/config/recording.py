"""`kind: recording`: a camera's own stream kept without re-encoding, event clips, snapshots, and
the event history, all in one folder.

```yaml
outputs:
  - kind: recording
    folder: out/recordings
    passthrough: {segment_s: 60}
    clips:
      pre_s: 3
      post_s: 5
      events: [{event: crossed, line: kerb}, {event: track_started, labels: [person]}]
    snapshots: {crop: false, pick: best}
    retention: {days: 7, bytes: 20GiB}
```
What needs the model or the analytics (a label among the model's, a line or zone of the source)
is checked with them (`problems`, called by app.compose).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import ByteSize, Field, model_validator

from framewire.config.analytics import SourceAnalyticsConfig
from framewire.config.base import _Model
from framewire.config.outputs import OutputConfig

CLIP_EVENTS = ("class_appeared", "class_left", "track_started", "track_ended", "crossed", "entered", "left")
"""The events a clip can be cut around: stages.outputs.events' and the analytics' (stages.analytics)."""


class PassthroughConfig(_Model):
    """The continuous recording: the source's own packets, remuxed, in key-frame segments."""

    segment_s: float = Field(
        default=60.0, gt=0, description="A new file at the first key frame after this many seconds."
    )
    keep_days: float | None = Field(default=None, gt=0, description="Delete segments older than this.")
    keep_bytes: ByteSize | None = Field(
        default=None,
        description="Keep at most this much per source (bytes, or '20GiB'), oldest deleted first.",
    )


class ClipRule(_Model):
    """Which events open or extend a clip; every key given must match."""

    event: Literal[
        "class_appeared", "class_left", "track_started", "track_ended", "crossed", "entered", "left"
    ] = Field(
        description="The event: a class appears or leaves, a track starts or ends, a line crossed, a zone "
        "entered or left."
    )
    labels: tuple[str, ...] | None = Field(
        default=None, description="Only events of these labels (the model's)."
    )
    line: str | None = Field(default=None, description="crossed: only this line (analytics.<source>.lines).")
    zone: str | None = Field(
        default=None, description="entered, left: only this zone (analytics.<source>.zones)."
    )
    sources: tuple[str, ...] | None = Field(
        default=None, description="Only these sources; default: every one."
    )

    @model_validator(mode="after")
    def _place(self) -> ClipRule:
        if self.line is not None and self.event != "crossed":
            raise ValueError(f"line: only for event crossed, not {self.event}")
        if self.zone is not None and self.event not in ("entered", "left"):
            raise ValueError(f"zone: only for events entered and left, not {self.event}")
        return self


class ClipsConfig(_Model):
    """Clips of the source's own packets around the events named in `events`."""

    events: tuple[ClipRule, ...] = Field(min_length=1, description="The events that make a clip.")
    pre_s: float = Field(
        default=3.0, ge=0, description="Seconds before the first event (from the key frame at or before)."
    )
    post_s: float = Field(default=5.0, ge=0, description="Seconds after the last event.")
    max_s: float = Field(
        default=60.0,
        gt=0,
        description="Clips that overlap merge up to this length; a longer run of events goes on in the next "
        "clip.",
    )
    ring_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds of packets kept in memory per source: what a pre-roll can reach back to.",
    )
    annotated: bool = Field(
        default=False,
        description="Also a clip of the composited frames (boxes burned in) beside each: "
        "<clip>.annotated.mp4. Every frame is then encoded while the source runs (x264 ultrafast), for "
        "the pre-roll.",
    )
    ring_bytes: ByteSize = Field(
        default=ByteSize(64 * 2**20),
        description="At most this much per source in the ring (bytes, or '64MiB').",
    )

    @model_validator(mode="after")
    def _ring(self) -> ClipsConfig:
        if self.pre_s >= self.ring_s:
            raise ValueError(
                f"pre_s: {self.pre_s:g} s does not fit in ring_s ({self.ring_s:g} s of packets kept, from "
                "a key frame): make ring_s longer than pre_s plus a key-frame interval"
            )
        if self.pre_s + self.post_s > self.max_s:
            raise ValueError(
                f"max_s: {self.max_s:g} s is shorter than pre_s + post_s ({self.pre_s + self.post_s:g} s)"
            )
        return self


class SnapshotsConfig(_Model):
    """A JPEG for each event that matched a clip rule."""

    crop: bool = Field(
        default=False, description="The object's box only, instead of the whole frame with the boxes."
    )
    pick: Literal["first", "best"] = Field(
        default="first",
        description="first: the event's frame; best: the track's best-scored frame until it ends.",
    )
    quality: int = Field(default=85, ge=1, le=100, description="JPEG quality.")


class RetentionConfig(_Model):
    """What the history keeps per source: clips, snapshots and events; never a clip being written."""

    days: float | None = Field(default=None, gt=0, description="Delete what is older than this.")
    bytes: ByteSize | None = Field(
        default=None, description="Clips and snapshots per source, oldest deleted first."
    )


class RecordingOutput(OutputConfig):
    """Recordings, clips, snapshots and the event history (`events.db`, SQLite) in one folder."""

    kind: Literal["recording"] = Field(
        description="The source's own stream recorded, clips and snapshots of events."
    )
    folder: str = Field(
        description="Where everything goes: <source>/rec-<index>.mp4, <source>/clips/, <source>/snapshots/, "
        "events.db."
    )
    passthrough: PassthroughConfig | None = Field(
        default=None, description="The continuous recording without re-encoding; null: none."
    )
    clips: ClipsConfig | None = Field(default=None, description="Event clips; null: none.")
    snapshots: SnapshotsConfig | None = Field(default=None, description="Event snapshots; null: none.")
    retention: RetentionConfig = Field(
        default_factory=RetentionConfig, description="The history's retention."
    )

    @model_validator(mode="after")
    def _something(self) -> RecordingOutput:
        if self.passthrough is None and self.clips is None:
            raise ValueError("passthrough or clips: a recording output records something")
        if self.snapshots is not None and self.clips is None:
            raise ValueError("snapshots: of the events in clips.events (give clips)")
        return self

    def passthrough_path(self) -> str:
        """The segments' path template (media.segments' fields)."""
        return os.path.join(self.folder, "{source_id}", "rec-{index:06d}.mp4")

    def problems(
        self,
        key: str,
        labels: Sequence[str] | None,
        analytics: Mapping[str, SourceAnalyticsConfig],
        sources: Sequence[str],
    ) -> str | None:
        """The first rule naming a label the model lacks, a line or zone no source has, a source
        not in the job, or a folder that cannot be written: `key...: why`, or None."""
        lines = {x.name for a in analytics.values() for x in a.lines}
        zones = {x.name for a in analytics.values() for x in a.zones}
        for i, rule in enumerate(self.clips.events if self.clips else ()):
            at = f"{key}.clips.events.{i}"
            unknown = [x for x in rule.labels or () if labels is not None and x not in labels]
            if unknown:
                return f"{at}.labels: {unknown[0]!r} is not a label of the model"
            if rule.line is not None and rule.line not in lines:
                return f"{at}.line: no line {rule.line!r} in analytics (lines: {sorted(lines) or 'none'})"
            if rule.zone is not None and rule.zone not in zones:
                return f"{at}.zone: no zone {rule.zone!r} in analytics (zones: {sorted(zones) or 'none'})"
            missing = [s for s in rule.sources or () if s not in sources]
            if missing:
                return f"{at}.sources: no source {missing[0]!r} in the job"
        return folder_problem(Path(self.folder), f"{key}.folder")


def folder_problem(folder: Path, key: str) -> str | None:
    """Why `folder` cannot be made or written, or None."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{key}: cannot make the folder {folder}: {existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{key}: cannot write in the folder {existing}: permission denied"
    return None
