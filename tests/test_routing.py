"""llm_locust.workload.routing: the client-side router over several endpoints, the weighted model
split, the session headers; and the per-endpoint /metrics scrapers (transport.scraper)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter

import pytest

from llm_locust.workload.routing import (
    DOWN_AFTER,
    STRATEGIES,
    ModelSplit,
    Router,
    header_value,
    session_headers,
    stable_hash,
)

URLS = ["http://a:8000", "http://b:8000", "http://c:8000", "http://d:8000"]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _chi_square(counts: Counter, keys, n: int) -> float:
    expected = n / len(keys)
    return sum((counts[k] - expected) ** 2 / expected for k in keys)


def test_strategies_are_the_settings_routes():
    from llm_locust.settings.model import ROUTES

    assert STRATEGIES == ROUTES


def test_importable_without_locust_or_gevent():
    code = (
        "import sys, llm_locust.workload.routing\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent', 'geventhttpclient')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_stable_hash_is_fixed_across_processes():
    # a literal: the same in every process and run (Python's hash() of a str is salted per process)
    assert stable_hash("http://a:8000", "s1") == stable_hash("http://a:8000", "s1")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from llm_locust.workload.routing import stable_hash;print(stable_hash('http://a:8000', 's1'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == stable_hash("http://a:8000", "s1")
    assert stable_hash("ab", "c") != stable_hash("a", "bc")  # the parts are length-framed


def test_round_robin_is_exact():
    r = Router(URLS, "round-robin")
    picks = [r.pick() for _ in range(4 * 250 + 3)]
    assert picks[:8] == URLS + URLS
    c = Counter(picks)
    assert [c[u] for u in URLS] == [251, 251, 251, 250]


def test_one_endpoint_always_it():
    for s in STRATEGIES:
        r = Router(["http://only:1/"], s)
        assert {r.pick(f"s{i}") for i in range(20)} == {"http://only:1"}


def test_bad_arguments():
    with pytest.raises(ValueError):
        Router([], "round-robin")
    with pytest.raises(ValueError):
        Router(URLS, "fastest")
    with pytest.raises(ValueError):
        Router(["http://a", "http://a/"], "random")


def test_random_is_seeded_and_uniform():
    a = [Router(URLS, "random", seed=7).pick() for _ in range(1)]
    r1, r2 = Router(URLS, "random", seed=7), Router(URLS, "random", seed=7)
    seq1 = [r1.pick() for _ in range(200)]
    assert seq1 == [r2.pick() for _ in range(200)] and a[0] == seq1[0]
    assert seq1 != [Router(URLS, "random", seed=8).pick() for _ in range(200)]
    r = Router(URLS, "random", seed=1)
    n = 8000
    c = Counter(r.pick() for _ in range(n))
    assert _chi_square(c, URLS, n) < 16.27  # chi-square, 3 degrees of freedom, p = 0.001


def test_affinity_is_stable_and_spreads():
    r = Router(URLS, "affinity")
    sessions = [f"conv-{i}" for i in range(4000)]
    first = {s: r.pick(s) for s in sessions}
    again = Router(list(reversed(URLS)), "affinity")  # order and instance do not matter
    assert all(r.pick(s) == first[s] and again.pick(s) == first[s] for s in sessions)
    c = Counter(first.values())
    assert _chi_square(c, URLS, len(sessions)) < 16.27


def test_affinity_without_session_is_round_robin():
    r = Router(URLS, "affinity")
    assert [r.pick(None) for _ in range(8)] == URLS + URLS
    assert [r.pick("") for _ in range(4)] == URLS


def test_least_in_flight():
    r = Router(URLS[:3], "least-in-flight")
    assert r.pick() == URLS[0]  # ties: the first in order
    r.started(URLS[0])
    assert r.pick() == URLS[1]
    r.started(URLS[1])
    r.started(URLS[1])
    assert r.pick() == URLS[2]
    r.started(URLS[2])
    assert r.pick() == URLS[0]  # 1, 2, 1 in flight
    r.finished(URLS[1], ok=True)
    r.finished(URLS[1], ok=True)
    assert r.pick() == URLS[1]  # 1, 0, 1
    st = r.status()
    assert st[URLS[1]] == {"in_flight": 0, "sent": 2, "down": False, "consecutive_failures": 0}
    assert st[URLS[0]]["in_flight"] == 1 and list(st) == URLS[:3]


def test_least_in_flight_balances_a_closed_loop():
    # 12 users, each keeps one request in flight; finishing in random order: in-flight stays even
    import random

    r = Router(URLS, "least-in-flight")
    rng = random.Random(3)
    live = []
    for _ in range(12):
        u = r.pick()
        r.started(u)
        live.append(u)
    for _ in range(2000):
        done = live.pop(rng.randrange(len(live)))
        r.finished(done, ok=True)
        u = r.pick()
        r.started(u)
        live.append(u)
        flights = [v["in_flight"] for v in r.status().values()]
        assert max(flights) - min(flights) <= 1


def _fail(r: Router, url: str, times: int) -> None:
    for _ in range(times):
        r.started(url)
        r.finished(url, ok=False, connect_failed=True)


def test_down_after_n_connect_failures_moves_only_that_endpoints_sessions():
    clock = Clock()
    r = Router(URLS, "affinity", clock=clock)
    sessions = [f"user-{i}" for i in range(2000)]
    before = {s: r.pick(s) for s in sessions}
    victim = URLS[1]
    _fail(r, victim, DOWN_AFTER - 1)
    assert not r.is_down(victim)
    assert {s: r.pick(s) for s in sessions} == before  # not down yet: nothing moves
    _fail(r, victim, 1)
    assert r.is_down(victim) and r.status()[victim]["consecutive_failures"] == DOWN_AFTER
    clock.t += 0.1  # inside the back-off: no probe
    after = {s: r.pick(s) for s in sessions}
    moved = {s for s in sessions if after[s] != before[s]}
    assert moved == {s for s in sessions if before[s] == victim} and moved
    assert victim not in after.values()
    # the moved sessions spread over the other three, each to its second choice
    c = Counter(after[s] for s in moved)
    assert set(c) == set(URLS) - {victim} and min(c.values()) > len(moved) / 3 * 0.7


def test_an_http_error_breaks_the_run_of_connect_failures():
    r = Router(URLS, "round-robin")
    _fail(r, URLS[0], DOWN_AFTER - 1)
    r.started(URLS[0])
    r.finished(URLS[0], ok=False, connect_failed=False)  # answered (HTTP 500): reachable
    _fail(r, URLS[0], DOWN_AFTER - 1)
    assert not r.is_down(URLS[0])


def test_probe_after_back_off_and_recovery():
    clock = Clock()
    r = Router(URLS, "round-robin", retry_after=5.0, clock=clock)
    victim = URLS[2]
    _fail(r, victim, DOWN_AFTER)
    assert r.is_down(victim)
    picks = [r.pick() for _ in range(300)]
    assert victim not in picks and Counter(picks) == Counter({u: 100 for u in URLS if u != victim})
    clock.t += 5.0
    assert r.pick() == victim  # the probe, once the back-off passed
    assert victim not in [r.pick() for _ in range(50)]  # one probe per back-off
    _fail(r, victim, 1)  # the probe failed: still down, next probe a back-off later
    clock.t += 4.9
    assert victim not in [r.pick() for _ in range(50)]
    clock.t += 0.2
    assert r.pick() == victim
    r.started(victim)
    r.finished(victim, ok=True)  # up again on its next success
    assert not r.is_down(victim) and r.status()[victim]["consecutive_failures"] == 0
    assert Counter(r.pick() for _ in range(400)) == Counter({u: 100 for u in URLS})


def test_affinity_probe_uses_only_the_down_endpoints_own_sessions():
    clock = Clock()
    r = Router(URLS, "affinity", retry_after=5.0, clock=clock)
    victim = URLS[0]
    own = [s for s in (f"s{i}" for i in range(200)) if r.pick(s) == victim]
    other = [s for s in (f"s{i}" for i in range(200)) if r.pick(s) != victim]
    _fail(r, victim, DOWN_AFTER)
    clock.t += 10
    assert victim not in {r.pick(s) for s in other}  # a foreign session never probes it
    assert r.pick(own[0]) == victim  # its own session does, once per back-off
    assert r.pick(own[1]) != victim
    r.started(victim)
    r.finished(victim, ok=True)
    assert all(r.pick(s) == victim for s in own)  # and they all come back


def test_all_down_routes_normally():
    r = Router(URLS[:2], "round-robin")
    for u in URLS[:2]:
        _fail(r, u, DOWN_AFTER)
    assert all(r.is_down(u) for u in URLS[:2])
    assert [r.pick() for _ in range(4)] == URLS[:2] * 2
    r2 = Router(URLS[:2], "affinity")
    want = r2.pick("x")
    for u in URLS[:2]:
        _fail(r2, u, DOWN_AFTER)
    assert r2.pick("x") == want


def test_model_split_counts_within_a_binomial_bound():
    split = [("base", 0.7), ("sql-lora", 0.2), ("chat-lora", 0.1)]
    n = 20000
    for keyed in (False, True):
        m = ModelSplit(split, seed=5)
        c = Counter(m.pick(f"sess-{i}" if keyed else None) for i in range(n))
        for name, p in split:
            sd = math.sqrt(n * p * (1 - p))
            assert abs(c[name] - n * p) < 4 * sd, (keyed, name, c)


def test_model_split_is_sticky_per_session_and_seeded_without():
    split = [("a", 0.5), ("b", 0.5)]
    m1, m2 = ModelSplit(split, seed=1), ModelSplit(split, seed=99)
    for i in range(500):
        s = f"conv-{i}"
        assert m1.pick(s) == m1.pick(s) == m2.pick(s)  # the seed does not matter for a session
    assert [ModelSplit(split, 3).pick() for _ in range(1)] == [ModelSplit(split, 3).pick()]
    a, b = ModelSplit(split, 3), ModelSplit(split, 3)
    assert [a.pick() for _ in range(100)] == [b.pick() for _ in range(100)]


def test_model_split_independent_of_the_endpoint_hash():
    # sessions of one endpoint under affinity still get every model in its share
    r = Router(URLS[:2], "affinity")
    m = ModelSplit([("a", 0.5), ("b", 0.5)])
    on_a = [s for s in (f"k{i}" for i in range(4000)) if r.pick(s) == URLS[0]]
    share = sum(m.pick(s) == "a" for s in on_a) / len(on_a)
    assert 0.45 < share < 0.55


def test_model_split_edges():
    assert ModelSplit([]).pick("x") == "" and ModelSplit([]).pick() == ""
    assert {ModelSplit([("only", 1.0)]).pick(f"s{i}") for i in range(50)} == {"only"}
    with pytest.raises(ValueError):
        ModelSplit([("a", 0.0)])


def test_model_split_from_settings():
    from llm_locust.settings.model import parse_model_split

    m = ModelSplit(parse_model_split("base:3,lora:1"), seed=0)
    c = Counter(m.pick(f"u{i}") for i in range(8000))
    assert abs(c["lora"] - 2000) < 4 * math.sqrt(8000 * 0.25 * 0.75)


def test_session_headers():
    names = ["x-session-id", "x-smg-routing-key", "x-dynamo-session-id"]
    assert session_headers(names, "conv-42") == {n: "conv-42" for n in names}
    assert session_headers(names, None) == {} and session_headers(names, "") == {}
    assert session_headers([], "conv-42") == {}
    # not a safe header value (non-ASCII, control characters, too long for SMG's 128-byte cap)
    for bad in ("café", "a\nb", "x" * 129, " padded"):
        v = header_value(bad)
        assert v.startswith("s-") and len(v) == 34 and v == header_value(bad)
    assert header_value("x" * 128) == "x" * 128
    assert header_value("café") != header_value("cafe")


def test_session_headers_with_settings_defaults():
    from llm_locust.settings.model import DEFAULT_SESSION_HEADERS, Settings

    s = Settings(session_headers="default,x-user")
    assert list(session_headers(s.session_header_names, "u1")) == [*DEFAULT_SESSION_HEADERS, "x-user"]


# ---- per-endpoint /metrics scrapers ----


def test_server_scrapers_one_per_endpoint():
    from llm_locust.transport.scraper import server_scrapers

    s = server_scrapers(["http://a:1/", "http://b:2"], "", 2.0)
    assert list(s) == ["http://a:1", "http://b:2"]
    assert [x.series.url for x in s.values()] == ["http://a:1/metrics", "http://b:2/metrics"]
    s = server_scrapers(["http://a:1", "http://b:2"], "http://prom:9/m", 3.0)
    assert [x.series.url for x in s.values()] == ["http://prom:9/m", "http://b:2/metrics"]
    assert {x.interval for x in s.values()} == {3.0}
    assert server_scrapers(["http://a:1", "http://b:2"], "off") == {}
    assert [x.series.url for x in server_scrapers(["http://a:1"], "").values()] == ["http://a:1/metrics"]
    assert list(server_scrapers([], "http://p/metrics")) == ["http://p/metrics"]
    assert server_scrapers([], "") == {}


def test_per_endpoint_scrapers_read_each_their_own_server():
    """Two /metrics servers with different figures: each endpoint's scraper reads its own."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from llm_locust.transport.scraper import server_scrapers

    def serve(running: int):
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                body = (
                    f"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {running}\n"
                    "llamacpp:requests_deferred 0\n"
                ).encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv

    servers = [serve(3), serve(7)]
    try:
        urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
        scrapers = server_scrapers(urls, "", 1.0)
        for sc in scrapers.values():
            assert sc.scrape_once(), sc.series.error
        got = {u: (sc.series.server, sc.series.samples[-1].figures.get("running")) for u, sc in scrapers.items()}
        assert got == {urls[0]: ("llama.cpp", 3), urls[1]: ("llama.cpp", 7)}
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def test_a_model_goes_only_to_the_endpoints_that_serve_it():
    r = Router(["http://a", "http://b", "http://c"], "round-robin")
    r.serve({"http://a": ["base", "lora-x"], "http://b": ["base"], "http://c": ["base", "lora-x"]})
    assert {r.pick(None, "lora-x") for _ in range(20)} == {"http://a", "http://c"}
    assert {r.pick(None, "base") for _ in range(20)} == {"http://a", "http://b", "http://c"}  # served everywhere
    assert {r.pick(None, "unknown") for _ in range(20)} == {"http://a", "http://b", "http://c"}
    for _ in range(3):  # a down: lora-x goes to c only
        r.started("http://a")
        r.finished("http://a", ok=False, connect_failed=True)
    assert {r.pick(None, "lora-x") for _ in range(10)} == {"http://c"}
    aff = Router(["http://a", "http://b", "http://c"], "affinity")
    aff.serve({"http://a": ["m1"], "http://b": ["m2"], "http://c": ["m2"]})
    assert {aff.pick(f"s{i}", "m1") for i in range(30)} == {"http://a"}
    assert {aff.pick(f"s{i}", "m2") for i in range(30)} == {"http://b", "http://c"}
