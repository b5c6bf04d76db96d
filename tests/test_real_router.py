"""The real Shepherd Model Gateway (smg, PyPI) in front of two real llama-server replicas (the tiny
model), and llm-locust's per-endpoint /metrics against those replicas.

Where each request went is read from the replicas themselves: every request asks for exactly
N_OUT tokens with ignore_eos, so the replica whose `llamacpp:tokens_predicted_total` rose by
N_OUT served it (requests are sent one at a time).

- consistent_hashing with `--routing-key-headers x-session-id`: a session's requests all land
  on one replica, interleaved with other sessions', and 12 sessions use both replicas (all on
  one: probability 2^-11 per run, the ring being placed by the workers' random ports);
- consistent_hashing with smg's default header: `x-smg-routing-key` is honoured, `x-session-id`
  alone is not (its requests spread: smg's random fallback);
- round_robin: requests alternate between the replicas whatever their session header;
- `llm-locust run --host R1 --endpoints R2` scrapes both replicas' /metrics, one result per
  endpoint, whose generated tokens add up to what the client counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import realservers
from realservers import LlamaReplicas, SmgRouter, http_post_json, prometheus_values

pytestmark = pytest.mark.real_server

N_OUT = 2
COUNTER = "llamacpp:tokens_predicted_total"


@pytest.fixture(scope="module")
def smg():
    return realservers.need_smg()


@pytest.fixture(scope="module")
def replicas(llama_server_bin, tiny_model, smg):
    with LlamaReplicas(tiny_model, n=2, binary=llama_server_bin, alias="tiny", slots=2, ctx=2048) as reps:
        yield reps


def _counts(reps) -> list[float]:
    return [prometheus_values(u).get(COUNTER, 0.0) for u in reps.urls]


def _send(router: SmgRouter, reps, headers: dict[str, str]) -> int:
    """One completion through the router; the index of the replica that served it."""
    before = _counts(reps)
    status, body = http_post_json(
        router.url + "/v1/completions",
        {"model": "tiny", "prompt": "Once upon a time", "max_tokens": N_OUT, "ignore_eos": True, "temperature": 0},
        headers,
        timeout=30,
    )
    assert status == 200, body[:300]
    deadline = time.monotonic() + 3.0
    while True:  # the counter is updated when the slot is released, around the reply
        rose = [i for i, (a, b) in enumerate(zip(before, _counts(reps), strict=True)) if b - a > 0]
        deltas = [b - a for a, b in zip(before, _counts(reps), strict=True)]
        if sum(deltas) >= N_OUT or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert sorted(deltas) == [0.0, float(N_OUT)], (deltas, "exactly one replica must have served it")
    return rose[0]


def test_consistent_hashing_keeps_a_session_on_one_replica(replicas):
    with SmgRouter(replicas.urls, policy="consistent_hashing", routing_key_headers=["x-session-id"]) as router:
        sessions = [f"conv-{i}" for i in range(12)]
        served: dict[str, list[int]] = {s: [] for s in sessions}
        for _round in range(3):  # interleaved: s0 s1 ... s11, s0 s1 ...
            for s in sessions:
                served[s].append(_send(router, replicas, {"x-session-id": s}))
    assert all(len(set(v)) == 1 for v in served.values()), served
    assert {v[0] for v in served.values()} == {0, 1}, served


def test_consistent_hashing_reads_x_smg_routing_key_by_default(replicas):
    with SmgRouter(replicas.urls, policy="consistent_hashing") as router:
        keyed = [_send(router, replicas, {"x-smg-routing-key": "conv-7"}) for _ in range(6)]
        other = [_send(router, replicas, {"x-smg-routing-key": f"conv-{i}"}) for i in range(12)]
        unread = [_send(router, replicas, {"x-session-id": "conv-7"}) for _ in range(12)]
    assert len(set(keyed)) == 1, keyed
    assert set(other) == {0, 1}, other
    # x-session-id is not a routing key unless named by --routing-key-headers: random fallback
    assert set(unread) == {0, 1}, unread


def test_round_robin_alternates(replicas):
    with SmgRouter(replicas.urls, policy="round_robin") as router:
        order = [_send(router, replicas, {"x-session-id": "same"}) for _ in range(8)]
    assert all(a != b for a, b in zip(order, order[1:], strict=False)), order


def test_llm_locust_reads_every_endpoints_metrics(replicas, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"input_tokens": 16, "output_tokens": 8}) + "\n" for _ in range(8)))
    results = tmp_path / "results.json"
    cmd = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        replicas.urls[0],
        "--endpoints",
        replicas.urls[1],
        "--api",
        "openai-completions",
        "--model",
        "tiny",
        "--workers",
        "0",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "6s",
        "--metrics-interval",
        "1",
        "--trace",
        str(trace),
        "--results",
        str(results),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(results.read_text())
    by = r["server_metrics_by_endpoint"]
    assert list(by) == replicas.urls
    for url, w in by.items():
        assert w["source"]["url"] == url + "/metrics" and w["source"]["server"] == "llama.cpp", w["source"]
        assert w["run"]["samples"] >= 2, w["run"]
    assert r["server_metrics"] == by[replicas.urls[0]]  # the first endpoint's, as with one host
    generated = sum(w["run"].get("generation_tokens_total", {}).get("increase", 0) for w in by.values())
    client = r["summary"]["tokens_out"]
    assert client > 0
    # the servers' generated tokens are the client's, +- what the (at most 2) requests cut at the
    # stop made: the client counts the tokens it read of one, and llama.cpp may not count a task
    # it cancelled (CI: generated 4657, client 4664)
    assert abs(generated - client) <= 2 * 8, (generated, client)
    for url in replicas.urls:  # one server line per endpoint at the end
        assert f"server {url} (llama.cpp" in proc.stdout, proc.stdout[-2000:]
