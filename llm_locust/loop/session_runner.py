"""Sessions under load: turn after turn, subagents in parallel, capped gaps, the ideal cache reuse.

`SessionRunner.run(session)` sends a session's turns one after the other through the `send`
callable its owner gives it (the closed-loop user's or the open-loop dispatcher's: they route,
account and count), one `SessionRequest` a turn. Each turn goes out after the previous reply plus
its gap (the trace's tool or think time, capped by --max-idle, divided by the replay speed) plus
--think-time, and, when the trace gives the turn a time, not before it. Subagent sessions spawned
by a turn start when its reply is in, run as greenlets of their own, and the parent's next turn
waits for all of them; a session that ends (or fails, or is stopped) takes its subagents with
it. A failed turn ends its session: an agent cannot go on without the reply.

What a turn sends (workload.sessions): in history mode the conversation so far, each reply as
the server wrote it, plus the new message (its text, or synthesised tokens; a tool result for
role "tool", sent as a user message since servers refuse a tool message without a tool call);
in block mode the turn's own prompt of hash blocks. With --cache-bust (the default) the first
message of each session starts with a marker unique to the run (and, in history mode, to the
session), so no server holds a prefix from an earlier run; block-mode sessions share their marker
within the run, so the blocks they share stay shared.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.pool

from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols import CHAT_APIS
from llm_locust.protocols.base import RequestSpec
from llm_locust.workload import load_trace
from llm_locust.workload.agentic import detect_sessions, is_session_format, load_sessions
from llm_locust.workload.agentic.hcua import common_prefix_chars
from llm_locust.workload.cancel import CancelPlan, process_plan
from llm_locust.workload.prompts import PromptBuilder
from llm_locust.workload.routing import ModelSplit, Router
from llm_locust.workload.sessions import IdealCache, Session, SessionTrace, Turn, sessions_from_trace
from llm_locust.workload.specs import SpecBuilder
from llm_locust.workload.trace_record import TraceRecord


@dataclass(frozen=True)
class SessionRequest:
    """One turn's request, as a session hands it to its owner's send (the closed-loop user's or
    the open-loop dispatcher's), which routes, sends and accounts it: what the turn sends and
    the facts its record carries."""

    spec: RequestSpec  # what the turn sends
    t_sched: float  # perf_counter time it was due (after the previous reply, its gap, the trace's time)
    source: str  # the turn's "file:line" in the trace
    session: str  # the session's id: router affinity, session headers, the record's session
    ideal: int  # prompt tokens an unbounded prefix cache could serve (IdealCache, _history_ideal)
    keep_text: bool  # keep the reply's text: the next turn sends it back as history


# A session's sender: one turn's request -> its finished, accounted record
Send = Callable[[SessionRequest], RequestRecord]


def sleep_until(deadline: float) -> None:
    """Sleep to a perf_counter deadline. gevent timers run on a cached loop clock and can fire
    a few ms early, so re-check the real clock and finish the last millisecond with yields."""
    perf = time.perf_counter
    while True:
        dt = deadline - perf()
        if dt <= 0:
            return
        gevent.sleep(dt - 0.001 if dt > 0.002 else 0)


class SessionRunner:
    """Runs sessions of one process's share. One per process; `run` may be called from many
    greenlets at once (each session keeps its own state)."""

    def __init__(
        self,
        trace: SessionTrace,
        builder,
        settings,
        *,
        nonce: str,
        speed: float = 1.0,
        model_for: Callable[[Session], str | None] | None = None,
    ) -> None:
        self.trace = trace
        self.builder = builder  # workload.specs.SpecBuilder
        self.settings = settings
        self.nonce = nonce
        self.speed = speed
        self.model_for = model_for or (lambda s: None)
        self.ideal = IdealCache()
        self.max_idle = float(getattr(settings, "max_idle", 0.0) or 0.0)
        self.think = float(getattr(settings, "think_time", 0.0) or 0.0)
        self.cache_bust = bool(getattr(settings, "cache_bust", True))
        self.sessions_started = 0
        self.sessions_done = 0  # ended with every turn ok
        self.sessions_broken = 0  # ended early: a turn failed

    def counts(self) -> dict[str, int]:
        return {"started": self.sessions_started, "done": self.sessions_done, "broken": self.sessions_broken}

    # ---- timing ----

    def wait_after_reply(self, turn: Turn) -> float:
        gap = turn.gap / self.speed
        if self.max_idle:
            gap = min(gap, self.max_idle)
        return gap + self.think

    # ---- one session ----

    def run(
        self,
        session: Session,
        send: Send,
        t_start: float | None = None,
        start_turn: int = 0,
        model: str | None = None,
        timed: bool = True,
    ) -> bool:
        """Send `session` from `start_turn` (earlier turns become history: mid-trajectory start);
        True when every turn got its reply. `t_start`: perf_counter time of its first turn;
        `timed`: keep the trace's turn times (open loop; the closed loop sends after replies and gaps)."""
        self.sessions_started += 1
        instance = f"{session.id}.{self.sessions_started}"  # a session sent again (closed loop, loops) starts cold
        t0 = time.perf_counter() if t_start is None else t_start
        trace_model = session.model if getattr(self.settings, "trace_models", False) else None
        model = model or trace_model or self.model_for(session)
        kids = gevent.pool.Group()
        history: list[dict[str, Any]] = []
        ctx_tokens = 0  # tokens of the previous prompt and its reply (history mode)
        prev_in = 0  # tokens of the previous prompt alone
        ready = t0
        outcome = None  # True: every turn answered; False: a turn failed; None: stopped
        try:
            if start_turn:
                history = self._made_up_history(session, instance, start_turn)  # never sent: nothing to reuse
            for k in range(start_turn, len(session.turns)):
                turn = session.turns[k]
                t_due = ready
                if timed and turn.at is not None:
                    t_due = max(t_due, t0 + (turn.at - session.start) / self.speed)
                sleep_until(t_due)
                spec, n_prompt_est, new = self._spec(session, instance, k, turn, history, model, first=(k == 0))
                if turn.hash_ids is not None:
                    bs = self.trace.block_size or 1
                    ideal = self.ideal.blocks(turn.hash_ids, bs, turn.input_tokens or len(turn.hash_ids) * bs)
                else:
                    ideal = _history_ideal(turn, spec, history, ctx_tokens, prev_in)
                # only a history-mode turn with a turn after it needs its reply's text: keeping it
                # costs every token a copy (and SGLang's cumulative events a whole parse)
                keep_text = turn.hash_ids is None and k + 1 < len(session.turns)
                req = SessionRequest(spec, t_due, turn.source, session.id, ideal=ideal, keep_text=keep_text)
                rec = send(req)
                if not rec.ok:
                    outcome = False
                    return False
                if turn.hash_ids is None:
                    history = list(spec.messages) if spec.messages is not None else history + new
                    history.append({"role": "assistant", "content": rec.text or ""})
                    prev_in = rec.n_in if rec.n_in is not None else n_prompt_est
                    ctx_tokens = prev_in + rec.n_out
                for cid in turn.children:
                    child = self.trace.sessions.get(cid)
                    if child is not None:
                        kids.spawn(
                            self.run,
                            child,
                            send,
                            time.perf_counter() + self.wait_after_reply(child.turns[0]),
                            0,
                            model,
                            timed,
                        )
                kids.join()  # the next turn needs every subagent's result
                if k + 1 < len(session.turns):
                    ready = time.perf_counter() + self.wait_after_reply(session.turns[k + 1])
            outcome = True
            return True
        finally:
            kids.kill()  # stopped or failed: subagents end with their parent
            if outcome is True:
                self.sessions_done += 1
            elif outcome is False:
                self.sessions_broken += 1

    # ---- what a turn sends ----

    def _marker(self, session: Session, instance: str) -> str:
        if not self.cache_bust:
            return ""
        if session.block_mode:
            return f"[run {self.nonce}]\n"
        return f"[run {self.nonce} session {instance}]\n"

    def _new_content(self, session: Session, k: int, turn: Turn) -> str:
        if turn.text is not None:
            content = turn.text
        else:
            key = turn.source or f"{session.id}/{k}"
            content = self.builder.prompts.build(max(1, turn.new_tokens or 1), key=key).content
        if turn.role == "tool":
            content = "Tool result:\n" + content
        return content

    def _spec(
        self, session: Session, instance: str, k: int, turn: Turn, history: list[dict[str, Any]], model, first: bool
    ) -> tuple[RequestSpec, int, list[dict[str, Any]]]:
        """The request of turn k, our estimate of its prompt tokens, and its new messages."""
        b = self.builder
        # a whole-request turn repeats the first message: the marker goes on each
        marker = self._marker(session, instance) if first or turn.whole else ""
        if turn.hash_ids is not None:
            marker = self._marker(session, instance)  # every whole prompt starts the same way, so blocks stay shared
            entry = TraceRecord(
                turn.at or 0.0,
                turn.input_tokens or turn.new_tokens,
                turn.output_tokens,
                hash_ids=turn.hash_ids,
                block_size=self.trace.block_size,
                source=turn.source,
            )
            spec = b.spec(entry, model)
            if marker:
                _prepend(spec, marker)
            return spec, entry.input_tokens or 0, []
        if turn.messages is not None:
            new = [dict(m) for m in turn.messages]
        else:
            new = [{"role": "user", "content": self._new_content(session, k, turn)}]
        if marker:
            c = new[0].get("content")
            new[0]["content"] = marker + c if isinstance(c, str) else [{"type": "text", "text": marker}] + list(c or [])
        if turn.whole:
            history = []  # the turn's messages are its whole request (the trace's own history)
        est = sum(_tokens_of(m) for m in history) + sum(_tokens_of(m) for m in new)
        if turn.new_tokens is not None and turn.text is None and turn.messages is None:
            est += turn.new_tokens - _tokens_of(new[-1])
        if b.chat:
            entry = TraceRecord(turn.at or 0.0, None, turn.output_tokens, messages=new, source=turn.source)
            spec = b.spec(entry, model, history or None)
        else:
            text = "".join(_text_of(m) for m in history + new)
            spec = b.spec(TraceRecord(turn.at or 0.0, None, turn.output_tokens, prompt=text, source=turn.source), model)
        return spec, est, new

    def _made_up_history(self, session: Session, instance: str, upto: int) -> list[dict[str, Any]]:
        """The messages of turns before `upto`, replies synthesised at their trace lengths."""
        history: list[dict[str, Any]] = []
        for k in range(upto):
            t = session.turns[k]
            if t.hash_ids is not None:
                return []
            content = (self._marker(session, instance) if k == 0 else "") + self._new_content(session, k, t)
            reply_n = max(1, t.output_tokens or 16)
            reply = self.builder.prompts.build(reply_n, key=f"{t.source or session.id}/{k}#reply").content
            history += [{"role": "user", "content": content}, {"role": "assistant", "content": reply}]
        return history


def _history_ideal(turn: Turn, spec: RequestSpec, history: list[dict[str, Any]], ctx_tokens: int, prev_in: int) -> int:
    """A history-mode turn's ideal cached tokens: the previous prompt and its reply, which it repeats
    word for word; for a whole-request turn (the trace's own messages, not the server's reply), the
    part of the previous prompt it repeats: that prompt's tokens times the share of its text the two
    requests have in common from the start."""
    if not turn.whole or not history:
        return ctx_tokens
    prev = [_text_of(m) for m in history[:-1]]  # the previous request, without the reply appended to it
    total = sum(len(t) for t in prev)
    if not total:
        return 0
    return round(prev_in * common_prefix_chars(prev, [_text_of(m) for m in spec.messages or []]) / total)


def _prepend(spec: RequestSpec, marker: str) -> None:
    if spec.messages:
        first = dict(spec.messages[0])
        c = first.get("content")
        if isinstance(c, str):
            first["content"] = marker + c
        elif isinstance(c, list):
            first["content"] = [{"type": "text", "text": marker}] + list(c)
        spec.messages = [first] + list(spec.messages[1:])
    elif spec.prompt is not None:
        spec.prompt = marker + spec.prompt


def _estimate(text: str, known: int | None) -> int:
    return known if known is not None else max(1, round(len(text.split()) * 1.3))


def _tokens_of(m: dict[str, Any]) -> int:
    return _estimate(_text_of(m), None)


def _text_of(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


@dataclass
class LoadSetup:
    """What one process sends its load with, made once (`set_up_load`) by whichever loop runs it:
    the closed loop's users (runtime/closed_loop.py UsersState) or the open-loop dispatcher
    (runtime/dispatcher.py Dispatcher._prepare). Both draw from the same seeds, so a ladder and a
    replay of one trace build the same prompts, split the same models and route alike."""

    builder: SpecBuilder  # trace records -> RequestSpecs (prompts of exact length)
    model_split: ModelSplit | None  # --model a:0.7,b:0.3: which model each request or session asks for
    router: Router | None  # several --endpoints: which one each request goes to
    runner: SessionRunner | None  # a session workload's turns (None: a trace of single records)
    cancel: CancelPlan | None  # --cancel: this process's seeded plan, set on its HTTP clients

    def status_sources(self) -> dict[str, Callable[[], Any]]:
        """What the live status shows of it: the endpoints' and the sessions' counts."""
        out: dict[str, Callable[[], Any]] = {}
        if self.router is not None:
            out["endpoints"] = self.router.status
        if self.runner is not None:
            out["sessions"] = self.runner.counts
        return out


def set_up_load(
    settings,
    work: Any,
    index: int,
    urls: list[str],
    *,
    model_for: Callable[[Session], str | None],
    speed: float = 1.0,
) -> LoadSetup:
    """One process's LoadSetup for `work` (load_workload's: a Trace or a SessionTrace), process
    `index` of the run (a worker's index, a replay's share), the run's endpoints `urls` (a router
    when there are several), `model_for` a session's model, `speed` its gaps' divisor (a replay's)."""
    s = settings
    seed = s.seed * 1_000_003 + index  # per process, seeded: the split's and the router's draws
    chat = s.api in CHAT_APIS
    builder = SpecBuilder(s, PromptBuilder(tokenizer=s.tokenizer_obj(), seed=s.seed, chat=chat), chat)
    split = s.model_split
    runner = None
    if isinstance(work, SessionTrace):
        runner = SessionRunner(work, builder, s, nonce=run_nonce(s.seed), speed=speed, model_for=model_for)
    return LoadSetup(
        builder=builder,
        model_split=ModelSplit(split, seed=seed) if len(split) > 1 else None,
        router=Router(urls, s.route, seed=seed) if len(urls) > 1 else None,
        runner=runner,
        cancel=process_plan(s.cancel, s.seed, index),
    )


def run_nonce(seed: int) -> str:
    """A marker unique to this run (its start time and a random draw), the same on every worker
    only by chance: sessions live on one worker, so uniqueness per process is what matters."""
    return f"{int(time.time()):x}{random.SystemRandom().getrandbits(24):06x}"


def pick_start_turn(session: Session, rng: random.Random) -> int:
    """Mid-trajectory start: a turn drawn uniformly (the first included) for a history-mode session."""
    if not session.turns or session.block_mode or len(session.turns) == 1:
        return 0
    return rng.randrange(len(session.turns))


def load_workload(path: str, fmt: str | None = None, share: tuple[int, int] | None = None):
    """The workload of a trace file: a SessionTrace for session formats and for traces with
    conversations (a conversation's turns go out in order, each after the previous reply, in the
    closed loop too), else the Trace itself."""
    if fmt and is_session_format(fmt) or (not fmt and detect_sessions(path)):
        return load_sessions(path, fmt or None, share=share)
    trace = load_trace(path, fmt or None, share=share)
    if "conversation_id" in trace.columns and trace.conversations():
        return sessions_from_trace(trace)
    return trace
