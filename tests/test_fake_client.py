"""Whole runs on the socket-free client (transport/fake.py), in process: a closed loop and an
open-loop replay through Locust's own Environment and LocalRunner, each request through
SendPath.send to the `Client` contract (transport/client.py) and back into the figures.

The fake stamps its tokens at scripted times, so the figures are known exactly: every request the
loops counted reached the client and every one the client answered was counted (none dropped,
none sent around the client), sent = ok + failed + cancelled, and TTFT and ITL are the script's.
"""

from __future__ import annotations

import inspect
import json
import time
from itertools import pairwise

import gevent
import pytest
from locust.env import Environment
from locust.runners import STATE_STOPPED

from llm_locust.metrics.aggregate import figures
from llm_locust.metrics.records import Outcome
from llm_locust.protocols.base import RequestSpec
from llm_locust.runtime import closed_loop, dispatcher, replay_shares
from llm_locust.runtime.closed_loop import StreamingUser
from llm_locust.runtime.context import run_context
from llm_locust.runtime.dispatcher import Dispatcher
from llm_locust.runtime.hub import hub
from llm_locust.settings.model import Settings
from llm_locust.transport.client import Client
from llm_locust.transport.fake import FakeClient, Script
from llm_locust.transport.grpc_h2 import H2GrpcClient
from llm_locust.transport.grpc_io import GrpcStreamClient
from llm_locust.transport.http import StreamClient

HOST = "http://127.0.0.1:9"  # never connected to: the fake sends nothing
SCRIPT = Script(first_token_s=0.02, token_gap_s=0.003)
OUT = 4  # output tokens of every trace record
US = 1e-6  # the histograms keep microseconds: a mean is exact to this


