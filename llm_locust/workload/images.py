"""Images for multimodal chat requests: synthetic ones made with Pillow, and image files a trace names.

Synthetic images are seeded noise (random pixels from ``random.Random`` seeded by the run's seed,
the size, the format and the image's index), so the same seed gives the same bytes on every worker
and every run; random pixels do not compress, so a PNG's size follows its pixel count the way a
photograph's does. Each (size, format, index) is encoded once and kept as its ``data:`` URL: the
request path only looks it up. A request with N images uses indices 0..N-1 (index modulo
``distinct`` when more distinct images than that are not wanted).

Image files a trace names (``file://`` URLs in a record's content parts, see
workload.formats.aiperf) are read once and kept as ``data:`` URLs too.

``content_parts(text, urls)`` builds OpenAI chat content: a text part, then one
``{"type": "image_url", "image_url": {"url": ...}}`` part per image.
"""

from __future__ import annotations

import base64
import io
import mimetypes
import random
import re
from collections import OrderedDict
from typing import Any

__all__ = ["ImageMaker", "parse_size", "content_parts", "file_data_url", "FORMATS", "image_parts"]

FORMATS = ("png", "jpeg")
_MIME = {"png": "image/png", "jpeg": "image/jpeg"}
MAX_SIDE = 8192


def parse_size(text: str) -> tuple[int, int]:
    """``WxH`` -> (W, H); ValueError saying what is wrong."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not m:
        raise ValueError(f"expected an image size WIDTHxHEIGHT, e.g. 512x512, got {text!r}")
    w, h = int(m.group(1)), int(m.group(2))
    if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
        raise ValueError(f"image sides must be 1..{MAX_SIDE} pixels, got {w}x{h}")
    return w, h


def _pillow():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is a dependency
        raise RuntimeError("images need Pillow: pip install Pillow") from None
    return Image


class ImageMaker:
    """Seeded synthetic images as ``data:`` URLs, encoded once per (size, format, index)."""

    def __init__(self, seed: int = 0, *, cache: int = 256, distinct: int = 64) -> None:
        self.seed = int(seed)
        self.distinct = max(1, int(distinct))
        self._cache: OrderedDict[tuple[int, int, str, int], tuple[str, int]] = OrderedDict()
        self._limit = max(1, int(cache))

    def image_bytes(self, size: tuple[int, int], fmt: str = "png", index: int = 0) -> bytes:
        """The encoded image (PNG or JPEG) for this seed, size, format and index."""
        if fmt not in _MIME:
            raise ValueError(f"unknown image format {fmt!r}; one of {', '.join(FORMATS)}")
        w, h = size
        rng = random.Random(f"llm-locust-image/{self.seed}/{w}x{h}/{fmt}/{index}")
        img = _pillow().frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
        buf = io.BytesIO()
        if fmt == "png":
            img.save(buf, format="PNG", compress_level=1)  # no timestamps or other varying chunks
        else:
            img.save(buf, format="JPEG", quality=85)
        return buf.getvalue()

    def data_url(self, size: tuple[int, int], fmt: str = "png", index: int = 0) -> tuple[str, int]:
        """(``data:`` URL, image bytes before base64) for this image; encoded on first use only."""
        key = (size[0], size[1], fmt, index % self.distinct)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        raw = self.image_bytes(size, fmt, key[3])
        hit = (f"data:{_MIME[fmt]};base64,{base64.b64encode(raw).decode('ascii')}", len(raw))
        self._cache[key] = hit
        if len(self._cache) > self._limit:
            self._cache.popitem(last=False)
        return hit


_FILES: OrderedDict[str, tuple[str, int]] = OrderedDict()
_FILES_LIMIT = 256


def file_data_url(path: str) -> tuple[str, int]:
    """(``data:`` URL, bytes) of an image file, read once (OSError when it cannot be read)."""
    hit = _FILES.get(path)
    if hit is not None:
        _FILES.move_to_end(path)
        return hit
    with open(path, "rb") as f:
        raw = f.read()
    mime = mimetypes.guess_type(path)[0] or "application/octet-stream"
    hit = (f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}", len(raw))
    _FILES[path] = hit
    if len(_FILES) > _FILES_LIMIT:
        _FILES.popitem(last=False)
    return hit


def content_parts(text: str, urls: list[str]) -> list[dict[str, Any]]:
    """OpenAI chat content: the text, then each image."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.extend({"type": "image_url", "image_url": {"url": u}} for u in urls)
    return parts


def image_parts(messages: list[dict[str, Any]] | None) -> int:
    """How many image parts a message list holds."""
    n = 0
    for m in messages or ():
        c = m.get("content")
        if isinstance(c, list):
            n += sum(1 for p in c if isinstance(p, dict) and p.get("type") == "image_url")
    return n
