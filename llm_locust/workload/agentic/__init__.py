"""Session traces: the agentic and multi-turn formats read into `workload.sessions.SessionTrace`.

    SESSION_FORMATS                                   names --trace-format takes for them
    detect_sessions(path) -> str | None              the session format of a file, or None
    load_sessions(path, fmt=None, *, share=None)     -> SessionTrace (TraceError names file:line)

Formats (one module each; docs/agentic.md, section Formats):

    llm-locust-sessions   ours.py               our session JSONL, one turn per line
    aiperf-dag            aiperf_dag.py         AIPerf's agentic DAG JSONL (session_id, turns with spawns/forks)
    weka                  weka.py               WEKA / SemiAnalysis agentic coding traces (inference-perf, AIPerf)
    sglang-agentic        sglang_sessions.py    SGLang's agentic trace (conversations of message deltas)
    mooncake-sessions     mooncake_sessions.py  Mooncake conversation trace, sessions by prefix chaining
    mooncake-toolagent    mooncake_sessions.py  the same, later turns as tool results (toolagent_trace)
    tracelab              tracelab.py           TraceLab's round trace (Claude Code / Codex sessions, uw-syfi)
    tracelab-csv          tracelab.py           TraceLab's multi-round CSV (its exporter's, its session runner's)
    h-cua-perf            hcua.py               H Company's computer-use agent traces (H CUA Perf, as AIPerf replays)
    claude-code           agent_logs.py         a Claude Code session log (~/.claude/projects/*/<uuid>.jsonl)
    codex                 agent_logs.py         a Codex session log (~/.codex/sessions/**/rollout-*.jsonl)

Detection (`detect_sessions`) reads the head of the file and claims only what no request-level
format can read correctly:

- first non-blank line a JSON object with ``session`` (and not ``session_id``): llm-locust-sessions;
- ``id``, ``requests`` and ``block_size``: weka (also a pretty-printed single object, by its head);
- ``conversations`` holding a list of lists (not ShareGPT's list of objects): sglang-agentic;
- ``turns`` whose first turn has ``messages``/``spawns``/``forks``, or ``orchestrator``,
  ``pre_session_spawns``, ``context_mode`` at the top: aiperf-dag. Plain AIPerf multi_turn (turns
  with ``text``/``texts``) stays the request format ``aiperf-multi-turn``.
- ``session_id``, ``round_index``, ``input_tokens_total``, ``prefix_tokens``: tracelab; a CSV header
  with ``round_idx``, ``prefix_len``, ``input_len``, ``output_len`` and ``id``/``session_id``:
  tracelab-csv;
- ``session_id``, ``messages`` and ``output_length`` with none of Mooncake's keys (``input_length``,
  ``text_input``, ``timestamp``, ``hash_ids``): h-cua-perf;
- ``timestamp``, ``type``, ``payload`` with a Codex record type: codex; a Claude Code record type
  (``user``, ``assistant``, ``summary``, ...) with ``sessionId``/``leafUuid``/``snapshot``: claude-code.
- Mooncake traces are never claimed (their lines are the request format ``mooncake``).

The request-level `formats.detect` would read some of these files as its own (``session`` lines and
WEKA objects carry keys of our request JSONL, an SGLang trace has ``conversations`` like ShareGPT,
a DAG line has ``turns`` like multi_turn), wrongly: a caller asks `detect_sessions` first, and the
session format wins. A file no session format claims loads through `load_trace` and
`sessions_from_trace` (its conversations as sessions), as does any request format named in `fmt`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from llm_locust.workload.agentic import (
    agent_logs,
    aiperf_dag,
    hcua,
    mooncake_sessions,
    ours,
    sglang_sessions,
    tracelab,
    weka,
)
from llm_locust.workload.formats import get
from llm_locust.workload.formats.reader import Context, Source, TraceError
from llm_locust.workload.load import _check_share, load_trace
from llm_locust.workload.paths import trace_file_problem
from llm_locust.workload.sessions import SessionBuilder, SessionTrace, sessions_from_trace

Reader = Callable[[Source, Context, SessionBuilder], "int | None"]

_READERS: dict[str, Reader] = {
    ours.NAME: ours.read,
    aiperf_dag.NAME: aiperf_dag.read,
    weka.NAME: weka.read,
    sglang_sessions.NAME: sglang_sessions.read,
    mooncake_sessions.NAME: mooncake_sessions.read_as(mooncake_sessions.NAME),
    mooncake_sessions.TOOLAGENT: mooncake_sessions.read_as(mooncake_sessions.TOOLAGENT),
    tracelab.NAME: tracelab.read,
    tracelab.CSV_NAME: tracelab.read_csv,
    hcua.NAME: hcua.read,
    agent_logs.CLAUDE: agent_logs.read_claude,
    agent_logs.CODEX: agent_logs.read_codex,
}
SESSION_FORMATS: tuple[str, ...] = tuple(_READERS)
ALIASES = {
    "sessions": ours.NAME,
    "llm-locust-session": ours.NAME,
    "aiperf-dag-jsonl": aiperf_dag.NAME,
    "dag-jsonl": aiperf_dag.NAME,
    "weka-trace": weka.NAME,
    "weka-trace-replay": weka.NAME,
    "semianalysis-weka": weka.NAME,
    "sglang-agentic-trace": sglang_sessions.NAME,
    "agentic-trace": sglang_sessions.NAME,
    "mooncake-conversation": mooncake_sessions.NAME,
    "mooncake-tool-agent": mooncake_sessions.TOOLAGENT,
    "syfi": tracelab.NAME,
    "tracelab-trace": tracelab.NAME,
    "h-cua": hcua.NAME,
    "hcua": hcua.NAME,
    "claude": agent_logs.CLAUDE,
    "codex-session": agent_logs.CODEX,
}


def _name(fmt: str) -> str:
    key = fmt.strip().lower().replace("_", "-")
    return ALIASES.get(key, key)


from llm_locust.workload.session_detect import detect_head  # noqa: E402 - shared with formats.detect


def is_session_format(fmt: str) -> bool:
    """`fmt` names a session format (or one of its aliases)."""
    return _name(fmt) in _READERS


def detect_sessions(path: str | Path) -> str | None:
    """The session format of a file (by content), or None: a request format, or not a trace."""
    name = str(path)
    if not Path(path).is_file():
        raise TraceError(f"{name}: {trace_file_problem(path)}")
    src = Source(Path(path), name)
    try:
        return detect_head(src.head())
    finally:
        src.close()


def load_sessions(path: str | Path, fmt: str | None = None, *, share: tuple[int, int] | None = None) -> SessionTrace:
    """Read a session trace (any of `SESSION_FORMATS`, detected unless `fmt` names one; any request
    format too, its conversations as sessions) into a `SessionTrace`, optionally only worker i's
    `share` (i, k) of the top-level sessions, each with its subagents."""
    name = str(path)
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{name}: {trace_file_problem(p)}")
    share = _check_share(share)
    key = _name(fmt) if fmt else None
    if key is not None and key not in _READERS:
        try:
            get(key)
        except TraceError:
            raise TraceError(
                f"unknown trace format {fmt!r}; session formats: {', '.join(SESSION_FORMATS)}; "
                "or a request format (its conversations as sessions)"
            ) from None
        return sessions_from_trace(load_trace(path, key)).take_share(share)
    src = Source(p, name)
    try:
        if key is None:
            key = detect_head(src.head())
            if key is None:
                src.close()
                return sessions_from_trace(load_trace(path)).take_share(share)
        ctx = Context(name=name)
        b = SessionBuilder(name)
        block_size = _READERS[key](src, ctx, b)
        src.finish()
        if not b.sessions:
            raise TraceError(f"{name}: no sessions in this {key} trace")
        trace = b.finish(path=name, format=key, sha256=src.sha.hexdigest(), block_size=block_size)
    except TraceError:
        src.close()
        raise
    except (
        RecursionError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        OverflowError,
        UnicodeError,
        ArithmeticError,
        LookupError,
        AttributeError,
        OSError,
        EOFError,
    ) as e:
        src.close()
        raise TraceError(
            f"{name}:{src.line or 1}: cannot read this {key} trace: unexpected content near this "
            f"line ({type(e).__name__}: {e})"
        ) from None
    return trace.take_share(share)


__all__ = ["SESSION_FORMATS", "ALIASES", "detect_sessions", "detect_head", "is_session_format", "load_sessions"]
