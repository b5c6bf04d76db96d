"""The simulated server over real HTTP: a real process (SimProcess), raw sockets and http.client."""

import http.client
import json
import socket
import statistics
import subprocess
import threading
from time import perf_counter

import pytest

from llm_locust.sim.process import SimProcess

TOKEN_KEYS_COMPLETIONS = {"index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids"}


class Resp:
    def __init__(self):
        self.status, self.headers, self.body = 0, {}, b""
        self.chunk_times: list[tuple[float, bytes]] = []  # (arrival, HTTP chunk data)
        self.complete = False  # saw the end of the body (0-chunk or Content-Length)
        self.t_head = 0.0

    def events(self) -> list:
        """SSE payloads: dicts, or the string "[DONE]"."""
        out = []
        for block in self.body.split(b"\n\n"):
            if block:
                assert block.startswith(b"data: "), block
                payload = block[6:]
                out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        return out

    def token_times(self) -> list[float]:
        return [t for t, data in self.chunk_times if b'"text":"' in data or b'"content":" ' in data]

    def json(self):
        return json.loads(self.body)


class Client:
    """A tiny HTTP/1.1 client on one socket: keeps the connection, records chunk arrival times."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.t_fill = 0.0

    def send(self, method="POST", path="/v1/completions", body=None, headers=None):
        data = render(method, path, body, headers)
        self.t_sent = perf_counter()
        self.sock.sendall(data)

    def _fill(self) -> float:
        data = self.sock.recv(1 << 16)
        if not data:
            raise EOFError
        self.buf += data
        self.t_fill = perf_counter()  # arrival time of everything now in the buffer's tail

    def _take_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read(self) -> Resp:
        r = Resp()
        while True:
            status = self._take_line()
            r.t_head = perf_counter()
            r.status = int(status.split()[1])
            r.headers = {}
            while line := self._take_line():
                k, _, v = line.decode().partition(":")
                r.headers[k.strip().lower()] = v.strip()
            if r.status != 100:
                break
        try:
            if "content-length" in r.headers:
                r.body = self._take(int(r.headers["content-length"]))
                r.complete = True
                return r
            while True:
                size = int(self._take_line(), 16)
                data = self._take(size + 2)[:-2]
                if size == 0:
                    r.complete = True
                    return r
                r.chunk_times.append((self.t_fill, data))
                r.body += data
        except EOFError:
            return r

    def call(self, *args, **kw) -> Resp:
        self.send(*args, **kw)
        return self.read()

    def close(self):
        self.sock.close()


def render(method, path, body=None, headers=None) -> bytes:
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    h = {
        "host": "sim",
        **({"content-type": "application/json", "content-length": str(len(body))} if body is not None else {}),
        **(headers or {}),
    }
    return (f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + (
        body or b""
    )


def call(port, *args, **kw) -> Resp:
    c = Client(port)
    try:
        return c.call(*args, **kw)
    finally:
        c.close()


def comp(n=5, prompt="one two three", **kw):
    return {"model": "m", "prompt": prompt, "max_tokens": n, "stream": True, **kw}


def chat(n=5, **kw):
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there you"}],
        "max_tokens": n,
        "stream": True,
        **kw,
    }


def read_log(path) -> dict:
    return {e["id"]: e for e in map(json.loads, path.read_text().splitlines())}


def parse_metrics(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    return tmp_path_factory.mktemp("simlog")


@pytest.fixture(scope="module")
def paced(logdir):
    with SimProcess(
        iter_base=0.002, iter_per_seq=0.0002, iter_per_prefill_token=0, slots=8, token_log=logdir / "paced.jsonl"
    ) as sim:
        sim.log = logdir / "paced.jsonl"
        yield sim


@pytest.fixture(scope="module")
def timed(logdir):
    with SimProcess(
        iter_base=0.015, iter_per_seq=0.005, iter_per_prefill_token=0.0001, slots=8, token_log=logdir / "timed.jsonl"
    ) as sim:
        sim.log = logdir / "timed.jsonl"
        yield sim


@pytest.fixture(scope="module")
def small(logdir):
    with SimProcess(
        iter_base=0.002,
        iter_per_seq=0.0005,
        slots=2,
        kv_tokens=1000,
        model="small-model",
        token_log=logdir / "small.jsonl",
    ) as sim:
        sim.log = logdir / "small.jsonl"
        yield sim


# ---------------------------------------------------------------- wire shape


def test_completions_stream_shape(paced):
    r = call(paced.port, body=comp(6, stream_options={"include_usage": True}))
    assert r.status == 200 and r.complete
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["transfer-encoding"] == "chunked"
    ev = r.events()
    tokens, usage, done = ev[:6], ev[6], ev[7:]
    assert done == ["[DONE]"]
    for i, e in enumerate(tokens):
        assert e["object"] == "text_completion" and e["id"].startswith("cmpl-") and e["id"] == tokens[0]["id"]
        [c] = e["choices"]
        assert set(c) == TOKEN_KEYS_COMPLETIONS and c["text"].strip()
        assert c["finish_reason"] == ("length" if i == 5 else None)
        assert "usage" not in e
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "total_tokens": 9, "completion_tokens": 6}


def test_no_usage_chunk_without_include_usage(paced):
    ev = call(paced.port, body=comp(3)).events()
    assert len(ev) == 4 and ev[-1] == "[DONE]" and ev[2]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in e for e in ev[:-1])


def test_chat_stream_shape(paced):
    r = call(paced.port, "POST", "/v1/chat/completions", chat(4, stream_options={"include_usage": True}))
    ev = r.events()
    assert len(ev) == 1 + 4 + 1 + 1
    role, tokens, usage = ev[0], ev[1:5], ev[5]
    assert role["object"] == "chat.completion.chunk" and role["id"].startswith("chatcmpl-")
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["choices"][0]["finish_reason"] is None
    for i, e in enumerate(tokens):
        assert set(e["choices"][0]["delta"]) == {"content"} and e["choices"][0]["delta"]["content"]
        assert e["choices"][0]["finish_reason"] == ("length" if i == 3 else None)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4 and usage["usage"]["prompt_tokens"] == 3
    assert ev[-1] == "[DONE]"


def test_role_chunk_arrives_with_the_first_token(paced):
    r = call(paced.port, "POST", "/v1/chat/completions", chat(2))
    first = r.chunk_times[0][1]
    assert b'"role":"assistant"' in first  # one write: role and first token in the same recv
    assert r.chunk_times[0][0] == r.chunk_times[1][0]


def test_continuous_usage_counts(paced):
    opts = {"include_usage": True, "continuous_usage_stats": True}
    ev = call(paced.port, "POST", "/v1/chat/completions", chat(5, stream_options=opts)).events()
    counts = [e["usage"]["completion_tokens"] for e in ev[:-1]]
    assert counts == [0, 1, 2, 3, 4, 5, 5]
    assert all(
        e["usage"]["prompt_tokens"] == 3 and e["usage"]["total_tokens"] == 3 + c
        for e, c in zip(ev[:-1], counts, strict=True)
    )
    ev = call(paced.port, body=comp(3, stream_options=opts)).events()
    assert [e["usage"]["completion_tokens"] for e in ev[:3]] == [1, 2, 3]


def test_non_streaming_bodies(paced):
    r = call(paced.port, body=comp(7, stream=False))
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["object"] == "text_completion" and body["usage"]["completion_tokens"] == 7
    assert len(body["choices"][0]["text"].split()) == 7 and body["choices"][0]["finish_reason"] == "length"
    body = call(
        paced.port, "POST", "/v1/chat/completions", chat(4, stream=False, max_tokens=None, max_completion_tokens=4)
    ).json()
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
    assert len(body["choices"][0]["message"]["content"].split()) == 4 and body["usage"]["prompt_tokens"] == 3


def test_prompt_token_counting(paced):
    def n_in(**body):
        return call(paced.port, body=comp(1, stream=False, **body)).json()["usage"]["prompt_tokens"]

    assert n_in(prompt="a b  c\nd") == 4
    assert n_in(prompt=[1, 2, 3, 4, 5]) == 5
    assert n_in(prompt="") == 1
    parts = [{"role": "system", "content": "be nice"}, {"role": "user", "content": [{"type": "text", "text": "x y z"}]}]
    r = call(paced.port, "POST", "/v1/chat/completions", {"messages": parts, "max_tokens": 1})
    assert r.json()["usage"]["prompt_tokens"] == 5


def test_models_and_health(small):
    r = call(small.port, "GET", "/v1/models")
    assert r.status == 200 and r.json()["data"][0]["id"] == "small-model"
    assert call(small.port, "GET", "/health").status == 200


# ---------------------------------------------------------------- output length


@pytest.fixture(scope="module")
def eos():
    with SimProcess(eos_mean=4, seed=3, iter_base=0.0005, iter_per_seq=0, iter_per_prefill_token=0) as sim:
        yield sim


def n_out(port, body):
    ev = call(port, body=body).events()
    usage = ev[-2]["usage"]["completion_tokens"]
    tokens = [e for e in ev[:-2] if e["choices"]]
    assert usage == len(tokens)
    return usage, tokens[-1]["choices"][0]["finish_reason"]


def test_eos_stops_early_without_ignore_eos(eos):
    results = [n_out(eos.port, comp(40, stream_options={"include_usage": True})) for _ in range(20)]
    lengths = [n for n, _ in results]
    assert min(lengths) >= 1 and max(lengths) <= 40 and min(lengths) < 40
    assert all(reason == ("length" if n == 40 else "stop") for n, reason in results)
    assert 2 <= statistics.mean(lengths) <= 8


@pytest.mark.parametrize("extra", [{"ignore_eos": True}, {"min_tokens": 40}])
def test_ignore_eos_and_min_tokens_give_exactly_max_tokens(eos, extra):
    for _ in range(10):
        assert n_out(eos.port, comp(40, stream_options={"include_usage": True}, **extra)) == (40, "length")


def test_min_tokens_is_a_lower_bound(eos):
    lengths = [n_out(eos.port, comp(40, min_tokens=20, stream_options={"include_usage": True}))[0] for _ in range(10)]
    assert min(lengths) >= 20 and min(lengths) < 40


# ---------------------------------------------------------------- /metrics


def metrics(sim) -> dict:
    r = call(sim.port, "GET", "/metrics")
    assert r.status == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.body.decode()
    for name, typ in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:prompt_tokens_total", "counter"),
        ("vllm:num_preemptions_total", "counter"),
        ("vllm:request_success_total", "counter"),
        ("vllm:time_to_first_token_seconds", "histogram"),
    ]:
        assert f"# TYPE {name} {typ}\n" in text
    return parse_metrics(text)


def test_metrics_name_the_simulator_and_its_settings(small):
    """Issue 24 item 15h: the simulator speaks vLLM's metric names but names itself, with the
    settings its figures depend on (two simulators of different slot counts differ)."""
    from llm_locust.analysis.server_metrics import info_series, read, samples

    text = call(small.port, "GET", "/metrics").body.decode()
    assert "# TYPE llm_locust_sim_info gauge\n" in text
    server, figures = read(text)
    assert server == "llm-locust-sim" and "running" in figures and "generation_tokens_total" in figures
    (info,) = info_series(samples(text))["llm_locust_sim_info"]
    assert info["model_name"] == "small-model" and info["slots"] == "2" and info["kv_tokens"] == "1000"
    assert info["iter_base"] == "0.002" and info["iter_per_seq"] == "0.0005" and info["faults"] == ""


def test_metrics_counters_move(small):
    lab = '{model_name="small-model"}'
    before = metrics(small)
    assert call(small.port, body=comp(5, prompt="a b c d")).complete
    after = metrics(small)
    assert after["vllm:generation_tokens_total" + lab] - before["vllm:generation_tokens_total" + lab] == 5
    assert after["vllm:prompt_tokens_total" + lab] - before["vllm:prompt_tokens_total" + lab] == 4
    ok = 'vllm:request_success_total{finished_reason="length",model_name="small-model"}'
    assert after[ok] - before[ok] == 1
    count = "vllm:time_to_first_token_seconds_count" + lab
    inf = 'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="small-model"}'
    assert after[count] - before[count] == 1 and after[inf] == after[count]
    assert after["vllm:time_to_first_token_seconds_sum" + lab] > before["vllm:time_to_first_token_seconds_sum" + lab]


def test_metrics_running_waiting_and_kv_with_concurrent_streams(small):
    lab = '{model_name="small-model"}'
    # two streams hold both slots (stalled after their first token), a third waits
    held = [Client(small.port) for _ in range(3)]
    try:
        for i, c in enumerate(held[:2]):
            c.send(
                body=comp(95, prompt="a b c d e", ignore_eos=True),
                headers={"x-sim-fault": "stall@1:60", "x-request-id": f"held{i}"},
            )
        for c in held[:2]:
            while b'"text"' not in c.buf:  # first token arrived: it is running
                c._fill()
        held[2].send(body=comp(5))
        while b"\r\n\r\n" not in held[2].buf:  # headers go out once it is queued
            held[2]._fill()
        assert held[2].buf.startswith(b"HTTP/1.1 200")
        m = metrics(small)
        assert m["vllm:num_requests_running" + lab] == 2
        assert m["vllm:num_requests_waiting" + lab] == 1
        assert m["vllm:kv_cache_usage_perc" + lab] == pytest.approx(2 * 100 / 1000)
        # a cancelled stream frees its slot: the waiting request then completes
        held[0].close()
        r = held[2].read()
        assert r.complete and len(r.events()) == 6
        e = read_log(small.log)["held0"]
        assert (e["outcome"], e["n_out"], len(e["t_tokens"])) == ("cancelled", 1, 1)
    finally:
        for c in held:
            c.close()


def test_request_larger_than_kv_is_rejected(small):
    r = call(small.port, body=comp(999, prompt="a b"))
    assert (
        r.status == 400 and "maximum context length is 1000 tokens" in r.json()["error"]["message"]
    )  # vLLM's words: cause overlong


# ---------------------------------------------------------------- token log and timing


def test_token_log_and_inter_token_gaps(timed):
    c = Client(timed.port)
    c.send(body=comp(60, prompt="hi", ignore_eos=True), headers={"x-request-id": "gap-test"})
    r = c.read()
    c.close()
    assert r.complete
    e = read_log(timed.log)["gap-test"]
    ts = e["t_tokens"]
    assert e["n_out"] == 60 == len(ts) and e["n_in"] == 1 and e["outcome"] == "ok"
    assert all(b > a for a, b in zip(ts, ts[1:], strict=False))
    # perf_counter is CLOCK_MONOTONIC: the server's times sit inside the client's
    assert c.t_sent < e["t_recv"] < ts[0] < r.token_times()[0]
    assert ts[-1] < r.token_times()[-1]
    it = 0.015 + 0.005  # a + b * 1 running
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    assert statistics.median(gaps) == pytest.approx(it, abs=0.003)
    # no drift: timer lateness (~1 ms, epoll's resolution) must not accumulate. The Theil-Sen
    # slope of token time over index shrugs off a few tokens made late by a busy machine.
    slope = statistics.median((ts[j] - ts[i]) / (j - i) for i in range(60) for j in range(i + 1, 60))
    assert slope == pytest.approx(it, abs=0.0003)  # the bug drifted by ~1 ms a token
    assert it + 0.0001 - 0.0005 <= ts[0] - e["t_recv"] <= it + 0.0001 + 0.03  # TTFT = a + b + c * 1


def test_prefill_and_batch_size_slow_iterations(timed):
    prompt = " ".join(["w"] * 300)
    r = call(timed.port, body=comp(3, prompt=prompt, ignore_eos=True), headers={"x-request-id": "prefill"})
    assert r.complete
    e = read_log(timed.log)["prefill"]
    ttft = 0.015 + 0.005 + 300 * 0.0001
    assert ttft - 0.0005 <= e["t_tokens"][0] - e["t_recv"] <= ttft + 0.03
    # four concurrent streams: once all run, every iteration takes a + 4 b
    clients = [Client(timed.port) for _ in range(4)]
    for i, c in enumerate(clients):
        c.send(body=comp(30, prompt="x", ignore_eos=True), headers={"x-request-id": f"batch{i}"})
    for c in clients:
        assert c.read().complete
        c.close()
    log = read_log(timed.log)
    start = max(log[f"batch{i}"]["t_tokens"][0] for i in range(4))
    end = min(log[f"batch{i}"]["t_tokens"][-1] for i in range(4))
    ts = [t for t in log["batch0"]["t_tokens"] if start <= t <= end]
    assert len(ts) > 20
    assert (ts[-1] - ts[0]) / (len(ts) - 1) == pytest.approx(0.015 + 4 * 0.005, rel=0.05)


# ---------------------------------------------------------------- faults


def fault(sim, spec, body=None, path="/v1/completions", rid=None):
    headers = {"x-sim-fault": spec, **({"x-request-id": rid} if rid else {})}
    return call(sim.port, "POST", path, body or comp(6, ignore_eos=True), headers)


@pytest.mark.parametrize("spec,status", [("http500", 500), ("http429", 429)])
def test_fault_http_status(paced, spec, status):
    r = fault(paced, spec, rid=f"f-{spec}")
    assert r.status == status and r.json()["error"]["code"] == status
    e = read_log(paced.log)[f"f-{spec}"]
    assert (e["outcome"], e["status"], e["n_out"]) == ("http_error", status, 0)


@pytest.mark.parametrize("k", [0, 3])
def test_fault_stream_error(paced, k):
    c = Client(paced.port)
    r = c.call(body=comp(6, ignore_eos=True), headers={"x-sim-fault": f"stream_error@{k}", "x-request-id": f"se{k}"})
    assert r.status == 200 and r.complete
    ev = r.events()
    assert len(ev) == k + 2 and all(e["choices"][0]["finish_reason"] is None for e in ev[:k])
    assert ev[k]["error"]["type"] == "InternalServerError" and ev[k]["error"]["code"] == 500
    assert ev[k + 1] == "[DONE]"
    assert c.call(body=comp(2)).status == 200  # the connection stays usable
    c.close()
    assert read_log(paced.log)[f"se{k}"]["outcome"] == "stream_error"


@pytest.mark.parametrize("k", [0, 3])
def test_fault_truncate(paced, k):
    r = fault(paced, f"truncate@{k}", rid=f"tr{k}")
    assert r.status == 200 and not r.complete
    ev = r.events()
    assert len(ev) == k and "[DONE]" not in ev and all(e["choices"][0]["finish_reason"] is None for e in ev)
    assert read_log(paced.log)[f"tr{k}"]["outcome"] == "truncated"


def test_fault_stall(paced):
    r = fault(paced, "stall@2:0.4", rid="stall")
    assert r.complete and len(r.events()) == 6 + 1
    t = r.token_times()
    gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
    assert gaps[1] >= 0.35 and max(gaps[:1] + gaps[2:]) < 0.2  # client side: delivery jitter
    ts = read_log(paced.log)["stall"]["t_tokens"]
    assert ts[2] - ts[1] >= 0.4


def test_fault_slow_headers(paced):
    c = Client(paced.port)
    r = c.call(body=comp(2), headers={"x-sim-fault": "slow_headers:0.4"})
    c.close()
    assert r.complete and r.t_head - c.t_sent >= 0.4


def test_fault_on_non_streaming_request(paced):
    r = fault(paced, "stream_error@2", comp(5, stream=False))
    assert r.status == 500 and r.json()["error"]["type"] == "InternalServerError"


def test_bad_fault_header(paced):
    assert fault(paced, "explode@3").status == 400


def test_random_faults_by_rate_are_seeded():
    def outcomes():
        with SimProcess(fault={"http500": 0.4, "truncate@1": 0.3}, seed=7, iter_base=0.0005) as sim:
            out = []
            for _ in range(40):
                r = call(sim.port, body=comp(3))
                out.append("500" if r.status == 500 else "ok" if r.complete else "trunc")
            return out

    first = outcomes()
    assert {"500", "ok", "trunc"} == set(first)
    assert first == outcomes()


# ---------------------------------------------------------------- bad input and HTTP


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": ',
        b"[1, 2]",
        b'{"max_tokens": 3}',
        b'{"prompt": "x", "max_tokens": 0}',
        b'{"prompt": "x", "max_tokens": "many"}',
    ],
)
def test_bad_requests_get_400(paced, body):
    c = Client(paced.port)
    c.sock.sendall(render("POST", "/v1/completions", body))
    r = c.read()
    assert r.status == 400 and r.json()["error"]["code"] == 400
    assert c.call(body=comp(1)).status == 200  # and the connection is still served
    c.close()


def test_unknown_path_and_wrong_method(paced):
    assert call(paced.port, "GET", "/nope").status == 404
    assert call(paced.port, "GET", "/v1/completions").status == 405


def test_garbage_does_not_crash_the_server(paced):
    s = socket.create_connection(("127.0.0.1", paced.port), timeout=5)
    s.sendall(b"NONSENSE\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 400")
    s.close()
    assert call(paced.port, "GET", "/health").status == 200


def test_keep_alive_with_http_client(paced):
    conn = http.client.HTTPConnection("127.0.0.1", paced.port, timeout=10)
    ports = set()
    for _ in range(5):
        conn.request("POST", "/v1/completions", json.dumps(comp(3)), {"content-type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and body.endswith(b"data: [DONE]\n\n")
        ports.add(conn.sock.getsockname()[1])
    conn.request("GET", "/health")
    assert conn.getresponse().read() == b""
    ports.add(conn.sock.getsockname()[1])
    assert len(ports) == 1
    conn.close()


def test_pipelined_requests_answered_in_order(paced):
    c = Client(paced.port)
    c.sock.sendall(
        render("POST", "/v1/completions", comp(2))
        + render("GET", "/nope")
        + render("POST", "/v1/completions", comp(3, stream=False))
    )
    assert len(c.read().events()) == 3
    assert c.read().status == 404
    assert c.read().json()["usage"]["completion_tokens"] == 3
    c.close()


def test_connection_close_and_expect_continue(paced):
    c = Client(paced.port)
    r = c.call(body=comp(2), headers={"connection": "close", "expect": "100-continue"})
    assert r.complete and r.headers.get("connection") == "close"
    with pytest.raises(EOFError):
        c._fill()
    c.close()


# ---------------------------------------------------------------- fast mode


def test_fast_mode_streams_everything_without_pacing(logdir):
    with SimProcess(fast=True, token_log=logdir / "fast.jsonl") as sim:
        t0 = perf_counter()
        r = call(sim.port, body=comp(5000, ignore_eos=True, stream_options={"include_usage": True}))
        elapsed = perf_counter() - t0
        assert r.complete and r.events()[-2]["usage"]["completion_tokens"] == 5000
        assert len(r.events()) == 5002 and elapsed < 15  # paced by the default model: > 27 s

        results = []

        def worker():
            c = Client(sim.port)
            for _ in range(20):
                results.append(len(c.call(body=comp(50, stream_options={"include_usage": True})).events()))
            c.close()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [52] * 160
        assert (
            call(sim.port, "POST", "/v1/chat/completions", chat(3, stream=False)).json()["usage"]["completion_tokens"]
            == 3
        )
        assert call(sim.port, body=comp(10), headers={"x-sim-fault": "truncate@4"}).events().__len__() == 4
        lab = '{model_name="llm-locust-sim"}'
        m = parse_metrics(call(sim.port, "GET", "/metrics").body.decode())
        assert m["vllm:generation_tokens_total" + lab] == 5000 + 160 * 50 + 3 + 4
        assert m["vllm:num_requests_running" + lab] == 0


def test_bad_options_fail_to_start():
    with pytest.raises(RuntimeError):
        SimProcess(fault={"explode": 0.1}, stderr=subprocess.DEVNULL).start()


# ---------------------------------------------------------------- prefix cache (--prefix-cache)

BLOCK = 4


def sse_objects(body: bytes) -> list:
    """Every data: payload of an SSE body (named events too), as dicts or "[DONE]"."""
    out = []
    for block in body.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                out.append("[DONE]" if line[6:] == b"[DONE]" else json.loads(line[6:]))
    return out


def cache_metrics(sim) -> tuple[float, float]:
    m = parse_metrics(call(sim.port, "GET", "/metrics").body.decode())
    lab = '{model_name="llm-locust-sim"}'
    return m["vllm:prefix_cache_queries_total" + lab], m["vllm:prefix_cache_hits_total" + lab]


@pytest.fixture(scope="module")
def cached(logdir):
    with SimProcess(
        iter_base=0.002,
        iter_per_seq=0.0002,
        iter_per_prefill_token=0.001,
        slots=8,
        prefix_cache_tokens=100_000,
        cache_block=BLOCK,
        token_log=logdir / "cached.jsonl",
    ) as sim:
        sim.log = logdir / "cached.jsonl"
        yield sim


def words_of(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def openai_cached(r: Resp) -> tuple[int, dict]:
    """(usage.prompt_tokens_details.cached_tokens, the final token chunk's timings) of a stream."""
    ev = [e for e in r.events() if e != "[DONE]"]
    usage = [e for e in ev if not e["choices"]][-1]["usage"]
    final = [e for e in ev if e["choices"] and e["choices"][0]["finish_reason"]][-1]
    return usage["prompt_tokens_details"]["cached_tokens"], final["timings"]


def test_prefix_cache_second_identical_request_hits_prompt_and_output_blocks(cached):
    q0, h0 = cache_metrics(cached)
    body = comp(6, prompt=words_of("same", 10), stream_options={"include_usage": True})
    first = call(cached.port, body=body, headers={"x-request-id": "pc-1"})
    second = call(cached.port, body=body, headers={"x-request-id": "pc-2"})
    c1, t1 = openai_cached(first)
    c2, t2 = openai_cached(second)
    # the first's 10 prompt + 6 output words are 4 full blocks; a 10-word prompt can use the full
    # blocks within its first 9 words: 2 blocks
    assert (c1, c2) == (0, 8)
    assert t1 == {"cache_n": 0, "prompt_n": 10, "predicted_n": 6} and t2 == {
        "cache_n": 8,
        "prompt_n": 2,
        "predicted_n": 6,
    }
    q1, h1 = cache_metrics(cached)
    assert (q1 - q0, h1 - h0) == (20, c1 + c2)


def test_prefix_cache_multi_turn_chat_hits_the_reply(cached):
    user1 = words_of("turn", 14)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": user1}],
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    first = call(cached.port, path="/v1/chat/completions", body=body)
    reply = "".join(
        e["choices"][0]["delta"].get("content", "") for e in first.events() if e != "[DONE]" and e["choices"]
    )
    assert len(reply.split()) == 7
    body["messages"] += [{"role": "assistant", "content": reply}, {"role": "user", "content": "and then what"}]
    second = call(cached.port, path="/v1/chat/completions", body=body)
    c2, timings = openai_cached(second)
    assert c2 == 20  # 14 + 7 = 21 words of history: 5 full blocks; the prompt is 24 words
    usage_chunks = [e["usage"] for e in second.events() if e != "[DONE]" and e["choices"]]
    assert all(u["prompt_tokens_details"]["cached_tokens"] == 20 for u in usage_chunks)
    assert timings["cache_n"] == 20


def test_prefix_cache_prefill_falls_by_the_cached_share(cached):
    body = comp(2, prompt=words_of("long", 400))
    call(cached.port, body=body, headers={"x-request-id": "pf-1"})
    call(cached.port, body=body, headers={"x-request-id": "pf-2"})
    log = read_log(cached.log)
    ttft = [log[r]["t_tokens"][0] - log[r]["t_recv"] for r in ("pf-1", "pf-2")]
    # C = 1 ms per prefilled token: 400 ms uncached; 396 of 400 cached leaves 4 ms (+ the iteration)
    assert ttft[0] >= 0.4 and ttft[1] < 0.1


def test_prefix_cache_reported_by_every_api_and_counted_on_metrics(cached):
    q0, h0 = cache_metrics(cached)
    reported = []
    # 10-word prompts, a new one per API and mode: 2 full blocks within the first 9 words

    def twice(path, body):
        out = []
        for _ in range(2):
            r = call(cached.port, path=path, body=body)
            assert r.status == 200
            out.append(r)
        return out

    # Responses: usage.input_tokens_details.cached_tokens, streamed and not
    for stream in (True, False):
        rs = twice("/v1/responses", {"input": words_of(f"r{stream}", 10), "max_output_tokens": 3, "stream": stream})
        for r in rs:
            obj = (
                [e for e in sse_objects(r.body) if e["type"] == "response.completed"][-1]["response"]
                if stream
                else r.json()
            )
            reported.append(obj["usage"]["input_tokens_details"]["cached_tokens"])
    assert reported == [0, 8, 0, 8]
    # Anthropic: input_tokens excludes cache reads, cache_read_input_tokens has them
    for stream in (True, False):
        body = {
            "messages": [{"role": "user", "content": words_of(f"a{stream}", 10)}],
            "max_tokens": 3,
            "stream": stream,
        }
        for r in twice("/v1/messages", body):
            usage = (
                [e for e in sse_objects(r.body) if e["type"] == "message_delta"][-1]["usage"]
                if stream
                else r.json()["usage"]
            )
            assert usage["input_tokens"] + usage["cache_read_input_tokens"] == 10
            reported.append(usage["cache_read_input_tokens"])
    assert reported[4:] == [0, 8, 0, 8]
    # SGLang native: meta_info.cached_tokens
    for stream in (True, False):
        body = {"text": words_of(f"s{stream}", 10), "sampling_params": {"max_new_tokens": 3}, "stream": stream}
        for r in twice("/generate", body):
            meta = (sse_objects(r.body)[-2] if stream else r.json())["meta_info"]
            reported.append(meta["cached_tokens"])
    assert reported[8:] == [0, 8, 0, 8]
    # non-streaming OpenAI: usage.prompt_tokens_details
    for r in twice("/v1/completions", comp(3, prompt=words_of("c", 10), stream=False)):
        reported.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert reported[12:] == [0, 8]
    q1, h1 = cache_metrics(cached)
    assert h1 - h0 == sum(reported)
    assert q1 - q0 == 14 * 10


def test_prefix_cache_in_fast_mode(logdir):
    with SimProcess(fast=True, prefix_cache=True, cache_block=BLOCK) as sim:
        body = comp(6, prompt=words_of("fast", 10), stream_options={"include_usage": True})
        assert [openai_cached(call(sim.port, body=body))[0] for _ in range(2)] == [0, 8]
        assert cache_metrics(sim) == (20, 8)


def test_no_prefix_cache_fields_without_the_flag(paced):
    r = call(paced.port, body=comp(3, stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert b"prompt_tokens_details" not in r.body and b"timings" not in r.body
    text = call(paced.port, "GET", "/metrics").body
    assert b"prefix_cache" not in text and b"spec_decode" not in text


# ---------------------------------------------------------------- speculative decoding (--spec-tokens)


@pytest.fixture(scope="module")
def spec(logdir):
    with SimProcess(
        iter_base=0.002,
        iter_per_seq=0.0002,
        iter_per_prefill_token=0,
        slots=8,
        spec_tokens=3,
        spec_accept=0.7,
        seed=3,
        token_log=logdir / "spec.jsonl",
    ) as sim:
        sim.log = logdir / "spec.jsonl"
        yield sim


def spec_metrics(sim) -> dict:
    m = parse_metrics(call(sim.port, "GET", "/metrics").body.decode())
    lab = '{model_name="llm-locust-sim"}'
    out = {k: m[f"vllm:spec_decode_num_{k}_total" + lab] for k in ("drafts", "draft_tokens", "accepted_tokens")}
    out["per_pos"] = [
        m[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="llm-locust-sim",position="{i}"}}']
        for i in range(3)
    ]
    out["generated"] = m["vllm:generation_tokens_total" + lab]
    return out


def test_spec_decode_chunks_carry_several_tokens_and_add_up(spec):
    before = spec_metrics(spec)
    n = 60
    r = call(
        spec.port,
        body=comp(n, stream_options={"include_usage": True, "continuous_usage_stats": True}),
        headers={"x-request-id": "sd-1"},
    )
    chunks = [e for e in r.events() if e != "[DONE]" and e["choices"]]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    per_chunk = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert [len(c["choices"][0]["text"].split()) for c in chunks] == per_chunk  # each chunk reports its tokens
    assert sum(per_chunk) == n and max(per_chunk) > 1 and max(per_chunk) <= 4 and per_chunk[0] == 1
    log = read_log(spec.log)["sd-1"]
    assert log["n_out"] == n and len(log["t_tokens"]) == n and len(set(log["t_tokens"])) == len(chunks)
    after = spec_metrics(spec)
    d = {k: after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted_tokens", "generated")}
    assert d["generated"] == n
    # every chunk after the first is one decode step: 1 token + its accepted drafts
    assert d["accepted_tokens"] == (n - 1) - (len(chunks) - 1)
    assert d["drafts"] in (len(chunks) - 1, len(chunks) - 2)  # a last step with 1 token left drafts nothing
    assert 3 * d["drafts"] - 3 <= d["draft_tokens"] <= 3 * d["drafts"]  # only the last steps draft fewer than K
    assert sum(after["per_pos"]) - sum(before["per_pos"]) == d["accepted_tokens"]


def test_spec_decode_other_apis_count_tokens_per_chunk(spec):
    r = call(
        spec.port, path="/generate", body={"text": "a b", "sampling_params": {"max_new_tokens": 40}, "stream": True}
    )
    metas = [e["meta_info"] for e in sse_objects(r.body) if e != "[DONE]"]
    texts = [e["text"] for e in sse_objects(r.body) if e != "[DONE]"]
    assert metas[-1]["completion_tokens"] == 40 and len(texts[-1].split()) == 40
    assert all(len(t.split()) == m["completion_tokens"] for t, m in zip(texts, metas, strict=True))
    assert len(metas) < 40
    r = call(
        spec.port,
        path="/v1/messages",
        body={"messages": [{"role": "user", "content": "x"}], "max_tokens": 30, "stream": True},
    )
    deltas = [e["delta"]["text"] for e in sse_objects(r.body) if e["type"] == "content_block_delta"]
    assert len("".join(deltas).split()) == 30 and len(deltas) < 30


def test_spec_decode_cut_fault_lands_on_exactly_k_tokens(spec):
    r = call(
        spec.port,
        body=comp(40, stream_options={"include_usage": True, "continuous_usage_stats": True}),
        headers={"x-sim-fault": "stream_error@17"},
    )
    chunks = [e for e in r.events() if e != "[DONE]" and "choices" in e and e["choices"]]
    assert chunks[-1]["usage"]["completion_tokens"] == 17
    assert sum(len(c["choices"][0]["text"].split()) for c in chunks) == 17


def test_stream_client_records_cached_tokens_and_spec_chunk_tokens():
    """llm-locust's own client against the sim with both options: the record's n_cached is the
    reply's cached count, and its per-chunk token counts (continuous usage) add up."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_adapter
    from llm_locust.protocols.base import RequestSpec
    from llm_locust.transport.http import StreamClient, Timeouts

    with SimProcess(
        iter_base=0.001,
        iter_per_seq=0.0001,
        iter_per_prefill_token=0,
        prefix_cache=True,
        cache_block=BLOCK,
        spec_tokens=3,
        spec_accept=0.8,
        seed=5,
    ) as sim:
        http = HTTPClient.from_url(sim.url, concurrency=2, connection_timeout=2.0, network_timeout=10.0)
        try:
            recs = {}
            for api in (
                "openai-completions",
                "openai-chat",
                "anthropic-messages",
                "sglang-generate",
                "openai-responses",
            ):
                client = StreamClient(http, sim.url, get_adapter(api), Timeouts(2.0, 10.0, 10.0), None, False)
                spec = RequestSpec(
                    model="m",
                    prompt=words_of(api, 10),
                    messages=[{"role": "user", "content": words_of(api, 10)}],
                    max_tokens=40,
                    force_length=True,
                    continuous_usage=True,
                )
                recs[api] = [client.send(spec, f"{api}-{i}") for i in range(2)]
        finally:
            http.close()
    for api, (r1, r2) in recs.items():
        assert r1.ok and r2.ok, (api, r1.error, r2.error)
        assert (r1.n_cached, r2.n_cached) == (0, 8), api
        assert r1.n_out == r2.n_out == 40, api
    for api in ("openai-completions", "openai-chat", "sglang-generate"):  # a running count per chunk
        r = recs[api][1]
        assert sum(r.chunk_tokens) == 40 and max(r.chunk_tokens) > 1 and len(r.chunk_times) < 40, (api, r.chunk_tokens)
