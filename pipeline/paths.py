"""Output path templates: `out/{source_id}/{start:%Y%m%d-%H%M%S}-{index:04d}.mp4`.

A template is a `str.format` string with three fields: `source_id`, `index` (the segment's number,
an int: `{index:04d}`) and `start` (when the segment's first frame was read, UTC: a `strftime`
spec, `{start:%Y-%m-%dT%H%M%S}`; `{start}` alone gives `20260102T030405Z`). The same template gives
the pattern of the files it made (for retention) and finds the last index used (so a restarted
recording goes on numbering instead of writing over its own segments).
"""

from __future__ import annotations

import glob
import re
import string
from datetime import datetime, timezone

FIELDS = ("source_id", "index", "start")
_FORMATTER = string.Formatter()
_EXAMPLE_START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class Start(datetime):
    """A segment's start time: `{start}` without a spec reads `20260102T030405Z` (no spaces or colons)."""

    def __format__(self, spec: str) -> str:
        return super().__format__(spec or "%Y%m%dT%H%M%SZ")


def start_of(epoch_s: float) -> Start:
    moment = datetime.fromtimestamp(epoch_s, tz=timezone.utc)
    return Start(*moment.timetuple()[:6], moment.microsecond, tzinfo=timezone.utc)


def fields(template: str) -> list[tuple[str, str]]:
    """The (field, spec) pairs of a template; ValueError names a bad one."""
    found: list[tuple[str, str]] = []
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise ValueError(f"not a valid path template: {exc} (write braces as {{{{ and }}}})") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in FIELDS or conversion:
            raise ValueError(f"unknown placeholder {{{name}}} (use {{source_id}}, {{index}}, {{start}})")
        found.append((name, spec or ""))
    return found


def check(template: str) -> set[str]:
    """The fields a template uses, after rendering it once with example values (a bad spec fails here)."""
    names = {name for name, _ in fields(template)}
    try:
        render(template, "cam", 0, _EXAMPLE_START.timestamp())
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a valid path template: {exc}") from None
    return names


def render(template: str, source_id: str, index: int = 0, start_s: float | None = None) -> str:
    """The path of segment `index` of `source_id`, started at `start_s` (epoch seconds; now if None)."""
    start = start_of(start_s if start_s is not None else datetime.now(timezone.utc).timestamp())
    return template.format(source_id=source_id, index=index, start=start)


def numbered(template: str, number: int) -> str:
    """`template` with `.<number>` before its file name's extension (`out/{source_id}.mp4` ->
    `out/{source_id}.2.mp4`), or after a name without one: a source's later run in one job."""
    head, slash, name = template.rpartition("/")
    stem, dot, extension = name.rpartition(".")
    if not stem:
        return f"{template}.{number}"
    return f"{head}{slash}{stem}.{number}{dot}{extension}"


def pattern(template: str, source_id: str) -> str:
    """A glob that matches every file the template makes for `source_id`."""
    out = []
    for literal, name, _, _ in _FORMATTER.parse(template):
        out.append(glob.escape(literal))
        if name == "source_id":
            out.append(glob.escape(source_id))
        elif name is not None:
            out.append("*")
    return "".join(out)


_STRFTIME = {"Y": r"\d{4}", "y": r"\d{2}", "m": r"\d{2}", "d": r"\d{2}", "H": r"\d{2}", "M": r"\d{2}",
             "S": r"\d{2}", "f": r"\d{6}", "j": r"\d{3}", "s": r"\d+", "%": "%"}


def _start_regex(spec: str) -> str:
    """A regex for `{start:spec}`: digits where the spec has numbers, anything for names (%b, %a)."""
    out, i, spec = [], 0, spec or "%Y%m%dT%H%M%SZ"
    while i < len(spec):
        if spec[i] == "%" and i + 1 < len(spec):
            out.append(_STRFTIME.get(spec[i + 1], r"[^/]+?"))
            i += 2
        else:
            out.append(re.escape(spec[i]))
            i += 1
    return "".join(out)


def regex(template: str, source_id: str) -> re.Pattern[str]:
    """What the template's files for `source_id` look like, field by field: with `{index}` digits and
    `{start}` its date, so another source whose id starts the same (`cam`, `cam-b`) never matches."""
    parts: list[str] = []
    named = False
    for literal, name, spec, _ in _FORMATTER.parse(template):
        parts.append(re.escape(literal))
        if name == "source_id":
            parts.append(re.escape(source_id))
        elif name == "index":
            parts.append(r"\d+" if named else r"(?P<index>\d+)")
            named = True
        elif name == "start":
            parts.append(_start_regex(spec or ""))
    return re.compile("".join(parts) + r"\Z")


def matching(template: str, source_id: str) -> list[str]:
    """The files on disk the template made for `source_id`."""
    compiled = regex(template, source_id)
    return [p for p in glob.glob(pattern(template, source_id)) if compiled.match(p)]


def last_index(template: str, source_id: str, paths: list[str]) -> int | None:
    """The highest `{index}` among `paths` made by the template for `source_id`; None without one."""
    compiled = regex(template, source_id)
    found = [int(m.group("index")) for p in paths if (m := compiled.match(p)) and "index" in m.groupdict()]
    return max(found) if found else None
