"""The transport layer: what runs on gevent and never on Locust.

The wire (HTTP/1.1 in `http`, gRPC over HTTP/2 in `grpc_h2` and over grpcio in `grpc_io`, the
read pump, kernel receive stamps), the bounded reads of a server outside the request path (probe,
preflight, the /metrics scraper, its prefix cache): I/O only. What runs on the event loop beside
the load and is not I/O (sessions, the clock across hosts, progress, signals) is `llm_locust.loop`,
which may import the transport; the transport never imports it.

It imports the core (schema, safe, metrics, protocols, workload, analysis, settings, report) and gevent,
never `llm_locust.runtime` nor Locust (tests/test_structure.py): a request can be sent, timed and
read, and a server probed, without a Locust environment.
"""
