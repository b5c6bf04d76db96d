"""The transport layer: what runs on gevent and never on Locust.

The wire (HTTP/1.1 in `http`, gRPC over HTTP/2 in `grpc_h2` and over grpcio in `grpc_io`, the
read pump, kernel receive stamps), the bounded reads of a server outside the request path (probe,
preflight, the /metrics scraper, its prefix cache), and the loops beside a run that need an event
loop but not Locust (sessions, the clock across hosts, progress, signals).

It imports the core (schema, safe, metrics, protocols, workload, analysis, settings, report) and gevent,
never `llm_locust.runtime` nor Locust (tests/test_structure.py): a request can be sent, timed and
read, and a server probed, without a Locust environment.
"""