def _trace(tmp_path, n: int, gap: float):
    path = tmp_path / "trace.jsonl"
    rows = [{"timestamp": round(i * gap, 6), "input_tokens": 30, "output_tokens": OUT} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _environment(user_class, model: str = "m", **settings) -> Environment:
    env = Environment(user_classes=[user_class], host=HOST)
    env.create_local_runner()
    run_context(env)._settings = Settings(model=model, **settings)  # as the plugin reads them from Locust's options
    return env


def _wait(condition, what: str, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {limit:g}s"
        gevent.sleep(0.01)


def _assert_counted_as_sent(env: Environment, fake: FakeClient) -> dict:
    """What both loops must get right: the figures count exactly the fake's records."""
    f = figures(hub(env).total)
    by_outcome = {o: sum(r.outcome is o for r in fake.records) for o in (Outcome.OK, Outcome.CANCELLED)}
    assert fake.sends == len(fake.records) > 0
    assert f["sent"] == fake.sends, (f["sent"], fake.sends)  # none dropped, none sent around the client
    assert f["sent"] == f["ok"] + f["failed"] + f["cancelled"] and f["lost"] == 0, f
    assert (f["ok"], f["cancelled"], f["failed"]) == (by_outcome[Outcome.OK], by_outcome[Outcome.CANCELLED], 0), f
    assert hub(env).in_flight == 0
    ids = [r.request_id for r in fake.records]
    assert len(set(ids)) == len(ids), "each request its own id"
    lat = f["latency"]
    assert lat["ttft"]["count"] == sum(r.t_first is not None for r in fake.records if r.ok)
    assert abs(lat["ttft"]["mean"] - SCRIPT.first_token_s) <= US, lat["ttft"]
    assert abs(lat["itl"]["mean"] - SCRIPT.token_gap_s) <= US, lat["itl"]
    assert f["tokens_out"] == OUT * f["ok"], f
    # Locust's own table: the answered requests, under the API's name; cancelled ones stay out of it
    assert env.stats.get("openai-chat", "POST").num_requests == f["ok"]
    assert env.stats.total.num_failures == 0
    return f


def _run_replay(env) -> None:
    """Install the replay's messages, start its one user, wait for the trace's end, quit."""
    replay_shares.install(env)
    runner = env.runner
    assert runner is not None
    runner.start(1, spawn_rate=1)
    _wait(lambda: runner.state == STATE_STOPPED, "the replay's end")
    runner.quit()


def test_a_closed_loop_run_on_the_fake_client_counts_every_request_it_sent(tmp_path):
    fake = FakeClient(SCRIPT)

    class FakeUser(StreamingUser):
        host = HOST

        def make_client(self, url: str) -> Client:
            assert url == HOST
            return fake

    env = _environment(FakeUser, trace=str(_trace(tmp_path, 7, 0.1)))
    runner = env.runner
    assert runner is not None
    runner.start(3, spawn_rate=100)
    _wait(lambda: sum(r.ok for r in fake.records) >= 30, "30 requests answered")
    runner.quit()  # those in flight end cancelled, and are counted
    f = _assert_counted_as_sent(env, fake)
    assert f["ok"] >= 30
    assert {r.step for r in fake.records} == {0}
    assert all(r.ttft == pytest.approx(SCRIPT.first_token_s, abs=1e-9) for r in fake.records if r.t_first)
    assert {r.source.rsplit(":", 1)[1] for r in fake.records if r.source} == {str(i) for i in range(1, 8)}


def test_an_open_loop_replay_on_the_fake_client_sends_the_whole_trace_on_schedule(tmp_path, monkeypatch):
    n, gap = 20, 0.01
    fake = FakeClient(SCRIPT)
    monkeypatch.setattr(Dispatcher, "_client", lambda self, url=None: fake)

    class FakeReplay(replay_shares.ReplayUser):
        abstract = False

    env = _environment(FakeReplay, trace=str(_trace(tmp_path, n, gap)), replay=True)
    _run_replay(env)
    f = _assert_counted_as_sent(env, fake)
    assert f["ok"] == fake.sends == n and hub(env).info["replay_sent"] == n, f
    # each request due at its trace time: the dispatcher's t_sched reached the client's record
    sched = sorted(r.t_sched for r in fake.records)
    assert [b - a for a, b in pairwise(sched)] == pytest.approx([gap] * (n - 1), abs=1e-9)
    assert sorted(int(r.source.rsplit(":", 1)[1]) for r in fake.records if r.source) == list(range(1, n + 1))


def test_every_client_takes_the_contracts_arguments():
    """One contract (transport/client.py): each client's send takes the protocol's arguments, the
    options keyword-only, with its defaults (the gRPC clients' had drifted: no on_record)."""

    def shape(cls) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(cls.send).parameters.values()]

    contract = shape(Client)
    assert [k for _n, k, _d in contract[3:]] == [inspect.Parameter.KEYWORD_ONLY] * 5
    for cls in (StreamClient, H2GrpcClient, GrpcStreamClient, FakeClient):
        assert shape(cls) == contract, cls.__name__


def test_a_killed_send_on_the_fake_is_handed_over_cancelled():
    """The contract on a stop: the record, CANCELLED with the tokens so far, goes to on_cancel, and
    GreenletExit propagates (the send path counts it there)."""
    fake, handed = FakeClient(Script(first_token_s=0.0, token_gap_s=0.05)), []
    g = gevent.spawn(fake.send, _spec(), "r1", on_cancel=handed.append)
    _wait(lambda: fake.records and len(fake.records[0].chunk_times) >= 2, "two tokens")
    g.kill(block=True)
    (rec,) = handed
    assert rec is fake.records[0] and rec.outcome is Outcome.CANCELLED and isinstance(g.value, gevent.GreenletExit)
    assert rec.n_out == len(rec.chunk_times) >= 2 and rec.t_end is not None


def _spec() -> RequestSpec:
    return RequestSpec(model="m", prompt="hi", max_tokens=100)


def _conversations(tmp_path, convs=("a", "b"), turns=3):
    rows = [
        {
            "timestamp": 0.0,
            "conversation_id": conv,
            "turn": turn,
            "messages": [{"role": "user", "content": f"question {turn} of {conv} please"}],
            "output_tokens": OUT,
        }
        for conv in convs
        for turn in range(turns)
    ]
    path = tmp_path / "conv.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ENDPOINTS = ("http://127.0.0.1:9", "http://127.0.0.1:10")
SESSIONS = {"trace_models": False, "endpoints": ",".join(ENDPOINTS), "route": "round-robin"}


def _assert_one_set_up(env: Environment, fakes: dict[str, FakeClient]) -> list:
    """What the set-up of a load (loop/session_runner.py set_up_load) gives either loop: the
    router over both endpoints, the model split per session, the sessions' runner and its counts."""
    recs = [r for f in fakes.values() for r in f.records]
    status = hub(env).status_sources
    assert set(status) >= {"endpoints", "sessions"}, status
    assert all(f.sends for f in fakes.values()), "round robin: both endpoints"
    by_session: dict[str, set] = {}
    for r in recs:
        by_session.setdefault(r.session, set()).add(r.model)
    assert all(len(models) == 1 for models in by_session.values()), by_session  # a session keeps its model
    assert set().union(*by_session.values()) <= {"m1", "m2"}
    return recs


def test_a_session_replay_over_two_endpoints_on_fakes_sends_every_turn(tmp_path, monkeypatch):
    fakes = {u: FakeClient(SCRIPT) for u in ENDPOINTS}
    monkeypatch.setattr(Dispatcher, "_client", lambda self, url=None: fakes[url or ENDPOINTS[0]])
    monkeypatch.setattr(dispatcher, "fetch_models", lambda *_a: ["m1", "m2"])  # each endpoint's /v1/models

    class FakeReplay(replay_shares.ReplayUser):
        abstract = False

    env = _environment(FakeReplay, "m1:0.5,m2:0.5", trace=str(_conversations(tmp_path)), replay=True, **SESSIONS)
    _run_replay(env)
    recs = _assert_one_set_up(env, fakes)
    assert len(recs) == 6 and all(r.ok for r in recs)
    assert hub(env).status_sources["sessions"]() == {"started": 2, "done": 2, "broken": 0}
    assert figures(hub(env).total)["sent"] == 6


def test_closed_loop_sessions_over_two_endpoints_on_fakes_are_all_counted(tmp_path, monkeypatch):
    fakes = {u: FakeClient(SCRIPT) for u in ENDPOINTS}
    monkeypatch.setattr(closed_loop, "fetch_models", lambda *_a: ["m1", "m2"])  # each endpoint's /v1/models

    class FakeUser(StreamingUser):
        host = HOST

        def make_client(self, url: str) -> Client:
            return fakes[url]

    env = _environment(FakeUser, "m1:0.5,m2:0.5", trace=str(_conversations(tmp_path)), **SESSIONS)
    runner = env.runner
    assert runner is not None
    runner.start(2, spawn_rate=100)

    def sessions() -> dict[str, int]:
        return hub(env).status_sources["sessions"]()

    _wait(lambda: "sessions" in hub(env).status_sources and sessions()["done"] >= 4, "four sessions done")
    runner.quit()
    recs = _assert_one_set_up(env, fakes)
    f = figures(hub(env).total)
    assert f["sent"] == len(recs) == f["ok"] + f["cancelled"] and f["failed"] == 0, f
    assert f["ok"] >= 4 * 3 and sessions()["broken"] <= 2  # a session cut by the stop ends broken
