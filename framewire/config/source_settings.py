"""What a source's settings may be changed to while the job runs (`PATCH /sources/{id}`, the keys of
`POST /sources` beside a `sources:` item, and the daemon's state file).

The keys are the config's: `lines` and `zones` with the other keys of an `analytics:` entry
(framewire.config.analytics), `classes` (what the tracker follows, `tracking.classes`),
`score_threshold` (the model task's) and `interval` (`tracking.interval`), here for one source.
A change names only the keys it changes; `null` gives a key back to the job's config. What needs
the model or the frame (labels, points inside the frame, a task with a score threshold) is checked
by framewire.app.compose.settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from framewire.config.analytics import LineConfig, SourceAnalyticsConfig, ZoneConfig
from framewire.config.base import _Model

ANALYTICS_KEYS = ("normalized", "anchor", "track_class", "lines", "zones")
"""The keys that make up the source's `analytics:` entry."""


class SourceSettings(_Model):
    """One source's settings changed at run time; each key left out keeps what it was."""

    lines: tuple[LineConfig, ...] | None = Field(
        default=None, description="The source's counting lines, all of them (an `analytics:` entry's `lines`)."
    )
    zones: tuple[ZoneConfig, ...] | None = Field(
        default=None, description="The source's polygon zones, all of them (an `analytics:` entry's `zones`)."
    )
    normalized: bool | None = Field(
        default=None, description="The lines' and zones' points are fractions of the frame (0..1)."
    )
    anchor: Literal["bottom_center", "center"] | None = Field(
        default=None, description="The point of a track's box that crosses lines and is in zones."
    )
    track_class: Literal["detection", "majority"] | None = Field(
        default=None, description="The class a track is counted as (an `analytics:` entry's key)."
    )
    classes: tuple[str | int, ...] | None = Field(
        default=None, description="Track (and so count) only these labels or class ids on this source "
        "(`tracking.classes` for one source)."
    )
    score_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="The model task's `score_threshold` on this source."
    )
    interval: int | None = Field(
        default=None, ge=0, le=100, description="`tracking.interval` on this source: the model runs on one "
        "frame in interval + 1, the tracker carries the boxes in between."
    )


def merged(current: Mapping[str, Any], change: SourceSettings) -> dict[str, Any]:
    """`current` (JSON, as kept) with the keys `change` names: replaced, or dropped when null."""
    out = dict(current)
    for key in change.model_fields_set:
        value = getattr(change, key)
        if value is None:
            out.pop(key, None)
        else:
            out[key] = change.model_dump(mode="json")[key]
    return out


def analytics_of(
    settings: Mapping[str, Any], job: SourceAnalyticsConfig | None
) -> SourceAnalyticsConfig | None:
    """The source's `analytics:` entry once `settings` apply over the job's `job`; None: no lines and
    no zones. Raises pydantic's ValidationError as the config's entry would."""
    base: dict[str, Any] = job.model_dump(mode="json") if job is not None else {}
    base.update({k: settings[k] for k in ANALYTICS_KEYS if k in settings})
    if not base.get("lines") and not base.get("zones"):
        return None
    return SourceAnalyticsConfig.model_validate(base)
