"""A fast stand-in for vLLM's gRPC server (`vllm serve --grpc`), for client-ingest benchmarks:
every `VllmEngine/Generate` call streams N one-token `chunk` messages (token id, prompt_tokens 64,
completion_tokens 1, cached_tokens 0) and a `complete` (finish_reason "length"), pre-encoded,
as fast as grpcio sends them; `GetModelInfo` names the model "bench-model". Field numbers as
llm_locust.protocols.grpc_vllm reads them (smg-grpc-proto's vllm_engine.proto), encoded with its
helpers.

Run: python benchmarks/grpc_stream_server.py PORT [N]   (prints "ready PORT" when it listens)
"""

from __future__ import annotations

import sys
from concurrent import futures

import grpc

from llm_locust.protocols.grpc_vllm import _len_field as _field
from llm_locust.protocols.grpc_vllm import _scalar, _varint


def _uint(number: int, value: int) -> bytes:
    return _scalar(number, "uint", value, "")


def messages(n: int) -> list[bytes]:
    chunks = [_field(1, _field(1, _varint(1000 + i)) + _uint(2, 64) + _uint(3, 1) + _uint(4, 0)) for i in range(n)]
    return chunks + [_field(2, _field(2, b"length") + _uint(3, 64))]


def main() -> None:
    port, n = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 256
    replies = messages(n)
    info = _field(1, b"bench-model") + _field(6, b"bench-model")
    handler = grpc.method_handlers_generic_handler(
        "vllm.grpc.engine.VllmEngine",
        {
            "Generate": grpc.unary_stream_rpc_method_handler(lambda request, context: iter(replies)),
            "GetModelInfo": grpc.unary_unary_rpc_method_handler(lambda request, context: info),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
