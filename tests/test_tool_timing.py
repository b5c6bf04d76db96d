"""Time to the first tool-call token: adapters mark tool-call pieces apart from text (OpenAI
delta.tool_calls, Responses function_call_arguments.delta, Anthropic input_json_delta); the
client stamps the first one; the figures, summary and exporter carry it; the simulator streams a
tool call when tool_choice is "required"."""

import json
import subprocess
import sys

import orjson
import pytest
from support import canned_server, sse_reply, stream_client
from test_client import spec

from llm_locust.metrics.aggregate import Aggregate, figures
from llm_locust.protocols import get_adapter
from llm_locust.protocols.base import CONTENT, NO_TOKEN, TOOL_CALL, StreamState
from llm_locust.report.summary import format_summary


def feed(api, payload):
    return get_adapter(api).feed(orjson.dumps(payload), StreamState(True))


def test_adapters_tell_tool_call_pieces_from_text():
    call = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}}]}
    assert feed("openai-chat", call) == TOOL_CALL
    assert feed("openai-chat", {"choices": [{"index": 0, "delta": {"content": "hi"}}]}) == CONTENT
    assert feed("openai-responses", {"type": "response.function_call_arguments.delta", "delta": '{"a'}) == TOOL_CALL
    assert feed("openai-responses", {"type": "response.output_text.delta", "delta": "hi"}) == CONTENT
    assert (
        feed(
            "anthropic-messages",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"c'}},
        )
        == TOOL_CALL
    )
    assert (
        feed(
            "anthropic-messages",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
        )
        == NO_TOKEN
    )


def _chunk(delta, finish=None):
    return (
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode() + b"\n\n"
    )


def test_text_then_a_tool_call_stamps_both_and_counts_the_call_as_output():
    body = (
        _chunk({"role": "assistant", "content": ""})
        + _chunk({"content": "Let me check."})
        + _chunk(
            {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "get", "arguments": ""}}]}
        )
        + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "tool_calls")
        + b"data: [DONE]\n\n"
    )
    server = canned_server(sse_reply(body))
    try:
        rec = stream_client(f"http://127.0.0.1:{server.server_port}").send(spec(), "tool")
    finally:
        server.stop()
    assert rec.ok, rec.error
    assert len(rec.chunk_times) == 3  # the text chunk and two tool-call chunks bear tokens
    assert rec.t_first_content == rec.chunk_times[0]  # the text came first
    assert rec.t_first_tool == rec.chunk_times[1] >= rec.t_first_content
    agg = Aggregate()
    agg.add(rec)
    fig = figures(agg)
    assert fig["latency"]["ttft_tool"]["count"] == 1
    assert fig["latency"]["ttft_tool"]["p50"] == pytest.approx(rec.t_first_tool - rec.t_sent, rel=1e-3, abs=2e-6)
    assert "TTFT tool call" in format_summary(fig)


def test_no_tool_call_no_row():
    agg = Aggregate()
    assert "TTFT tool call" not in format_summary(figures(agg))


def test_the_simulator_streams_a_required_tool_call_and_the_run_times_it(tmp_path):
    log = tmp_path / "rl.jsonl"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "-u",
            "2",
            "-t",
            "2s",
            "--tools",
            "2",
            "--tool-choice",
            "required",
            "--max-tokens",
            "6",
            "--record-log",
            str(log),
            "--results",
            str(tmp_path / "r.json"),
            "--workers",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [json.loads(x) for x in log.read_text().splitlines() if '"ok"' in x]
    assert rows and all(r["first_tool"] == r["first"] and r["n_out"] == 6 for r in rows)
    assert all(r["finish_reason"] == "tool_calls" for r in rows)
    lat = json.loads((tmp_path / "r.json").read_text())["summary"]["latency"]
    assert lat["ttft_tool"]["count"] == len(rows)
    assert "TTFT tool call" in p.stdout
