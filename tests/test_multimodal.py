"""Workload options of issue 13 item 2: images in chat requests, tool definitions, structured output."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import orjson
import pytest

from llm_locust.metrics.aggregate import Aggregate, figures
from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.protocols.openai import CHAT
from llm_locust.runtime.context import run_context
from llm_locust.runtime.send import _note_workload, carry
from llm_locust.settings.model import Settings
from llm_locust.workload import load_trace
from llm_locust.workload.formats.reader import TraceError
from llm_locust.workload.images import ImageMaker, image_parts, parse_size
from llm_locust.workload.prompts import PromptBuilder
from llm_locust.workload.specs import SpecBuilder, StructuredCheck, tool_definitions, wants_text


def builder(**kw) -> SpecBuilder:
    s = Settings(**kw)
    return SpecBuilder(s, PromptBuilder(seed=s.seed, chat=True), chat=True)


def body_of(spec) -> dict:
    return orjson.loads(CHAT.request(spec)[1])


def test_images_are_the_same_bytes_for_a_seed():
    from PIL import Image

    a, b, c = ImageMaker(7), ImageMaker(7), ImageMaker(8)
    png = a.image_bytes((32, 16), "png", 0)
    assert png == b.image_bytes((32, 16), "png", 0)
    assert png != c.image_bytes((32, 16), "png", 0)
    assert png != a.image_bytes((32, 16), "png", 1)
    assert Image.open(io.BytesIO(png)).size == (32, 16)
    jpg = a.image_bytes((32, 16), "jpeg", 0)
    assert jpg[:2] == b"\xff\xd8" and jpg == b.image_bytes((32, 16), "jpeg", 0)
    url, n = a.data_url((32, 16), "png", 0)
    assert url.startswith("data:image/png;base64,") and n == len(png)
    assert a.data_url((32, 16), "png", 0)[0] is url  # cached: encoded once
    assert parse_size("64x48") == (64, 48)
    with pytest.raises(ValueError):
        parse_size("64")


def test_synthetic_images_reach_the_body():
    b = builder(images=3, image_size="16x16", image_format="jpeg", seed=1)
    from llm_locust.workload.trace_record import TraceRecord

    spec = b.spec(TraceRecord(0.0, input_tokens=100, output_tokens=4, source="x:1"), "m")
    body = body_of(spec)
    parts = body["messages"][-1]["content"]
    assert parts[0]["type"] == "text" and parts[0]["text"]
    imgs = [p for p in parts if p["type"] == "image_url"]
    assert len(imgs) == 3 and all(p["image_url"]["url"].startswith("data:image/jpeg;base64,") for p in imgs)
    assert spec.media is not None  # on the request's spec, never a table beside it (issue 38)
    n, nbytes, n_audio, audio_bytes = spec.media
    assert n == 3 and nbytes > 0 and (n_audio, audio_bytes) == (0, 0)
    assert b.spec(TraceRecord(0.0, input_tokens=100, output_tokens=4, source="x:1"), "m").media == spec.media


def test_azure2025_image_counts_reach_the_request_and_the_results(tmp_path):
    p = tmp_path / "mm.csv"
    p.write_text(
        "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n"
        "2024-10-15T12:00:00.269Z,0,70,9\n"
        "2024-10-15T12:00:00.500Z,2,80,5\n"
        "2024-10-15T12:00:01.000Z,1,90,7\n"
    )
    trace = load_trace(str(p))
    b = builder(image_size="8x8", seed=3)
    agg = Aggregate()
    env = SimpleNamespace()
    run_context(env).structured = None
    counts = []
    for i in range(len(trace)):
        rec = trace[i]
        spec = b.spec(rec, "m")
        body = body_of(spec)
        counts.append(image_parts(body["messages"]))
        r = RequestRecord(
            request_id=str(i), api="openai-chat", t_sched=0.0, t_sent=0.0, wall_sent=1.0, t_end=0.5, source=rec.source
        )
        carry(spec, r)
        _note_workload(env, r)
        agg.add(r)
    assert counts == [0, 2, 1]
    merged = Aggregate()
    merged.merge_wire(agg.to_wire())
    fig = figures(merged)
    assert fig["images"]["sent"] == 3 and fig["images"]["bytes"] > 0


def test_an_unreadable_image_names_the_trace_line(tmp_path):
    (tmp_path / "ok.png").write_bytes(ImageMaker(0).image_bytes((4, 4)))
    p = tmp_path / "mt.jsonl"
    good = {"session_id": "a", "turns": [{"text": "look", "images": ["ok.png"], "timestamp": 0}]}
    bad = {
        "session_id": "b",
        "turns": [{"text": "hi", "timestamp": 0}, {"text": "see", "image": "missing.png", "delay": 10}],
    }
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    trace = load_trace(str(p), "aiperf-multi-turn")  # loads for its counts; files are read when sent
    assert [trace[i].images for i in range(len(trace))] == [1, None, 1]
    with pytest.raises(TraceError) as e:
        builder().spec(trace[2], "m")
    assert f"{p}:2:" in str(e.value) and "missing.png" in str(e.value)
    p.write_text(json.dumps(good) + "\n")
    trace = load_trace(str(p), "aiperf-multi-turn")
    rec = trace[0]
    assert rec.images == 1
    body = body_of(builder().spec(rec, "m"))
    parts = body["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "look"}
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert body_of(builder().spec(rec, "m")) == body and builder().spec(rec, "m").media[0] == 1


def test_tool_definitions_are_present_and_seeded():
    from llm_locust.workload.trace_record import TraceRecord

    body = body_of(builder(tools=4, tool_choice="required", seed=5).spec(TraceRecord(0.0, input_tokens=10), "m"))
    assert body["tool_choice"] == "required" and len(body["tools"]) == 4
    for t in body["tools"]:
        assert t["type"] == "function" and t["function"]["name"]
        params = t["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
    assert tool_definitions(4, 5) == body["tools"]
    assert tool_definitions(4, 6) != body["tools"]
    plain = body_of(builder().spec(TraceRecord(0.0, input_tokens=10), "m"))
    assert "tools" not in plain and "tool_choice" not in plain and "response_format" not in plain


SCHEMA = {
    "title": "person",
    "type": "object",
    "required": ["name", "age"],
    "properties": {"name": {"type": "string", "minLength": 1}, "age": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


def test_response_format_in_the_body(tmp_path):
    from llm_locust.workload.trace_record import TraceRecord

    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA))
    spec = builder(response_format=str(path)).spec(TraceRecord(0.0, input_tokens=10), "m")
    assert wants_text(spec)
    rf = body_of(spec)["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "person"
    assert rf["json_schema"]["schema"] == SCHEMA
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    with pytest.raises(ValueError, match="object"):
        Settings(response_format=str(bad))


REPLIES = [
    '{"name": "Ann", "age": 3}',
    '{"name": "Bo", "age": -1}',
    "not json",
    '{"name": "C", "age": 4, "x": 1}',
    ' {"age": 9, "name": "D"} ',
]


@pytest.mark.parametrize("use_jsonschema", [True, False])
def test_structured_output_rate_over_canned_replies(use_jsonschema):
    check = StructuredCheck(SCHEMA)
    if not use_jsonschema:
        check._validator = None  # the built-in subset
    assert [check(t) for t in REPLIES] == [(True, True), (True, False), (False, False), (True, False), (True, True)]
    env = SimpleNamespace()
    run_context(env).structured = check
    agg = Aggregate()
    for i, text in enumerate(REPLIES + [None]):
        r = RequestRecord(
            request_id=str(i), api="openai-chat", t_sched=0.0, t_sent=0.0, wall_sent=1.0, t_end=0.5, text=text
        )
        _note_workload(env, r)
        agg.add(r)
    failed = RequestRecord(
        request_id="f",
        api="openai-chat",
        t_sched=0.0,
        t_sent=0.0,
        wall_sent=1.0,
        t_end=0.5,
        text="{}",
        outcome=Outcome.HTTP_ERROR,
        error="HTTP 500",
    )
    _note_workload(env, failed)
    agg.add(failed)
    merged = Aggregate()
    merged.merge_wire(agg.to_wire())
    so = figures(merged)["structured_output"]
    assert so["checked"] == 5 and so["parsed"] == 4 and so["valid"] == 2
    assert so["valid_rate"] == pytest.approx(0.4) and so["parse_rate"] == pytest.approx(0.8)


def test_audio_clips_reach_the_body_and_the_results():
    import base64
    import wave

    from llm_locust.workload.trace_record import TraceRecord

    b = builder(audio=2, audio_seconds=0.25, images=1, image_size="8x8", seed=5)
    spec = b.spec(TraceRecord(0.0, input_tokens=50, output_tokens=4, source="a:1"), "m")
    parts = body_of(spec)["messages"][-1]["content"]
    clips = [p for p in parts if p["type"] == "input_audio"]
    assert len(clips) == 2 and [p["type"] for p in parts].count("image_url") == 1
    raw = [base64.b64decode(p["input_audio"]["data"]) for p in clips]
    assert all(p["input_audio"]["format"] == "wav" for p in clips)
    with wave.open(io.BytesIO(raw[0])) as w:  # a real WAV: 16 kHz mono 16-bit, 0.25 s
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (16000, 1, 2, 4000)
    assert raw[0] != raw[1]  # two distinct clips
    again = body_of(builder(audio=2, audio_seconds=0.25, seed=5).spec(TraceRecord(0.0, 50, 4, source="a:2"), "m"))
    assert [p for p in again["messages"][-1]["content"] if p["type"] == "input_audio"] == clips  # seeded
    r = RequestRecord(
        request_id="1", api="openai-chat", t_sched=0.0, t_sent=0.0, wall_sent=1.0, t_end=0.5, source="a:1"
    )
    env = SimpleNamespace()
    run_context(env).structured = None
    carry(spec, r)
    _note_workload(env, r)
    agg = Aggregate()
    agg.add(r)
    merged = Aggregate()
    merged.merge_wire(agg.to_wire())
    fig = figures(merged)
    assert (fig["audio"]["sent"], fig["audio"]["bytes"]) == (2, sum(len(x) for x in raw))
    assert merged.work.images == 1 and agg.to_wire()["work"]["audio"] == 2  # by name
