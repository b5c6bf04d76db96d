"""Scenarios written in Python (`self.llm` on LLMUser): the shipped examples run under
`llm-locust run -f` and plain `locust -f`, local and distributed, each call accounted like any
request; a scenario that raises is a counted failure and the user goes on."""

from __future__ import annotations

import csv
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import run_cli

REPO = Path(__file__).resolve().parents[1]


def rows(prefix: Path) -> dict[str, dict]:
    with open(f"{prefix}_stats.csv") as f:
        return {r["Name"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def sim(sims):
    return sims(slots=8)


def test_a_multi_turn_chat_whose_next_turn_depends_on_the_reply(tmp_path, sim):
    log = tmp_path / "records.jsonl"
    p = run_cli(
        "-f",
        str(REPO / "locustfiles" / "multiturn.py"),
        "--host",
        sim.url,
        "-u",
        "2",
        "-t",
        "4s",
        "--csv",
        str(tmp_path / "c"),
        "--results",
        str(tmp_path / "r.json"),
        "--record-log",
        str(log),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    table = rows(tmp_path / "c")
    assert {"turn 1", "turn 2", "turn 3"} <= set(table)
    assert int(table["turn 1"]["Request Count"]) >= int(table["turn 3"]["Request Count"]) > 0
    s = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert s["ok"] > 0 and s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s.get("lost", 0)
    # the history grows by each reply: a conversation's prompts get longer turn by turn
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert recs and max(r["n_in"] for r in recs if r.get("n_in")) > min(r["n_in"] for r in recs if r.get("n_in"))


def test_the_multi_turn_example_under_plain_locust_and_distributed(tmp_path, sim):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(REPO / "locustfiles" / "multiturn.py"),
            "--headless",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "3s",
            "--host",
            sim.url,
            "--csv",
            str(tmp_path / "plain"),
            "--only-summary",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "turn 2" in rows(tmp_path / "plain")
    p = run_cli(
        "-f",
        str(REPO / "locustfiles" / "multiturn.py"),
        "--host",
        sim.url,
        "-u",
        "4",
        "-t",
        "5s",
        "--workers",
        "2",
        "--csv",
        str(tmp_path / "dist"),
        "--results",
        str(tmp_path / "d.json"),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "turn 2" in rows(tmp_path / "dist")
    s = json.loads((tmp_path / "d.json").read_text())["summary"]
    assert s["ok"] > 0 and s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s.get("lost", 0)


class ToolServer(http.server.BaseHTTPRequestHandler):
    """A chat server that asks for the add tool, then answers with the tool's result."""

    protocol_version = "HTTP/1.1"
    seen_results: list = []

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self._send(200, b'{"data": [{"id": "m"}]}', "application/json")

    def do_POST(self):  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tool = [m["content"] for m in req["messages"] if m["role"] == "tool"]
        if tool:
            type(self).seen_results.append(tool[-1])
            chunks = [
                {"choices": [{"index": 0, "delta": {"content": f"The sum is {tool[-1]}"}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
        else:
            assert req["tools"][0]["function"]["name"] == "add"
            call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": ""}}
            chunks = [
                {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
                {
                    "choices": [
                        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 2,'}}]}}
                    ]
                },
                {
                    "choices": [
                        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ' "b": 3}'}}]}}
                    ]
                },
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            ]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(200, body.encode(), "text/event-stream")

    def log_message(self, *a):
        pass


def test_an_agent_loop_answers_the_models_tool_call_with_a_local_function(tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ToolServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = run_cli(
            "-f",
            str(REPO / "locustfiles" / "agent.py"),
            "--host",
            f"http://127.0.0.1:{srv.server_port}",
            "-u",
            "1",
            "-t",
            "2s",
            "--csv",
            str(tmp_path / "c"),
            "--results",
            str(tmp_path / "r.json"),
        )
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr[-3000:]
    table = rows(tmp_path / "c")
    assert int(table["agent step 1"]["Request Count"]) > 0 and int(table["agent step 2"]["Request Count"]) > 0
    assert "agent step 3" not in table  # the model answered after the tool's result
    assert ToolServer.seen_results and set(ToolServer.seen_results) == {"5"}  # add(2, 3), run locally
    # tool-call tokens are output tokens: step 1's requests produced output though they had no text
    assert float(table["agent step 1"]["Average Content Size"]) > 0


def test_a_scenario_that_raises_is_a_counted_failure_and_the_user_goes_on(tmp_path, sim):
    lf = tmp_path / "raises.py"
    lf.write_text(
        "from locust import task\nfrom llm_locust.users import LLMUser\n\n"
        "class Flaky(LLMUser):\n"
        "    @task\n"
        "    def go(self):\n"
        "        r = self.llm.chat([{'role': 'user', 'content': 'hi'}], max_tokens=4, name='before the bug')\n"
        "        raise ValueError('bug in the scenario')\n"
    )
    p = run_cli("-f", str(lf), "--host", sim.url, "-u", "1", "-t", "3s", "--csv", str(tmp_path / "c"), "--no-fail-fast")
    table = rows(tmp_path / "c")
    assert int(table["before the bug"]["Request Count"]) > 1  # the user went on after the exception
    errors = [r for name, r in table.items() if name.startswith("scenario error")]
    assert errors and int(errors[0]["Failure Count"]) > 1
    assert "ValueError: bug in the scenario" in p.stderr
    failures = (tmp_path / "c_failures.csv").read_text()
    assert "bug in the scenario" in failures


def test_a_workload_mixes_kinds_with_figures_per_kind(tmp_path):
    """--mix embeddings:0.2,rerank:0.1: those shares of the requests are embeddings and rerank
    (within the binomial bound), each with its own figures beside the total."""
    import math

    results = tmp_path / "r.json"
    p = run_cli(
        "--sim-fast",
        "--mix",
        "embeddings:0.2,rerank:0.1",
        "-u",
        "8",
        "-t",
        "4s",
        "--max-tokens-cap",
        "8",
        "--results",
        str(results),
        "--csv",
        str(tmp_path / "c"),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(results.read_text())
    s = doc["summary"]
    n = s["ok"]
    kinds = s["kinds"]
    assert n > 200
    for api, share in (("openai-embeddings", 0.2), ("rerank", 0.1)):
        got = kinds[api]["ok"]
        bound = 4 * math.sqrt(n * share * (1 - share))
        assert abs(got - n * share) <= bound, (api, got, n * share, bound)
        assert kinds[api]["items"] >= got and kinds[api]["latency"]["count"] == got
    assert doc["plan"]["workload"]["mix"] == {"embeddings": 0.2, "rerank": 0.1}
    table = rows(tmp_path / "c")
    assert {"embeddings", "rerank"} <= set(table)


def test_images_and_tools_in_every_chat_request_are_counted_and_printed(tmp_path):
    results = tmp_path / "r.json"
    p = run_cli(
        "--images", "2", "--image-size", "32x32", "--tools", "2", "-u", "2", "-t", "3s", "--results", str(results)
    )
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(results.read_text())["summary"]
    assert s["images"]["sent"] == 2 * s["sent"] - 2 * s["cancelled"] or s["images"]["per_request"] == 2.0
    assert s["images"]["bytes"] > 0
    assert "images: " in p.stdout and "(2.00 a request)" in p.stdout
