#!/usr/bin/env python3
"""Record byte-exact streaming replies of the newer APIs from real servers into
tests/fixtures/captures/apis/ (the fixtures of tests/test_apis.py).

    python scripts/record_captures.py            # llama-server + SmolLM2 (scripts/real-servers.sh llama)
    python scripts/record_captures.py --vllm     # also vLLM's CPU build (scripts/real-servers.sh vllm)

Each capture is a pair: NAME.sse (the response body, de-chunked, bytes as sent) and
NAME.headers (status line and headers). Requests use temperature 0 and ignore_eos, so a rerun
gives the same tokens (ids and timings differ). The request bodies are kept in NAME.request.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import realservers  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "captures" / "apis"
MESSAGES = [
    {"role": "system", "content": "You are brief."},
    {"role": "user", "content": "Write one sentence about the sea."},
]

# name -> (path, headers, body); "model" is filled in per server
REQUESTS = {
    "responses": (
        "/v1/responses",
        {},
        {"input": MESSAGES, "max_output_tokens": 12, "stream": True, "ignore_eos": True, "temperature": 0},
    ),
    "responses_text": (
        "/v1/responses",
        {},
        {
            "input": "The capital of France is",
            "max_output_tokens": 8,
            "stream": True,
            "ignore_eos": True,
            "temperature": 0,
        },
    ),
    "messages": (
        "/v1/messages",
        {"anthropic-version": "2023-06-01", "x-api-key": "none"},
        {
            "system": "You are brief.",
            "messages": MESSAGES[1:],
            "max_tokens": 12,
            "stream": True,
            "ignore_eos": True,
            "temperature": 0,
        },
    ),
}


def post(url: str, path: str, headers: dict, body: dict) -> tuple[bytes, bytes]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream", **headers},
        )
        resp = conn.getresponse()
        head = f"HTTP/1.1 {resp.status} {resp.reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in resp.getheaders())
        return head.encode("latin-1"), resp.read()
    finally:
        conn.close()


def record(server: str, url: str, model: str) -> None:
    for name, (path, headers, body) in REQUESTS.items():
        body = {"model": model, **body}
        head, raw = post(url, path, headers, body)
        stem = OUT / f"{server}_{name}"
        stem.with_suffix(".headers").write_bytes(head)
        stem.with_suffix(".sse").write_bytes(raw)
        stem.with_suffix(".request.json").write_text(json.dumps({"path": path, "body": body}, indent=1) + "\n")
        print(f"{stem.name}: {head.splitlines()[0].decode()}, {len(raw)} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", action="store_true", help="also record from vLLM (CPU build)")
    ap.add_argument("--no-llama", action="store_true", help="skip llama-server")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.no_llama:
        gguf = realservers.smollm2_gguf()
        if gguf is None:
            sys.exit(f"SmolLM2 GGUF missing; {realservers.PROVISION_HINT}")
        with realservers.LlamaServer(gguf, alias="smollm2", slots=1, ctx=2048) as srv:
            record("llama_server", srv.url, srv.alias)
    if args.vllm:
        py, model_dir = realservers.vllm_python(), realservers.vllm_model_dir()
        if py is None or model_dir is None:
            sys.exit(f"vLLM missing; {realservers.VLLM_PROVISION_HINT}")
        with realservers.VllmServer(model_dir, python=py, served_model_name="smollm2") as srv:
            record("vllm", srv.url, "smollm2")


if __name__ == "__main__":
    main()
