"""Trace format registry and detection from content (CSV header columns, JSON keys)."""

from __future__ import annotations

import csv

import orjson

from llm_locust.workload.formats import (
    aiperf,
    azure,
    bailian,
    burstgpt,
    guidellm,
    jsonl,
    mooncake,
    sharegpt,
    splitwise,
    vllm,
)
from llm_locust.workload.formats.reader import Context, Format, Source, TraceError
from llm_locust.workload.session_detect import detect_head

_ALL: tuple[Format, ...] = (
    jsonl.FORMAT,
    *azure.FORMATS,
    burstgpt.FORMAT,
    mooncake.FORMAT,
    bailian.FORMAT,
    *aiperf.FORMATS,
    sharegpt.FORMAT,
    vllm.FORMAT,
    guidellm.FORMAT,
    splitwise.FORMAT,
)
REGISTRY: dict[str, Format] = {f.name: f for f in _ALL}
FORMATS: tuple[str, ...] = tuple(REGISTRY)

ALIASES = {
    "ours": "jsonl",
    "llm-locust": "jsonl",
    "azure": "azure2023",
    "mooncake-trace": "aiperf-mooncake",
    "multi-turn": "aiperf-multi-turn",
    "genai-perf": "aiperf-mooncake",
    "bailian-trace": "bailian",
    "qwen": "bailian",
    "burstgpt-v1": "burstgpt",
    "burstgpt-v2": "burstgpt",
    "vllm-custom": "vllm",
}

# CSV formats and the header columns that identify them
_CSV_SIGNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("azure2025", azure.REQUIRED_2025),
    ("azure2023", azure.REQUIRED),
    ("burstgpt", burstgpt.REQUIRED),
    ("splitwise", splitwise.REQUIRED),
    ("guidellm", ("prompt",)),
)


def get(name: str) -> Format:
    key = name.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    try:
        return REGISTRY[key]
    except KeyError:
        raise TraceError(f"unknown trace format {name!r}; known formats: {', '.join(FORMATS)}") from None


def detect(head: str, name: str) -> Format:
    """The format of a file from its first bytes (`Source.head`)."""
    text = head.lstrip()
    if not text:
        raise TraceError(f"{name}: empty trace file")
    session = detect_head(head)
    if session is not None:  # never misread as requests: a run reads it with load_sessions
        raise TraceError(
            f"{name}: a session trace ({session}), not a trace of single requests; "
            "llm-locust run replays it as sessions (docs/agentic.md)"
        )
    lineno = head[: len(head) - len(text)].count("\n") + 1
    if text[0] == "[":
        if '"conversations"' in text[:HEAD_SCAN] or text[1:].lstrip().startswith("]"):
            return sharegpt.FORMAT
        raise TraceError(
            f"{name}:{lineno}: a JSON array that is not ShareGPT (no 'conversations'); "
            "other formats are JSON Lines (one object per line)"
        )
    first = text.split("\n", 1)[0].strip()
    if text[0] == "{":
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError as e:
            if '"conversations"' in text[:HEAD_SCAN]:
                return sharegpt.FORMAT  # a pretty-printed object
            raise TraceError(f"{name}:{lineno}: invalid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{name}:{lineno}: expected a JSON object")
        return _detect_json(set(obj), name, lineno)
    try:
        header = [h.strip() for h in next(csv.reader([first]), [])]
    except csv.Error as e:
        raise TraceError(
            f"{name}:{lineno}: unknown trace format; the first line is not a CSV header ({e}): {first[:80]!r}"
        ) from None
    return _detect_csv(header, text, name, lineno)


HEAD_SCAN = 4096


def _detect_json(keys: set[str], name: str, lineno: int) -> Format:
    if "conversations" in keys:
        return sharegpt.FORMAT
    if "chat_id" in keys and "parent_chat_id" in keys:
        return bailian.FORMAT
    if "turns" in keys:
        return aiperf.MULTI_TURN
    if "input_length" in keys or "text_input" in keys:
        if keys & {"session_id", "text_input", "delay"} or "timestamp" not in keys:
            return aiperf.MOONCAKE_TRACE
        return mooncake.FORMAT
    if keys & {"prompt_tokens_count", "output_tokens_count"}:
        return guidellm.FORMAT
    if "prompt" in keys and keys <= {"prompt", "output_tokens"}:
        return vllm.FORMAT
    if keys & set(jsonl.KEYS):
        return jsonl.FORMAT
    raise TraceError(
        f"{name}:{lineno}: unknown JSON trace format; keys found: {', '.join(sorted(keys)) or '(none)'}; "
        "expected our JSONL (timestamp, input_tokens, output_tokens, prompt|messages, ...), "
        "Mooncake (timestamp, input_length, output_length, hash_ids), Bailian (chat_id, parent_chat_id, ...), "
        "AIPerf (input_length|text_input / turns), vLLM ({prompt}) or GuideLLM (prompt, *_tokens_count)"
    )


def _detect_csv(header: list[str], text: str, name: str, lineno: int) -> Format:
    cols = set(header)
    for fmt, need in _CSV_SIGNS:
        if cols.issuperset(need):
            if fmt == "azure2023":
                return REGISTRY[_azure_year(header, text)]
            return REGISTRY[fmt]
    # nothing matches: name the closest format and what it misses
    best, best_score = None, (0, 0)
    for fmt, need in _CSV_SIGNS:
        hits = len(cols & set(need))
        score = (hits, hits - len(need))  # most columns found, then fewest missing
        if hits and score > best_score:
            best, best_score = (fmt, need), score
    found = ", ".join(header) or "(none)"
    if best is not None:
        fmt, need = best
        missing = ", ".join(c for c in need if c not in cols)
        raise TraceError(
            f"{name}:{lineno}: looks like a {fmt} trace but column(s) {missing} are missing (renamed?); found: {found}"
        )
    raise TraceError(
        f"{name}:{lineno}: unknown trace format; header columns found: {found}; known CSV formats: "
        + "; ".join(f"{fmt} ({', '.join(need)})" for fmt, need in _CSV_SIGNS)
    )


def _azure_year(header: list[str], text: str) -> str:
    lines = text.split("\n", 2)
    if len(lines) < 2:
        return "azure2023"
    row = lines[1].split(",")
    i = header.index("TIMESTAMP")
    return azure._detect_year(row[i]) if i < len(row) else "azure2023"


__all__ = ["FORMATS", "REGISTRY", "ALIASES", "Format", "Context", "Source", "TraceError", "get", "detect"]
