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
from framewire.pipeline.ops.api import ROUTES
from framewire.registry import SOURCES

VERSION = "1"
"""The API's version (its paths and answers); a change that breaks a client raises it."""
REF = "#/components/schemas/{model}"


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

    removing: str | None = Field(None, description="The source that stops reading; its outputs close once done.")
    removed: str | None = Field(None, description="The ended source forgotten, with its metric series.")


class Probe(_Answer):
    """A health probe's answer (503 with the same shape when it fails)."""

    live: bool | None = Field(None, description="The hub loop turns (a liveness probe restarts the daemon otherwise).")
    ready: bool | None = Field(None, description="Every stage has a worker and the daemon is not stopping.")
    reason: str | None = Field(None, description="Why not ready.")


class Accepted(_Answer):
    """`{"drain": true}` or `{"stop": true}`: the daemon stops reading and exits."""


def _json(model: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": REF.format(model=model)}}}}


_ERRORS = {"401": _json("Error", "Missing or wrong bearer token (http.token)."),
           "413": _json("Error", "The body is over 1 MiB."), "503": _json("Error", "The daemon is stopping.")}  # fmt: skip
_TEXT = {"text/plain": {"schema": {"type": "string"}}}
_FILE = {"description": "The file.", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}  # fmt: skip

OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "/metrics": {"get": {"operationId": "metrics", "summary": "Prometheus text format.",
                         "responses": {"200": {"description": "The metrics.", "content": _TEXT}}}},
    "/livez": {"get": {"operationId": "livez", "summary": "Liveness: 503 when the hub loop stopped turning.",
                       "responses": {"200": _json("Probe", "Live."), "503": _json("Probe", "Not live.")}}},
    "/readyz": {"get": {"operationId": "readyz", "summary": "Readiness: 503 while starting or stopping.",
                        "responses": {"200": _json("Probe", "Ready."), "503": _json("Probe", "Not ready.")}}},
    "/healthz": {"get": {"operationId": "healthz", "summary": "Live and ready; 503 unless both.",
                         "responses": {"200": _json("Probe", "Both."), "503": _json("Probe", "Not both.")}}},
    "/sources": {
        "get": {"operationId": "list_sources", "summary": "The sources and their state.",
                "responses": {"200": _json("SourceList", "The sources."), **_ERRORS}},
        "post": {"operationId": "add_source", "summary": "Add a source: the keys of a `sources:` item.",
                 "requestBody": {"required": True, "description": "A `sources:` item, chosen by its `kind` (or "
                                 "its uri), validated as the config file's sources are.",
                                 "content": {"application/json": {"schema": {}}}},  # new_source() fills it
                 "responses": {"201": _json("SourceState", "Added; it opens now."),
                               "400": _json("Error", "Not JSON, or a source the config would refuse (the key named)."),
                               "409": _json("Error", "A source of that id exists, or the daemon is stopping."),
                               **_ERRORS}},
    },
    "/sources/{source_id}": {"delete": {
        "operationId": "remove_source", "summary": "Stop reading a source; an ended one: forget it.",
        "parameters": [{"name": "source_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": _json("Removing", "Forgotten."), "202": _json("Removing", "Stopping."),
                      "404": _json("Error", "No such source."), **_ERRORS}}},
    "/drain": {"post": {"operationId": "drain", "summary": "Stop reading every source, finish what is in flight, exit.",
                        "responses": {"202": _json("Accepted", "Draining."), **_ERRORS}}},
    "/stop": {"post": {"operationId": "stop", "summary": "Stop now (frames in flight are not finished).",
                       "responses": {"202": _json("Accepted", "Stopping."), **_ERRORS}}},
    "/openapi.json": {"get": {"operationId": "openapi", "summary": "This document.",
                              "responses": {"200": {"description": "OpenAPI 3.1.", "content": {"application/json": {}}}}}},
    "/hls/{source_id}/{name}": {"get": {
        "operationId": "hls_file", "summary": "An hls output's playlist or segment (token: header, ?token= or cookie).",
        "parameters": [{"name": "source_id", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "token", "in": "query", "required": False, "schema": {"type": "string"}}],
        "responses": {"200": _FILE, "404": _json("Error", "No such file."), "401": _ERRORS["401"]}}},
    "/console/stats": {"get": {
        "operationId": "console_stats", "summary": "The console's figures, with the chart points after `since`.",
        "parameters": [{"name": "since", "in": "query", "required": False, "schema": {"type": "number"}}],
        "responses": {"200": {"description": "The figures.", "content": {"application/json": {}}},
                      "400": _json("Error", "since is not a time."), "401": _ERRORS["401"]}}},
    "/console/events": {"get": {
        "operationId": "console_events", "summary": "The console's figures as server-sent events (`event: stats`).",
        "parameters": [{"name": "since", "in": "query", "required": False, "schema": {"type": "number"}}],
        "responses": {"200": {"description": "A stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                      "401": _ERRORS["401"]}}},
    "/console/preview/{source_id}": {"get": {
        "operationId": "console_preview", "summary": "The next preview JPEG after frame number `after` (204: none yet).",
        "parameters": [{"name": "source_id", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "after", "in": "query", "required": False, "schema": {"type": "integer"}}],
        "responses": {"200": {"description": "A JPEG; its number in X-Frame.", "content": {"image/jpeg": {}}},
                      "204": {"description": "No newer frame within 2 s."}, "404": _json("Error", "No such source."),
                      "401": _ERRORS["401"]}}},
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
    for model in (Error, SourceState, SourceList, Removing, Probe, Accepted):
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
        "info": {"title": "framewire", "version": VERSION,
                 "description": "The daemon's HTTP API: metrics, health, sources at run time, the console's data. "
                                "Errors are `{\"error\": \"one line\"}`. With `http.token` set, the control and "
                                "data routes need `Authorization: Bearer <token>`."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{}, {"bearer": []}],
    }  # fmt: skip


@cache
def document_bytes() -> bytes:
    """The document as served (built once, on the first request)."""
    return json.dumps(document(), indent=1).encode()
