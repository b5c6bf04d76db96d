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

from llm_locust.workload.agentic import detect_sessions
from llm_locust.workload.formats import detect
from llm_locust.workload.formats.reader import Source, TraceError

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
    """The trace file's name, format, size, modification time and sha256 (the run is only
    reproducible with the same bytes). Taken before the load: a trace edited while the run goes on
    is then found by `trace_changed` at its end, not recorded with the edited file's hash. The
    format is the given one, else the one detected from the file, as the run detects it. Cheap
    enough for the start: 0.2 ms for the bundled sample, ~25 ms for a 3 MB trace (half the
    sha256, half reading the head to tell the format)."""
    if not path:
        return None
    p = Path(path)
    out: dict[str, Any] = {"path": str(p), "format": trace_format or _detected_format(p)}
    try:
        st = p.stat()
        out.update(sha256=_sha256(p), bytes=st.st_size, mtime_ns=st.st_mtime_ns)
    except OSError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _detected_format(p: Path) -> str | None:
    """The format the run reads `p` as (session formats first, as `load_workload` does); None
    when it cannot be told (the run itself then says why)."""
    try:
        session = detect_sessions(p)
        if session is not None:
            return session
        src = Source(p, str(p))
        try:
            return detect(src.head(), str(p)).name
        finally:
            src.close()
    except (TraceError, OSError, ValueError):
        return None


REHASH_ALWAYS_BYTES = 16 << 20  # up to this size the end of a run hashes the trace again (< 0.1 s)


def trace_changed(facts: dict[str, Any] | None, path: str | None = None) -> str | None:
    """At the end of a run: one line when the trace differs from what `trace_facts` found at its
    start (the results keep the start's hash; the requests sent may come from either version),
    else None. A trace up to REHASH_ALWAYS_BYTES is hashed again; a larger one only when its size
    or modification time changed."""
    if not facts or "sha256" not in facts:
        return None
    p = Path(path or facts["path"])
    try:
        st = p.stat()
        same_stat = st.st_size == facts.get("bytes") and st.st_mtime_ns == facts.get("mtime_ns")
        if same_stat and st.st_size > REHASH_ALWAYS_BYTES:
            return None
        now = _sha256(p)
    except OSError as e:
        return f"the trace {p} cannot be read at the end of the run ({e.strerror or e}): it was moved or removed"
    if now == facts["sha256"]:
        return None
    return (
        f"the trace {p} changed during the run (sha256 {facts['sha256'][:12]} at the start, {now[:12]} now, "
        f"{facts.get('bytes')} -> {st.st_size} bytes): the results keep the start's hash; requests may come "
        "from either version: run again with the trace left as it is"
    )


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
