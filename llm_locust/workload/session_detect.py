"""Is this file a session trace? From its first bytes only, with no other import of the package:
the request formats' detection (workload.formats.detect) asks it first, so a session trace is
never misread as single requests, and workload.agentic uses the same answer."""

from __future__ import annotations

import re

import orjson

_SGLANG_HEAD = re.compile(r'"conversations"\s*:\s*\[\s*\[')
_WEKA_HEAD = (re.compile(r'"requests"\s*:\s*\['), re.compile(r'"block_size"\s*:'), re.compile(r'"id"\s*:'))
_DAG_TOP = ("orchestrator", "pre_session_spawns", "context_mode")
_TRACELAB = frozenset({"session_id", "round_index", "input_tokens_total", "prefix_tokens"})
_TRACELAB_CSV = frozenset({"round_idx", "prefix_len", "input_len", "output_len"})
_HCUA = frozenset({"session_id", "messages", "output_length"})
_CODEX_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot"})
_MOONCAKE_KEYS = frozenset({"input_length", "text_input", "timestamp", "hash_ids"})


def detect_head(head: str) -> str | None:
    """The session format of a file from its first bytes (`Source.head`), or None."""
    text = head.lstrip()
    if not text.startswith("{"):
        cols = {c.strip() for c in text.split("\n", 1)[0].split(",")}
        return "tracelab-csv" if _TRACELAB_CSV <= cols and cols & {"id", "session_id"} else None
    first = text.split("\n", 1)[0].strip()
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:
        if _SGLANG_HEAD.search(text):
            return "sglang-agentic"
        if all(r.search(text) for r in _WEKA_HEAD):
            return "weka"
        return None
    if type(obj) is not dict:
        return None
    agent = _agent_trace(obj)
    if agent is not None:
        return agent
    if "session" in obj and "session_id" not in obj:
        return "llm-locust-sessions"
    if {"id", "requests", "block_size"} <= obj.keys() and type(obj["requests"]) is list:
        return "weka"
    conv = obj.get("conversations")
    if type(conv) is list and conv and type(conv[0]) is list:
        return "sglang-agentic"
    turns = obj.get("turns")
    if type(turns) is list:
        if any(k in obj for k in _DAG_TOP):
            return "aiperf-dag"
        t0 = turns[0] if turns else None
        if (
            type(t0) is dict
            and ("messages" in t0 or "spawns" in t0 or "forks" in t0)
            and "text" not in t0
            and "texts" not in t0
        ):
            return "aiperf-dag"
    return None


def _agent_trace(obj: dict) -> str | None:
    """Coding-agent and computer-use traces (TraceLab, H CUA Perf, Claude Code and Codex logs)."""
    keys = obj.keys()
    if _TRACELAB <= keys:
        return "tracelab"
    if {"timestamp", "type", "payload"} <= keys and obj["type"] in _CODEX_TYPES:
        return "codex"
    if obj.get("type") in _CLAUDE_TYPES and ("sessionId" in keys or "leafUuid" in keys or "snapshot" in keys):
        return "claude-code"
    if _HCUA <= keys and not keys & _MOONCAKE_KEYS and type(obj["messages"]) is list:
        return "h-cua-perf"
    return None
