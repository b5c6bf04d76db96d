"""Issue 26 item 5: --reset-cache empties the server's prefix cache before the run and between
ladder steps, and says so when the server refuses (runtime/cache_reset.py, docs/cache-control.md).

What a broken implementation would fail here:
- after a reset the simulator's own counter (vllm:prefix_cache_hits_total) stops rising for a
  prompt it had cached; a server busy with a request refuses ({"success": false}) and the reset
  says "refused", busy, instead of "ok";
- each answer a server can give is classified: vLLM without VLLM_SERVER_DEV_MODE (404) is "not
  supported" with the way to turn it on, a 500 is "refused" with its status, llama-server without
  --slot-save-path (501) is "not supported";
- a ladder with --reset-cache step starts every step cold: the first request each step sends
  finds nothing in the server's cache (its usage cached_tokens, the simulator's own count), where
  --reset-cache off finds the shared prompt of the step before; each window says how its reset went;
- --reset-cache step without a rate or concurrency ladder is a usage error (exit 2, one line).
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from support import canned_server, read_records, run_cli

from llm_locust.analysis import server_metrics
from llm_locust.sim.process import SimProcess
from llm_locust.transport import server_cache

PREFIX = " ".join(f"w{i}" for i in range(64))  # 64 words: 8 blocks of the simulator's cache


def _post(url: str, prompt: str, max_tokens: int = 4) -> http.client.HTTPResponse:
    """A streamed completion, its headers read (the server is working on it); the caller reads or closes."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
    return conn.getresponse()


def _complete(url: str, prompt: str) -> None:
    resp = _post(url, prompt)
    resp.read()
    assert resp.status == 200


def _hits(url: str) -> float:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return server_metrics.read(text)[1]["prefix_cache_hits_total"]


def _running(url: str) -> float:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return server_metrics.read(text)[1].get("running", 0.0)


def test_a_reset_empties_the_simulators_cache_and_a_busy_one_refuses():
    with SimProcess(slots=2, iter_base=0.02, iter_per_seq=0.0, prefix_cache=True, cache_block=8) as sim:
        url = sim.url
        _complete(url, PREFIX)
        before = _hits(url)
        _complete(url, PREFIX)
        assert _hits(url) - before >= 56  # the second time: 7 of its 8 full blocks (not the last token's)
        r = server_cache.reset(url, {}, None, "before the test")
        assert (r.outcome, r.engine, r.status) == ("ok", "vllm", 200), r
        assert r.line().startswith("cache reset before the test (vllm POST /reset_prefix_cache): ok")
        before = _hits(url)
        _complete(url, PREFIX)
        assert _hits(url) == before  # emptied: nothing of the prompt is found again
        slow = _post(url, PREFIX + " long", max_tokens=2000)  # 2000 iterations of 20 ms: busy for 40 s
        try:
            assert slow.status == 200 and _running(url) >= 1
            busy = server_cache.reset(url, {}, "vllm")
        finally:
            slow.close()
        assert (busy.outcome, busy.busy, busy.status) == ("refused", True, 200), busy
        assert "success=false" in busy.line()


@pytest.mark.parametrize(
    ("engine", "reply", "outcome", "words"),
    [
        (
            "vllm",
            b'HTTP/1.1 404 Not Found\r\nContent-Length: 22\r\n\r\n{"detail":"Not Found"}',
            "not_supported",
            "VLLM_SERVER_DEV_MODE=1",
        ),
        ("vllm", b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom", "refused", "HTTP 500: boom"),
        ("sglang", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 7\r\n\r\npending", "refused", "HTTP 400: pending"),
        ("llama.cpp", b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 2\r\n\r\n{}", "not_supported", "GET /slots"),
        ("vllm", b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{"success":false}', "refused", "success=false"),
    ],
)
def test_each_answer_of_a_server_is_classified(engine, reply, outcome, words):
    server = canned_server(reply)
    try:
        r = server_cache.reset(f"http://127.0.0.1:{server.server_port}", {}, engine, "before step 2")
    finally:
        server.stop()
    assert r.outcome == outcome, r
    assert words in r.line() and "before step 2" in r.line()


def _trace(path, n: int = 400) -> str:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"{PREFIX} question {i}", "output_tokens": 6}) + "\n")
    return str(path)


@pytest.mark.parametrize("ladder", ["concurrency:1,2,3", "rate:4,6"])
def test_a_ladder_with_step_resets_starts_every_step_cold(tmp_path, ladder):
    with SimProcess(slots=4, iter_base=0.01, iter_per_seq=0.0, prefix_cache=True, cache_block=8) as sim:
        firsts = {}
        for mode in ("step", "off"):
            results, records = tmp_path / f"{mode}.json", tmp_path / f"{mode}.jsonl"
            p = run_cli(
                "--host", sim.url, "--api", "openai-completions", "--trace", _trace(tmp_path / "t.jsonl"),
                "--ladder", ladder, "--warmup", "1s", "--step-duration", "3s", "--no-early-stop",
                "--reset-cache", mode, "--results", results, "--record-log", records,
                timeout=180,
            )  # fmt: skip
            assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
            doc = json.loads(results.read_text())
            steps = len(doc["ladder"]["windows"])
            by_step: dict[int, list[dict]] = {}
            for rec in read_records(records):
                if rec["step"]:
                    by_step.setdefault(abs(rec["step"]), []).append(rec)
            # the step's requests share the prompt's first 64 words: only the first one the server
            # admits into an empty cache finds none of them (users sent at once race to be first)
            firsts[mode] = [min(r["n_cached"] for r in by_step[k]) for k in range(1, steps + 1)]
            if mode == "step":
                assert [w["cache_reset"]["outcome"] for w in doc["ladder"]["windows"]] == ["ok"] * steps, doc["ladder"]
                assert f"cache reset before {steps} of {steps} steps: ok" in p.stdout
            else:
                assert all("cache_reset" not in w for w in doc["ladder"]["windows"])
    assert firsts["step"] == [0] * len(firsts["step"]), firsts  # every step's first request found nothing
    assert all(n >= 56 for n in firsts["off"][1:]), firsts  # without resets: the step before's prompt


def test_step_resets_need_a_rate_or_concurrency_ladder():
    p = run_cli("--reset-cache", "step", "--run-time", "1s", timeout=60)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if "reset" in ln]
    assert lines and "rate or concurrency ladder" in lines[0] and "Traceback" not in p.stderr


def test_a_closed_loop_keeps_its_reset_in_the_results(tmp_path, sims):
    """--reset-cache repeat outside a ladder: the reset before the load is in results run.cache_reset
    (before: said in the log only)."""
    sim = sims(slots=8, fast=True)
    results = tmp_path / "r.json"
    p = run_cli("--host", sim.url, "-u", "1", "-t", "2s", "--reset-cache", "repeat", "--results", results, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    reset = json.loads(results.read_text())["run"]["cache_reset"]
    assert reset is not None and reset["outcome"] == "ok", reset
