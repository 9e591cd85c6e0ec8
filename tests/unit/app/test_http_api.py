"""The OpenAPI document (app.http_api) against the server's routes (pipeline.ops.api.ROUTES): every
route that carries data has its operations, with the methods it takes; every reference resolves;
the body of POST /sources is the config's own source schema; the reference page names every route."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from framewire.app.http_api import OPERATIONS, document, document_bytes
from framewire.pipeline.ops.api import ROUTES
from framewire.pipeline.ops.console import STATIC

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_route_has_its_operations_and_no_more() -> None:
    data_routes = {path: methods for path, methods in ROUTES.items() if path not in STATIC}
    assert set(OPERATIONS) == set(data_routes)
    for path, methods in data_routes.items():
        assert set(OPERATIONS[path]) == {m.lower() for m in methods if m != "HEAD"}, path


def test_the_document_is_openapi_3_1_and_every_reference_resolves() -> None:
    doc = json.loads(document_bytes())
    assert doc["openapi"] == "3.1.0" and list(doc["paths"]) == [p for p in ROUTES if p in OPERATIONS]
    schemas = doc["components"]["schemas"]
    missing = {ref for ref in _refs(doc) if ref.removeprefix("#/components/schemas/") not in schemas}
    assert missing == set()
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_the_body_of_post_sources_is_the_configs_source_schema() -> None:
    body = document()["paths"]["/sources"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    source = document()["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert {"id", "uri", "realtime", "policy", "max_frames"} <= set(source["properties"])
    assert source["additionalProperties"] is False and "id" in source["required"]  # extra="forbid"


def test_the_reference_page_names_every_route() -> None:
    page = (ROOT / "docs" / "reference" / "http-api.md").read_text()
    for path in OPERATIONS:
        shown = re.sub(r"\{[a-z_]+\}", "", path).rstrip("/")
        assert shown in page, path
