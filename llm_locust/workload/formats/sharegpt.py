"""ShareGPT conversation dumps.

A JSON array of ``{"id": ..., "conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}``
(also accepted: one such object per line). No timestamps: every arrival is 0 (replay them closed
loop or as conversations). One record per human turn: conversation id = ``id``, turn = 1-based
index among the human turns, ``messages`` = [the system message, if any] + that human message (the
replay carries the history itself), ``output_tokens`` = the recorded reply's length in
whitespace-separated words, an *estimate* of its token count (tokenizers give ~1.3 tokens a word
for English). Speakers ``human``/``user`` and ``gpt``/``chatgpt``/``bard``/``bing``/``assistant``/``model``
are recognised; messages from other speakers are ignored; empty human messages are skipped
(``skipped["empty turn"]``).

The real file is ~600 MB: it is streamed, never loaded whole. Text is read in 1 MiB chunks and
each array element decoded with ``json.JSONDecoder.raw_decode`` (C) as soon as it is complete, so
memory holds one chunk plus the kept human messages, not the file or the replies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from llm_locust.workload.formats.reader import Context, Format, Source, blocks_from_rows, json_id

_WS = re.compile(r"[ \t\n\r]*")
_MAX_RECORD = 64 << 20  # an element still undecodable after this many characters is an error
USER = {"human", "user"}
ASSISTANT = {"gpt", "chatgpt", "bard", "bing", "assistant", "model"}


class _Cursor:
    """The text read so far from a trace, a position in it, and the line number of a position."""

    def __init__(self, chunks: Iterator[tuple[int, str]]) -> None:
        self.chunks = chunks
        self.buf, self.pos = "", 0
        self.line, self.counted = 1, 0  # line number at buf[counted]
        self.eof = False

    def more(self) -> bool:
        """Append the next chunk (dropping the text before pos); False at the end of the file."""
        if self.eof:
            return False
        for _first, text in self.chunks:
            at = self.line_of(self.pos)
            self.buf, self.pos = self.buf[self.pos :] + text, 0
            self.line, self.counted = at, 0
            return True
        self.eof = True
        return False

    def line_of(self, p: int) -> int:
        """The line of buf[p], counting newlines only from the last position asked for."""
        if p >= self.counted:
            self.line += self.buf.count("\n", self.counted, p)
            self.counted = p
            return self.line
        return self.line - self.buf.count("\n", p, self.counted)


def _elements(src: Source, ctx: Context) -> Iterator[tuple[int, object]]:
    """(line of its first character, value) of each element of a top-level JSON array (or of
    each top-level value, for one-object-per-line files)."""
    decode = json.JSONDecoder().raw_decode
    cur = _Cursor(src.text_chunks())
    state, array = "start", False
    while True:
        m = _WS.match(cur.buf, cur.pos)
        assert m is not None  # the pattern matches the empty string
        cur.pos = m.end()
        if cur.pos >= len(cur.buf):
            if cur.more():
                continue
            break
        state, array, consumed = _punctuation(state, array, cur.buf[cur.pos], cur, ctx)
        if consumed:
            cur.pos += 1
            continue
        got = _decode_element(cur, decode, ctx)  # state is "item" here
        if got is None:
            continue  # the element may just be incomplete: more was read, retry
        value, end = got
        yield cur.line_of(cur.pos), value
        cur.pos, state = end, "sep"
    if state == "start":
        raise ctx.error(None, "empty trace file")
    if array and state != "end":
        raise ctx.error(cur.line_of(len(cur.buf)), "invalid JSON: the array is not closed (truncated file?)")


def _punctuation(state: str, array: bool, c: str, cur: _Cursor, ctx: Context) -> tuple[str, bool, bool]:
    """(state, array, whether c was consumed) after the character c met outside an element."""
    if state == "start":
        if c == "[":
            return "item", True, True
        if c != "{":
            raise ctx.error(cur.line_of(cur.pos), f"expected a JSON array of conversations, found {c!r}")
        return "item", array, False
    if state == "sep":
        if array and c == ",":
            return "item", array, True
        if array and c == "]":
            return "end", array, True
        if not array and c == "{":
            return "item", array, False
        raise ctx.error(cur.line_of(cur.pos), f"expected ',' or ']' between conversations, found {c!r}")
    if state == "end":
        raise ctx.error(
            cur.line_of(cur.pos), f"unexpected data after the closing ']': {cur.buf[cur.pos : cur.pos + 20]!r}"
        )
    if array and c == "]":  # "item": an empty array, or a trailing comma
        return "end", array, True
    return state, array, False


def _decode_element(
    cur: _Cursor, decode: Callable[[str, int], tuple[Any, int]], ctx: Context
) -> tuple[Any, int] | None:
    """(value, end) of the element at cur.pos; None when it may be incomplete and more text was read."""
    try:
        return decode(cur.buf, cur.pos)
    except RecursionError:
        raise ctx.error(cur.line_of(cur.pos), "invalid JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, or an integer too long to convert
        if not isinstance(e, json.JSONDecodeError):
            raise ctx.error(cur.line_of(cur.pos), f"invalid JSON: {e}") from None
        if len(cur.buf) - cur.pos < _MAX_RECORD and cur.more():
            return None
        if e.pos >= len(cur.buf.rstrip()):
            raise ctx.error(
                cur.line_of(e.pos), "invalid JSON: the file ends inside a conversation (truncated file?)"
            ) from None
        raise ctx.error(cur.line_of(e.pos), f"invalid JSON: {e.msg} (column {e.colno})") from None


def _rows(src: Source, ctx: Context) -> Iterator[tuple]:
    for lineno, obj in _elements(src, ctx):
        if type(obj) is not dict:
            raise ctx.error(lineno, f"expected a conversation object, found {type(obj).__name__}")
        conv = obj.get("conversations")
        if type(conv) is not list:
            raise ctx.error(lineno, "missing 'conversations' list; found keys: " + (", ".join(obj) or "(none)"))
        cid = json_id(obj, "id", ctx, lineno) or f"line-{lineno}"
        system: str | None = None
        turn = 0
        for k, m in enumerate(conv):
            if type(m) is not dict or type(m.get("value")) is not str:
                raise ctx.error(lineno, f"conversation {cid!r} message {k} needs 'from' and a string 'value'")
            who = str(m.get("from", "")).lower()
            if who == "system":
                system = m["value"]
            elif who in USER:
                if not m["value"].strip():
                    ctx.skip("empty turn")
                    continue
                turn += 1
                out = None
                if k + 1 < len(conv):
                    r = conv[k + 1]
                    if type(r) is dict and str(r.get("from", "")).lower() in ASSISTANT and type(r.get("value")) is str:
                        out = len(r["value"].split()) or None
                msgs = [{"role": "user", "content": m["value"]}]
                if system:
                    msgs.insert(0, {"role": "system", "content": system})
                yield lineno, 0.0, None, out, msgs, cid, turn


def read(src: Source, ctx: Context):
    return blocks_from_rows(_rows(src, ctx))


FORMAT = Format(
    name="sharegpt",
    read=read,
    columns=("messages", "conversation_id", "turn"),
    origin="zero",
    required=("conversations",),
    summary="ShareGPT JSON: [{id, conversations: [{from, value}]}]; one record per human turn, no timestamps",
)
