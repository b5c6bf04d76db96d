"""What a server says it serves (transport/served.py): the context length from vLLM's
/v1/models `max_model_len` or llama.cpp's /props `n_ctx`, against a real HTTP server that
answers as each does. Hostile servers: tests/test_hostile_servers.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm_locust.transport.served import context_length


@contextmanager
def answering(replies: dict[str, object]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A real HTTP server on 127.0.0.1 that answers GET PATH with replies[PATH] as JSON (404
    otherwise); yields its URL and the headers of each request it got."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            body = json.dumps(replies[self.path]).encode() if self.path in replies else b"{}"
            self.send_response(200 if self.path in replies else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_vllms_max_model_len_comes_first_and_the_key_is_sent():
    replies = {"/v1/models": {"data": [{"id": "m", "max_model_len": 4096}]}, "/props": {"n_ctx": 512}}
    with answering(replies) as (url, seen):
        assert context_length(url, api_key="sk-1") == 4096
    assert [h["path"] for h in seen] == ["/v1/models"]
    assert seen[0]["authorization"] == "Bearer sk-1"


@pytest.mark.parametrize(
    "props",
    [{"n_ctx": 2048}, {"default_generation_settings": {"n_ctx": 2048}}],
    ids=["top-level", "generation-settings"],
)
def test_llama_cpp_says_its_context_in_props(props):
    replies = {"/v1/models": {"data": [{"id": "m"}]}, "/props": props}
    with answering(replies) as (url, seen):
        assert context_length(url) == 2048
    assert [h["path"] for h in seen] == ["/v1/models", "/props"]
    assert "authorization" not in seen[0]


@pytest.mark.parametrize(
    "replies",
    [{}, {"/v1/models": {"data": [{"max_model_len": 0}]}, "/props": {"n_ctx": "big"}}, {"/v1/models": [1, 2]}],
    ids=["nothing", "not-a-length", "not-an-object"],
)
def test_a_server_that_says_no_length_says_none(replies):
    with answering(replies) as (url, _):
        assert context_length(url) is None
