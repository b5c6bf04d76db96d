"""Facts needed to reproduce a run: what server and model answered, on which GPU, with which trace.

Read by the master (or the local runner) once per run; each probe is best effort and bounded in
time: a server that does not answer one of these endpoints only costs that fact.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Endpoints that name a server's version, by server: (path, fields to keep).
VERSION_ENDPOINTS = (
    ("/version", ("version",)),  # vLLM
    ("/get_server_info", ("version", "model_path", "tp_size", "max_total_num_tokens")),  # SGLang
    ("/info", ("version", "model_id", "model_dtype", "max_total_tokens", "sha")),  # TGI
    ("/props", ("build_info", "model_path", "total_slots")),  # llama.cpp server
    ("/v2", ("name", "version")),  # Triton
)
MODEL_FIELDS = ("id", "owned_by", "root", "max_model_len", "created")
SECRET_OPTIONS = ("--api-key", "--key", "--token", "--password", "--header", "-H")
_SECRETISH = re.compile(r"(authorization|bearer|api[_-]?key|token|secret|password)", re.I)


def gpu_facts(info: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    """GPU name, UUID, driver and CUDA versions from the sidecar's (or dcgm-exporter's) info series."""
    rows = info.get("llm_locust_gpu_info") or []
    keep = ("gpu", "model_name", "uuid", "pci_bus_id", "gpu_instance_id", "driver_version", "cuda_version")
    gpus = [{k: r[k] for k in keep if r.get(k)} for r in rows]
    if not gpus:  # dcgm-exporter puts the model on every DCGM_FI_* series
        seen: dict[str, dict[str, str]] = {}
        for rows in info.values():
            for r in rows:
                if "modelName" in r and r.get("UUID"):
                    seen.setdefault(
                        r["UUID"],
                        {
                            "gpu": r.get("gpu", ""),
                            "model_name": r["modelName"],
                            "uuid": r["UUID"],
                            "driver_version": r.get("DCGM_FI_DRIVER_VERSION", ""),
                        },
                    )
        gpus = list(seen.values())
    return gpus


def trace_facts(path: str, trace_format: str = "") -> dict[str, Any] | None:
    """The trace file's name, size and sha256 (the run is only reproducible with the same bytes)."""
    if not path:
        return None
    p = Path(path)
    out: dict[str, Any] = {"path": str(p), "format": trace_format or None}
    try:
        h = hashlib.sha256()
        size = 0
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
                size += len(block)
        out.update(sha256=h.hexdigest(), bytes=size)
    except OSError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def redact_argv(argv: list[str]) -> list[str]:
    """A command line safe to store: values of secret-bearing options and key-like text masked."""
    out, hide_next = [], False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        opt, eq, _value = a.partition("=")
        if opt in SECRET_OPTIONS:
            if eq:
                out.append(opt + "=***")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append("***" if _SECRETISH.search(a) and ("=" in a or ":" in a) and not a.startswith("--") else a)
    return out
