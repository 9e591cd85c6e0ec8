"""The HTTP API's OpenAPI document, built from the models: the config's own source models for the
body of POST /sources, and the models below for the answers.

It lives here, not in pipeline/ (which knows no config schema and no pydantic): compose hands the
document to the server as bytes, served at /openapi.json, and `make docs` writes it into the site
(docs/gen_reference.py). Every route of pipeline.ops.api.ROUTES has its operations in OPERATIONS;
tests/unit/app/test_http_api.py fails when one is missing, so the document cannot fall behind.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from framewire.config.kinds import config_model
from framewire.config.source_settings import SourceSettings
from framewire.pipeline.ops.api import ROUTES
from framewire.registry import SOURCES

VERSION = "1"
"""The API's version (its paths and answers); a change that breaks a client raises it."""
REF = "#/components/schemas/{model}"
DESCRIPTION = ("The daemon's HTTP API: metrics, health, sources at run time, the event history, the "
               'console\'s data. Errors are `{"error": "one line"}`. With `http.token` set, the control and '
               "data routes need `Authorization: Bearer <token>`.")  # fmt: skip


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(BaseModel):
    """Every error: one line that names the key, the source or the limit."""

    error: str = Field(description="What was refused and why, in one line.")


class SourceState(_Answer):
    """A source as `GET /sources` lists it (ended and failed ones too, until removed)."""

    id: str = Field(description="The source's id.")
    state: str = Field(description="opening, running, draining, ended or failed.")
    frames: int = Field(description="Frames that came out of every output.")
    read: int | None = Field(description="Frames read from the source.")
    dropped: int = Field(description="Frames dropped by the source's policy.")
    stale: int = Field(description="Frames dropped as older than max_staleness_ms.")
    reconnects: int = Field(description="Times a live source was opened again.")
    error: str | None = Field(description="Why it failed, when it did.")
    width: int | None = Field(description="The frame's width, once the source is open.")
    height: int | None = Field(description="The frame's height, once the source is open.")


class SourceList(BaseModel):
    """The job's sources (on a fleet's replica: the whole fleet's)."""

    sources: list[SourceState] = Field(description="Every source, in the order they were added.")


class Removing(_Answer):
    """A DELETE's answer: 202 `removing` (a running source stops reading), 200 `removed` (forgotten)."""

    removing: str | None = Field(None, description="The source that stops reading; its outputs then close.")
    removed: str | None = Field(None, description="The ended source forgotten, with its metric series.")


class SourceSettingsState(BaseModel):
    """A source's settings: those changed at run time, and what applies to it now."""

    id: str = Field(description="The source's id.")
    settings: dict[str, Any] = Field(
        description="The keys changed at run time (PATCH), kept in the state file; empty: none."
    )
    applied: dict[str, Any] = Field(
        description="What applies: the changed keys over the config's own lines, zones, score threshold, "
        "interval and classes."
    )


class Probe(_Answer):
    """A health probe's answer (503 with the same shape when it fails)."""

    live: bool | None = Field(None, description="The hub loop turns (else a liveness probe restarts it).")
    ready: bool | None = Field(None, description="Every stage has a worker and the daemon is not stopping.")
    reason: str | None = Field(None, description="Why not ready.")


class Accepted(_Answer):
    """`{"drain": true}` or `{"stop": true}`: the daemon stops reading and exits."""


class ModelSwap(BaseModel):
    """The last model swap (pipeline.hub.swap)."""

    version: str = Field(description="The label of the model it brings.")
    path: str = Field(description="Its file.")
    state: str = Field(description="starting, taking_over, retiring, done or failed.")
    error: str | None = Field(description="Why it failed, in one line: the old model goes on.")
    took_s: float | None = Field(description="Seconds from the request to the new workers taking over.")


class ModelState(BaseModel):
    """The model the job runs and its last swap."""

    version: str | None = Field(description="The label its records name (`model` in each record).")
    path: str | None = Field(description="Its file.")
    swap: ModelSwap | None = Field(description="The last swap asked for; null: none.")


