"""Failures classified by cause from each server's own words (issue 15 item 9): the cause function,
the record and aggregate that keep it, the summary line, and Locust's failure table, where errors that
differ only in numbers share one row while our own record keeps the server's exact words."""

from __future__ import annotations

import pytest

from llm_locust.metrics.aggregate import Aggregate, figures
from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.protocols.causes import CAUSES, OOM, OVERLOADED, OVERLONG, cause_of, normalise
from llm_locust.report.summary import format_summary

# Each server's wording, as its source writes it (module docstring of protocols.causes), filled in.
OVERLONG_REPLIES = [
    # vLLM: OpenAIServing._create_tokens_prompt
    (
        400,
        '{"error":{"message":"This model\'s maximum context length is 32768 tokens. However, your request has '
        '40000 input tokens. Please reduce the length of the input messages.","type":"BadRequestError",'
        '"param":null,"code":400}}',
    ),
    # vLLM: the output budget does not fit beside the prompt
    (
        400,
        "{\"error\":{\"message\":\"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum "
        'context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",'
        '"type":"BadRequestError","param":null,"code":400}}',
    ),
    # vLLM: newer wording
    (
        400,
        "This model's maximum context length is 16384 tokens. However, you requested 8192 output tokens and your "
        "prompt contains at least 8193 input tokens, for a total of at least 16385 tokens.",
    ),
    # vLLM: input processor (token-id prompts)
    (400, "The decoder prompt (length 12324) is longer than the maximum model length of 8192."),
    # llama.cpp: tools/server/server-context.cpp, type from server-common.cpp format_error_response
    (
        400,
        '{"error":{"code":400,"message":"request (1500 tokens) exceeds the available context size (1024 tokens), '
        'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":1500,"n_ctx":1024}}',
    ),
    # llama.cpp: non-splittable tasks (embeddings)
    (
        400,
        '{"error":{"code":400,"message":"input (3000 tokens) is larger than the max context size (2048 tokens). '
        'skipping","type":"exceed_context_size_error"}}',
    ),
    # llama.cpp: the error event inside a 200 stream (no status of its own)
    (
        200,
        'error event: {"code":400,"message":"the request exceeds the available context size, try increasing it",'
        '"type":"exceed_context_size_error"}',
    ),
    # TGI: router/src/validation.rs, HTTP 422
    (
        422,
        '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 '
        '`inputs` tokens and 512 `max_new_tokens`","error_type":"validation"}',
    ),
    (
        422,
        '{"error":"Input validation error: `inputs` must have less than 1024 tokens. Given: 2000",'
        '"error_type":"validation"}',
    ),
    # SGLang: srt/managers/tokenizer_manager.py
    (
        400,
        '{"object":"error","message":"The input (43028 tokens) is longer than the model\'s context length '
        '(40960 tokens).","type":"BadRequestError","param":null,"code":400}',
    ),
    (
        400,
        "Requested token count exceeds the model's maximum context length of 64000 tokens. You requested a total "
        "of 71897 tokens: 7897 tokens from the input messages and 64000 tokens for the completion. Please reduce "
        "the number of tokens in the input messages or the completion to fit within the limit.",
    ),
]


@pytest.mark.parametrize("status,text", OVERLONG_REPLIES)
def test_each_servers_overlong_wording_is_overlong(status, text):
    assert cause_of(status, text) == OVERLONG
    assert cause_of(status, f"HTTP {status}: {text}") == OVERLONG  # as the client writes it


@pytest.mark.parametrize(
    "status,text",
    [
        (429, ""),
        (503, ""),
        (429, '{"error":"Model is overloaded","error_type":"overloaded"}'),  # TGI, router/src/infer/mod.rs
        (503, '{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'),  # llama-server
        (500, "the server is busy, try again later"),
        (None, "Too Many Requests"),
    ],
)
def test_429_503_and_busy_texts_are_overloaded(status, text):
    assert cause_of(status, text) == OVERLOADED


@pytest.mark.parametrize(
    "status,text",
    [
        (
            500,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.20 GiB is free.",
        ),
        (500, '{"error":{"code":500,"message":"out of memory","type":"server_error"}}'),
        (500, "worker died: OOM"),
        (200, "stream error: CUDA out of memory"),  # an error event inside a 200 stream
        (503, "CUDA out of memory"),  # the more specific cause wins over the status
    ],
)
def test_out_of_memory_in_a_5xx_is_oom(status, text):
    assert cause_of(status, text) == OOM


@pytest.mark.parametrize(
    "status,text",
    [
        (400, '{"error":{"message":"temperature must be non-negative","type":"BadRequestError"}}'),
        (404, "Not Found"),
        (500, "Internal Server Error"),
        (400, "request asks for an image out of memory bounds"),  # a 4xx is the client's: never oom
        (500, "room temperature"),  # "oom" inside a word is not OOM
        (None, None),
        (None, ""),
    ],
)
def test_unknown_failures_have_no_cause(status, text):
    assert cause_of(status, text) is None


def test_normalise_replaces_numbers_keeps_status():
    a = normalise("HTTP 400: request (1500 tokens) exceeds the available context size (1024 tokens)")
    b = normalise("HTTP 400: request (37 tokens) exceeds the available context size (1024 tokens)")
    assert a == b == "HTTP 400: request (N tokens) exceeds the available context size (N tokens)"
    assert normalise("took 1.25 s, 1,024 tokens") == "took N s, N tokens"
    assert normalise(None) == ""


