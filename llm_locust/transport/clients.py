"""The client that sends the run's main API: an HTTP/1.1 stream client for every API with an
adapter, or the gRPC client for vLLM's gRPC server (`--api vllm-grpc`). Users and the open-loop
dispatcher both get theirs here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_locust.protocols import GRPC_APIS, get_adapter
from llm_locust.protocols.base import request_headers
from llm_locust.transport.client import Client
from llm_locust.transport.grpc_h2 import H2GrpcClient
from llm_locust.transport.http import StreamClient

if TYPE_CHECKING:  # every client meets the Client contract: mypy checks this line
    from llm_locust.transport.fake import FakeClient
    from llm_locust.transport.grpc_h2 import H2GrpcClient
    from llm_locust.transport.grpc_io import GrpcStreamClient

    _CLIENTS: tuple[type[Client], ...] = (StreamClient, H2GrpcClient, GrpcStreamClient, FakeClient)


def main_client(settings, host: str, http_client=None) -> Client:
    """StreamClient on `http_client` (a geventhttpclient HTTPClient for the host), or, for a gRPC
    API, an H2GrpcClient (our own HTTP/2 reader: grpcio's client cost ~40x more per token) with
    the key as gRPC metadata (no HTTP client needed)."""
    if settings.api in GRPC_APIS:
        key = settings.api_key
        return H2GrpcClient(
            host,
            timeouts=settings.timeouts,
            limits=settings.limits,
            metadata={"authorization": f"Bearer {key}"} if key else None,
        )
    adapter = get_adapter(settings.api)
    return StreamClient(
        http_client,
        host,
        adapter,
        settings.timeouts,
        headers=request_headers(adapter, settings.api_key),
        limits=settings.limits,
    )
