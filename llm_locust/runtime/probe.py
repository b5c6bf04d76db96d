"""Best-effort probes of the target server at test start: which models and which version answer.

Bounded in time; a server that does not answer one of these endpoints only costs that fact. The
endpoint tables live with the other provenance facts (report.provenance)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import orjson
from geventhttpclient import HTTPClient

from llm_locust.report.provenance import MODEL_FIELDS, VERSION_ENDPOINTS


def _get_json(http, path: str, headers: dict[str, str]) -> Any:
    r = http.get(path, headers=headers)
    body = r.read()
    if r.status_code != 200:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def probe_server(base_url: str, headers: dict[str, str] | None = None, timeout: float = 3.0) -> dict[str, Any]:
    """{"models": [...], "version": {...}, "version_endpoint": path} from what the server answers."""
    out: dict[str, Any] = {"models": [], "version": None, "version_endpoint": None}
    base = urlsplit(base_url).path.rstrip("/")
    try:
        http = HTTPClient.from_url(base_url, connection_timeout=timeout, network_timeout=timeout, insecure=True)
    except Exception as e:  # noqa: BLE001 - a bad URL only costs the facts
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    try:
        try:
            doc = _get_json(http, base + "/v1/models", headers or {})
            rows = doc.get("data") if isinstance(doc, dict) else None
            out["models"] = [{k: m[k] for k in MODEL_FIELDS if k in m} for m in rows or [] if isinstance(m, dict)]
        except Exception as e:  # noqa: BLE001
            out["error"] = f"/v1/models: {type(e).__name__}: {e}"
        for path, fields in VERSION_ENDPOINTS:
            try:
                doc = _get_json(http, base + path, headers or {})
            except Exception:  # noqa: BLE001 - not this server's endpoint
                continue
            if isinstance(doc, dict) and any(f in doc for f in fields):
                out["version"] = {f: doc[f] for f in fields if f in doc and not isinstance(doc[f], (dict, list))}
                out["version_endpoint"] = path
                break
    finally:
        http.close()
    return out
