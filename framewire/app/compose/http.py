"""The HTTP composer (`http:`): where the control API listens, and the console with its previews."""

from __future__ import annotations

import functools
from typing import Any

from framewire.config import Config
from framewire.app.history_http import history_stores
from framewire.config.video_out import HlsOutput
from framewire.media import yuv
from framewire.media.jpeg import jpeg_encoder
from framewire.pipeline.plan import HttpSettings


def http_settings(config: Config) -> HttpSettings | None:
    """The control API, the console and the hls outputs' folders; None when `http.enabled` is off."""
    h = config.http
    if not h.enabled:
        return None
    c = h.console
    hls = tuple(out.path for out in config.outputs if isinstance(out, HlsOutput))
    encode = functools.partial(_preview, jpeg_encoder(c.preview_width, c.jpeg_quality)) if c.enabled else None
    return HttpSettings(
        host=h.host,
        port=h.port,
        token=h.token,
        keep_running=h.keep_running,
        console=c.enabled,
        encode_preview=encode,
        preview_fps=c.preview_fps,
        hls=hls,
        recordings=history_stores(config),
        openapi=_openapi,
    )


def _openapi() -> bytes:
    from framewire.app.http_api import document_bytes  # the HTTP side stays out of the workers' imports

    return document_bytes()


def _preview(encode: Any, image: Any) -> bytes:
    """A console preview's JPEG, of a BGR frame or of an I420 one (a job that keeps YUV frames)."""
    return bytes(encode(yuv.to_bgr(image)))
