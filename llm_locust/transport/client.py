"""The contract between the send path and the clients: `Client.send`.

Whoever decides *when* a request goes (the closed loop, the open-loop dispatcher, a session's
turns) hands it to `runtime/send.py` `SendPath.send`, which decides what it is and how it is
accounted, and then calls `client.send` on a `Client`: this protocol. Every client implements it,
with the same keyword-only options, as httpx's transports implement `handle_request`:

- transport/http.py `StreamClient` (HTTP/1.1 streams; `JSONClient`, the non-streaming kinds);
- transport/grpc_h2.py `H2GrpcClient` (vLLM's gRPC API over our own HTTP/2 reader, the default);
- transport/grpc_io.py `GrpcStreamClient` (the same API over grpcio, kept for comparison);
- transport/fake.py `FakeClient` (no socket: scripted tokens, for the fast tests).

It is a structural type (typing.Protocol): a client does not inherit from it, mypy checks that
its `send` takes these arguments and returns a RequestRecord. This module imports neither gevent
nor a client, so that a reader of the send path finds what it calls without the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols.base import RequestSpec

# A record handed over by the client: on_cancel's (the request ended by a kill) and on_record's
# (the request's record, as soon as it exists).
RecordCallback = Callable[[RequestRecord], None]


class Client(Protocol):
    """Sends one request to one server, reads its reply to the end, and times it."""

    def send(
        self,
        spec: RequestSpec,
        request_id: str,
        *,
        t_sched: float | None = None,
        on_cancel: RecordCallback | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: RecordCallback | None = None,
    ) -> RequestRecord:
        """Send `spec` and return its RequestRecord: outcome, status, error, the times of its
        send (t_sent, wall_sent), head, first token and end, one time per token-bearing chunk
        (chunk_times), the output count and its source, the finish reason, and the text when kept.

        - `spec`: what to send (the API's adapter or encoder makes its body from it);
        - `request_id`: the request's id, sent to the server (X-Request-Id, the gRPC request id)
          and kept in the record;
        - `t_sched`: when the request was due (perf_counter time); None: due at its send. The
          record's schedule lag is t_sent - t_sched;
        - `on_cancel`: handed the record, ended as CANCELLED, when the greenlet is killed while
          the request is in flight (a test's stop); GreenletExit then propagates;
        - `step`: the load step (a ladder's) the record belongs to;
        - `keep_text`: keep the reply's text in the record (None: the client's own default);
        - `on_record`: handed the record once, as soon as it exists, before the request is
          written (the dispatcher's --max-prefill gate watches its t_first).

        Never raises for anything a server sends or does (refused or reset connections, HTTP
        errors, broken or endless streams, timeouts): that is the record's outcome and error. It
        may raise ValueError for a spec its API cannot carry, before anything is sent."""
        ...