def _rec(i: int, outcome=Outcome.HTTP_ERROR, status=400, error=None, cause=None) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        api="openai-chat",
        t_sched=0.0,
        t_sent=0.0,
        wall_sent=1000.0 + i,
        t_end=0.1,
        outcome=outcome,
        status=status,
        error=error,
        cause=cause,
    )


def test_record_cause_defaults_to_none():
    assert _rec(0).cause is None


def test_aggregate_counts_and_merges_causes():
    a, b = Aggregate(), Aggregate()
    for i in range(3):
        a.add(_rec(i, error=f"HTTP 400: request ({1000 + i} tokens) exceeds", cause=OVERLONG))
    a.add(_rec(3, status=429, error="HTTP 429: busy", cause=OVERLOADED))
    a.add(_rec(4, status=500, error="HTTP 500: ?"))  # no cause: counted by kind only
    a.add(_rec(5, outcome=Outcome.CANCELLED, status=None, error="cancelled", cause=OVERLOADED))  # not a failure
    ok = _rec(6, outcome=Outcome.OK, status=200)
    ok.t_first, ok.chunk_times, ok.chunk_tokens, ok.n_out = 0.05, [0.05], [1], 1
    a.add(ok)
    b.add(_rec(7, status=500, error="HTTP 500: CUDA out of memory", cause=OOM))
    b.add(_rec(8, error="HTTP 400: maximum context length", cause=OVERLONG))
    assert figures(a)["causes"] == {OVERLONG: 3, OVERLOADED: 1}
    assert figures(a)["errors"]["http_error"]  # failures by kind stay as they were

    m = Aggregate()
    m.merge_wire(a.to_wire())
    m.merge_wire(b.to_wire())
    fig = figures(m)
    assert fig["causes"] == {OVERLONG: 4, OVERLOADED: 1, OOM: 1}
    assert list(fig["causes"]) == [OVERLONG, OOM, OVERLOADED]  # most first, then by name
    assert fig["failed"] == 7 and sum(fig["causes"].values()) <= fig["failed"]
    assert set(fig["causes"]) <= set(CAUSES)


def test_summary_prints_causes():
    a = Aggregate()
    for i in range(37):
        a.add(_rec(i, error="HTTP 400: exceeds the available context size", cause=OVERLONG))
    for i in range(2):
        a.add(_rec(100 + i, status=503, error="HTTP 503: Loading model", cause=OVERLOADED))
    text = format_summary(figures(a))
    assert "causes: overlong 37, overloaded 2" in text
    assert "causes:" not in format_summary(figures(Aggregate()))


# ---- Locust's failure table, driven through account() ----


def _llama_400(n: int) -> str:
    return (
        f'HTTP 400: {{"error":{{"code":400,"message":"request ({n} tokens) exceeds the available context size '
        f'(1024 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":{n},'
        f'"n_ctx":1024}}}}'
    )


def test_locust_failure_rows_collapse_while_records_keep_the_exact_words():
    from locust.env import Environment

    from llm_locust.runtime.hub import hub
    from llm_locust.runtime.send import account

    env = Environment()
    env.create_local_runner()  # its request listener fills env.stats, Locust's own table
    fired = []
    env.events.request.add_listener(lambda **kw: fired.append(kw))
    counts = [1100 + 37 * i for i in range(37)]
    recs = []
    for i, n in enumerate(counts):
        rec = _rec(i, error=_llama_400(n))
        account(env, rec)
        recs.append(rec)
    for i in range(2):
        rec = _rec(
            100 + i,
            status=503,
            error='HTTP 503: {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}',
        )
        account(env, rec)
        recs.append(rec)
    other = _rec(200, status=400, error="HTTP 400: temperature must be non-negative")
    account(env, other)

    # our record keeps the server's exact words, with the cause beside them
    assert [r.error for r in recs[:37]] == [_llama_400(n) for n in counts]
    assert {r.cause for r in recs[:37]} == {OVERLONG}
    assert {r.cause for r in recs[37:]} == {OVERLOADED}
    assert other.cause is None

    # Locust: one row per cause and message shape, not one per token count
    rows = {str(e.error): e.occurrences for e in env.stats.errors.values()}
    assert len(rows) == 3, rows
    overlong_row = next(k for k in rows if "overlong" in k)
    assert rows[overlong_row] == 37
    assert overlong_row.startswith("http_error: overlong: HTTP 400: ")
    assert "request (N tokens) exceeds the available context size (N tokens)" in overlong_row
    assert rows[next(k for k in rows if "overloaded" in k)] == 2
    assert rows["http_error: HTTP 400: temperature must be non-negative"] == 1
    assert len(fired) == 40 and all(kw["exception"] is not None for kw in fired)

    # and the figures count failures by cause beside failures by kind
    fig = figures(hub(env).total)
    assert fig["causes"] == {OVERLONG: 37, OVERLOADED: 2}
    assert fig["outcomes"]["http_error"] == 40


def test_account_leaves_ok_and_cancelled_without_a_cause():
    from locust.env import Environment

    from llm_locust.runtime.send import account

    env = Environment()
    fired = []
    env.events.request.add_listener(lambda **kw: fired.append(kw))
    ok = _rec(0, outcome=Outcome.OK, status=200)
    cancelled = _rec(1, outcome=Outcome.CANCELLED, status=None, error="cancelled: server is busy")
    account(env, ok)
    account(env, cancelled)
    assert ok.cause is None and cancelled.cause is None
    assert len(fired) == 1 and fired[0]["exception"] is None
