"""A loopback server that answers every connection with the same bytes, then closes it: for
replies no well-behaved server sends, and for byte-exact captures fed through the real client."""

from __future__ import annotations

from gevent.server import StreamServer


def sse_reply(body: bytes) -> bytes:
    """A whole HTTP/1.1 200 reply carrying `body` as an event stream with its Content-Length."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def canned_server(reply: bytes) -> StreamServer:
    """Started on a free 127.0.0.1 port (`server.server_port`); the caller stops it."""

    def handle(sock, _addr):
        sock.recv(65536)
        sock.sendall(reply)
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server
