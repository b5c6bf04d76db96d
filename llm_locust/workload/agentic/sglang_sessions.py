"""SGLang's agentic trace (``sglang-agentic``; sgl-project/sglang,
python/sglang/benchmark/datasets/agentic_trace.py, e.g. OpenHands / SWE-smith traces): one JSON object::

    {"metadata": {...},
     "conversations": [
       [{"messages": [{"role": "system", ...}, {"role": "user", ...}], "prompt_tokens": 73821},
        {"messages": [{"role": "tool", ...}], "prompt_tokens": 74894}, ...],
       ...]}

Mapping: conversation *i* (0-based) is top-level session ``conv-<i>``, starting at 0 (no arrival
times; SGLang replays them under a concurrency limit). A turn's ``messages`` are only the *new*
non-assistant messages (SGLang feeds the server's real replies back into the history), so turns are
history mode: `text` = their text, role "tool" when all of them are tool results.
``prompt_tokens`` is the whole prompt as recorded -> `input_tokens` (informational: the replayed
prompt is the history plus the text). The trace has no output lengths (SGLang uses
--sharegpt-output-len, default 220): output_tokens is left unset. Turns with no messages are skipped,
and so are conversations left with no turns, as SGLang does.

The file is parsed object by object (json's raw_decode on the text) so every error names the line
where the offending turn starts.
"""

from __future__ import annotations

import json

from llm_locust.workload.agentic._common import check_messages, delta_role, message_text
from llm_locust.workload.formats.reader import Context, Source, json_count
from llm_locust.workload.sessions import SessionBuilder, Turn

NAME = "sglang-agentic"
_WS = " \t\r\n"


class _Walk:
    def __init__(self, text: str, ctx: Context) -> None:
        self.s, self.i, self.ctx = text, 0, ctx
        self.dec = json.JSONDecoder()
        self._line, self._at = 1, 0

    def line(self, i: int | None = None) -> int:
        i = self.i if i is None else i
        if i >= self._at:
            self._line += self.s.count("\n", self._at, i)
        else:
            self._line -= self.s.count("\n", i, self._at)
        self._at = i
        return self._line

    def skip(self) -> str:
        s, i = self.s, self.i
        while i < len(s) and s[i] in _WS:
            i += 1
        self.i = i
        return s[i] if i < len(s) else ""

    def expect(self, ch: str, what: str) -> None:
        if self.skip() != ch:
            raise self.ctx.error(self.line(), f"invalid JSON: expected {what}")
        self.i += 1

    def value(self):
        self.skip()
        try:
            v, self.i = self.dec.raw_decode(self.s, self.i)
        except json.JSONDecodeError as e:
            raise self.ctx.error(self.line(e.pos), f"invalid JSON: {e.msg}") from None
        return v

    def items(self, what: str):
        """Positions of the elements of an array, consumed one by one by the caller."""
        self.expect("[", what)
        if self.skip() == "]":
            self.i += 1
            return
        while True:
            self.skip()
            yield self.i
            c = self.skip()
            self.i += 1
            if c == "]":
                return
            if c != ",":
                raise self.ctx.error(self.line(), "invalid JSON: expected ',' or ']'")


def read(src: Source, ctx: Context, b: SessionBuilder) -> int | None:
    text = "".join(t for _, t in src.text_chunks())
    w = _Walk(text, ctx)
    w.expect("{", "a JSON object with 'conversations'")
    found = False
    if w.skip() == "}":
        raise ctx.error(w.line(), "no 'conversations' in this SGLang agentic trace")
    while True:
        key = w.value()
        w.expect(":", "':'")
        if key == "conversations":
            found = True
            n = 0
            for ci, _ in enumerate(w.items("the 'conversations' list")):
                sid = f"conv-{ci}"
                cline = w.line()
                made = False
                for k, _pos in enumerate(w.items(f"conversation {ci}: a list of turns"), 1):
                    lineno = w.line()
                    turn = w.value()
                    if type(turn) is not dict:
                        raise ctx.error(lineno, f"conversation {ci}, turn {k}: expected a JSON object")
                    msgs = check_messages(
                        turn.get("messages"), "messages", ctx, lineno, f"conversation {ci}, turn {k}: "
                    )
                    if not msgs:
                        continue
                    ptok = json_count(turn, "prompt_tokens", ctx, lineno)
                    where = f"{ctx.name}:{lineno}"
                    if not made:
                        b.session(sid, start=0.0, source=f"{ctx.name}:{cline}")
                        made = True
                    b.turn(sid, Turn(text=message_text(msgs), role=delta_role(msgs), input_tokens=ptok, source=where))
                n += made
        else:
            w.value()
        c = w.skip()
        w.i += 1
        if c == "}":
            break
        if c != ",":
            raise ctx.error(w.line(), "invalid JSON: expected ',' or '}'")
    if w.skip():
        raise ctx.error(w.line(), "unexpected content after the JSON object")
    if not found:
        raise ctx.error(1, "no 'conversations' in this SGLang agentic trace")
    if not b.sessions:
        raise ctx.error(1, "no usable conversations (every turn has empty 'messages')")
    return None