class NewModel(BaseModel):
    """POST /model's body: a new version of the running model."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The new ONNX file (relative: to the daemon's working folder).")
    version: str | None = Field(
        None, min_length=1, description="The label its records carry; left out: file name@SHA-256 prefix."
    )


class Event(_Answer):
    """An event of the history (media.history), as the outputs announced it."""

    id: int = Field(description="The event's id in its recording output's store.")
    source: str = Field(description="The source it happened on.")
    event: str = Field(description="class_appeared, track_started, crossed (a line), entered (a zone), ...")
    label: str | None = Field(description="The object's class.")
    place: str | None = Field(description="The line's or the zone's name.")
    track_id: int | None = Field(description="The track's id, where a tracker runs.")
    wall: float = Field(description="When, in seconds since the epoch.")
    time_s: float | None = Field(description="When, on the source's timeline.")
    clip_id: int | None = Field(description="The clip that holds it.")
    clip: str | None = Field(description="The clip's file.")
    snapshot: str | None = Field(description="The snapshot's file.")
    clip_url: str | None = Field(description="The clip on this server (GET /clips/{clip_id}).")
    snapshot_url: str | None = Field(description="The snapshot on this server (GET /snapshots/{event_id}).")
    data: dict[str, Any] = Field(description="The whole event as announced.")


class EventPage(BaseModel):
    """A page of events, newest first."""

    output: str = Field(description="The recording output whose store answered.")
    outputs: list[str] = Field(description="Every recording output with a history (`?output=` takes each).")
    events: list[Event] = Field(description="The events of the page.")
    next: int | None = Field(description="Pass it as `before` for the next page; null at the end.")


class Clip(_Answer):
    """A clip of the history: `writing`, `done`, or `cut` (its writer was killed; it plays up to then)."""

    id: int = Field(description="The clip's id.")
    source: str = Field(description="Its source.")
    path: str = Field(description="Its file.")
    state: str = Field(description="writing, done or cut.")
    start_wall: float = Field(description="Its first frame, in seconds since the epoch.")
    end_wall: float | None = Field(description="Its last frame, once done.")
    frames: int = Field(description="Video frames in it, once done.")
    bytes: int = Field(description="Its size.")
    events: list[int] = Field(description="The ids of the events in it.")
    url: str = Field(description="The clip on this server (GET /clips/{clip_id}).")


class ClipPage(BaseModel):
    """A page of clips, newest first."""

    output: str = Field(description="The recording output whose store answered.")
    outputs: list[str] = Field(description="Every recording output with a history (`?output=` takes each).")
    clips: list[Clip] = Field(description="The clips of the page.")
    next: int | None = Field(description="Pass it as `before` for the next page; null at the end.")


def _json(model: str, description: str) -> dict[str, Any]:
    schema = {"$ref": REF.format(model=model)}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _content(kind: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "content": {kind: {"schema": schema} if schema else {}}}


def _param(name: str, where: str = "path", kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path", "schema": {"type": kind}}


def _op(name: str, summary: str, responses: dict[str, Any], *params: dict[str, Any]) -> dict[str, Any]:
    operation = {"operationId": name, "summary": summary, "responses": responses}
    return {**operation, "parameters": list(params)} if params else operation


UNAUTHORISED = _json("Error", "Missing or wrong bearer token (http.token).")
_ERRORS = {"401": UNAUTHORISED, "413": _json("Error", "The body is over 1 MiB."),
           "503": _json("Error", "The daemon is stopping.")}  # fmt: skip
_TEXT = _content("text/plain", "The metrics.", {"type": "string"})
_BINARY = {"type": "string", "format": "binary"}
_FILE = _content("application/octet-stream", "The file.", _BINARY)
_STREAM = _content("text/event-stream", "A stream of `event: stats`.", {"type": "string"})
_NEW_SOURCE = {"required": True, "content": {"application/json": {"schema": {}}},  # document() fills it
               "description": "A `sources:` item, chosen by its `kind` (or its uri), validated as the "
                              "config file's sources are; the keys of SourceSettings (lines, zones, "
                              "...) may come beside them, checked as a PATCH is."}  # fmt: skip


_HISTORY = (
    _param("since", "query", "number"),
    _param("until", "query", "number"),
    _param("before", "query", "integer"),
    _param("limit", "query", "integer"),
    _param("output", "query"),
)
_BAD_FILTER = _json("Error", "A filter that is not one, or not a number.")
_NO_STORE = _json("Error", "No recording output with clips (or none of that `output` name).")
_NOT_THERE = {"404": _json("Error", "No such item, or its file is gone."), "401": UNAUTHORISED}


def _file_token(*params: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    return (*params, _param("output", "query"), _param("token", "query"))


def _probe(name: str, summary: str) -> dict[str, Any]:
    return {"get": _op(name, summary, {"200": _json("Probe", "Yes."), "503": _json("Probe", "No.")})}


OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "/metrics": {"get": _op("metrics", "Prometheus text format.", {"200": _TEXT})},
    "/livez": _probe("livez", "Liveness: 503 when the hub loop stopped turning."),
    "/readyz": _probe("readyz", "Readiness: 503 while starting or stopping."),
    "/healthz": _probe("healthz", "Live and ready; 503 unless both."),
    "/sources": {
        "get": _op("list_sources", "The sources and their state.",
                   {"200": _json("SourceList", "The sources."), **_ERRORS}),
        "post": {**_op("add_source", "Add a source: the keys of a `sources:` item.", {
            "201": _json("SourceState", "Added; it opens now."),
            "400": _json("Error", "Not JSON, or a source the config would refuse (the key named)."),
            "409": _json("Error", "A source of that id exists, or the daemon is stopping."),
            **_ERRORS}), "requestBody": _NEW_SOURCE},
    },
    "/sources/{source_id}": {
        "delete": _op(
            "remove_source", "Stop reading a source; an ended one: forget it (and its settings).",
            {"200": _json("Removing", "Forgotten."), "202": _json("Removing", "Stopping."),
             "404": _json("Error", "No such source."), **_ERRORS}, _param("source_id")),
        "get": _op(
            "source_settings", "A source's settings: changed at run time, and applied.",
            {"200": _json("SourceSettingsState", "Its settings."), "404": _json("Error", "No such source."),
             **_ERRORS}, _param("source_id")),
        "patch": {**_op(
            "change_source", "Change a running source's lines, zones, classes, score threshold or interval, "
            "from its next frame; the keys left out stay, null gives one back to the config.",
            {"200": _json("SourceSettingsState", "Changed, kept in the state file, announced as an event."),
             "400": _json("Error", "Not JSON, or a change the config would refuse (the key named)."),
             "404": _json("Error", "No such source."), "409": _json("Error", "The source has ended."),
             **_ERRORS}, _param("source_id")),
            "requestBody": {"required": True, "description": "The keys to change.",
                            "content": {"application/json": {"schema": {"$ref": REF.format(
                                model="SourceSettings")}}}}},
    },
    "/model": {
        "get": _op("get_model", "The model in use and the last swap.",
                   {"200": _json("ModelState", "The model."), **_ERRORS}),
        "post": {**_op("swap_model", "A new version of the model: its workers start beside the old "
                       "ones and take over; no frame is lost or reordered.", {
            "202": _json("ModelState", "Checked; its workers start (GET /model follows the swap)."),
            "400": _json("Error", "Not JSON, or a model the config would refuse (the key named)."),
            "409": _json("Error", "A swap is under way, or the daemon is stopping."),
            "501": _json("Error", "This job cannot change its model."),
            **_ERRORS}), "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": REF.format(model="NewModel")}}}}},
    },
    "/drain": {"post": _op("drain", "Stop reading every source, finish what is in flight, exit.",
                           {"202": _json("Accepted", "Draining."), **_ERRORS})},
    "/stop": {"post": _op("stop", "Stop now (frames in flight are not finished).",
                          {"202": _json("Accepted", "Stopping."), **_ERRORS})},
    "/openapi.json": {"get": _op("openapi", "This document.",
                                 {"200": _content("application/json", "OpenAPI 3.1.")})},
    "/hls/{source_id}/{name}": {"get": _op(
        "hls_file", "An hls output's playlist or segment (the token: header, ?token= or cookie).",
        {"200": _FILE, "404": _json("Error", "No such file."), "401": UNAUTHORISED},
        _param("source_id"), _param("name"), _param("token", "query"))},
    "/events": {"get": _op(
        "list_events", "The recording outputs' events, newest first, paged; `since` inclusive, `until` not.",
        {"200": _json("EventPage", "A page."), "400": _BAD_FILTER,
         "404": _NO_STORE, "401": UNAUTHORISED},
        *(_param(name, "query") for name in ("source", "label", "place", "event")), *_HISTORY)},
    "/clips": {"get": _op(
        "list_clips", "The clips whose start is in the range, newest first, paged.",
        {"200": _json("ClipPage", "A page."), "400": _BAD_FILTER,
         "404": _NO_STORE, "401": UNAUTHORISED},
        _param("source", "query"), _param("state", "query"), *_HISTORY)},
    "/clips/{clip_id}": {"get": _op(
        "clip_file", "A clip's MP4; Range requests are answered (206), so a <video> seeks.",
        {"200": _content("video/mp4", "The clip.", _BINARY),
         "206": _content("video/mp4", "The range asked for.", _BINARY),
         **_NOT_THERE}, *_file_token(_param("clip_id", kind="integer")))},
    "/snapshots/{event_id}": {"get": _op(
        "snapshot_file", "An event's snapshot JPEG.",
        {"200": _content("image/jpeg", "The snapshot.", _BINARY), **_NOT_THERE},
        *_file_token(_param("event_id", kind="integer")))},
    "/console/stats": {"get": _op(
        "console_stats", "The console's figures, with the chart points after `since`.",
        {"200": _content("application/json", "The figures."), "400": _json("Error", "since is not a time."),
         "401": UNAUTHORISED}, _param("since", "query", "number"))},
    "/console/events": {"get": _op(
        "console_events", "The console's figures as server-sent events.",
        {"200": _STREAM, "401": UNAUTHORISED}, _param("since", "query", "number"))},
    "/console/preview/{source_id}": {"get": _op(
        "console_preview", "The next preview JPEG after frame number `after` (204: none yet).",
        {"200": _content("image/jpeg", "A JPEG; its number in X-Frame."),
         "204": {"description": "No newer frame within 2 s."}, "404": _json("Error", "No such source."),
         "401": UNAUTHORISED}, _param("source_id"), _param("after", "query", "integer"))},
}  # fmt: skip
"""The operations of each route that carries data (the console's static files are left out)."""


def _schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """Every model's JSON schema, and that of POST /sources' body: any kind of source the registry has."""
    schemas: dict[str, Any] = {}
    kinds = []
    for kind in SOURCES.names():
        model = config_model(SOURCES, kind)
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        if {"$ref": REF.format(model=model.__name__)} not in kinds:
            kinds.append({"$ref": REF.format(model=model.__name__)})
    models = (Error, SourceState, SourceList, Removing, SourceSettingsState, SourceSettings, Probe, Accepted,
              EventPage, ClipPage)
    for model in (*models, ModelState, NewModel):
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas, kinds[0] if len(kinds) == 1 else {"anyOf": kinds}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    schemas, new_source = _schemas()
    paths = json.loads(json.dumps({path: OPERATIONS[path] for path in ROUTES if path in OPERATIONS}))
    paths["/sources"]["post"]["requestBody"]["content"]["application/json"]["schema"] = new_source
    return {
        "openapi": "3.1.0",
        "info": {"title": "framewire", "version": VERSION, "description": DESCRIPTION},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{}, {"bearer": []}],
    }  # fmt: skip


@cache
def document_bytes() -> bytes:
    """The document as served (built once, on the first request)."""
    return json.dumps(document(), indent=1).encode()
