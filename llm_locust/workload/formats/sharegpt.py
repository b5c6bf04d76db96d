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
from collections.abc import Iterator

from llm_locust.workload.formats.base import Context, Format, Source, blocks_from_rows, json_id

_WS = re.compile(r"[ \t\n\r]*")
_MAX_RECORD = 64 << 20  # an element still undecodable after this many characters is an error
USER = {"human", "user"}
ASSISTANT = {"gpt", "chatgpt", "bard", "bing", "assistant", "model"}


def _elements(src: Source, ctx: Context) -> Iterator[tuple[int, object]]:
    """(line of its first character, value) of each element of a top-level JSON array (or of
    each top-level value, for one-object-per-line files)."""
    decode = json.JSONDecoder().raw_decode
    chunks = src.text_chunks()
    buf, pos = "", 0
    line, counted = 1, 0  # line number at buf[counted]
    eof = False

    def more() -> bool:
        nonlocal buf, pos, line, counted, eof
        if eof:
            return False
        for _first, text in chunks:
            at = line_of(pos)
            buf, pos = buf[pos:] + text, 0
            line, counted = at, 0
            return True
        eof = True
        return False

    def line_of(p: int) -> int:
        nonlocal line, counted
        if p >= counted:
            line += buf.count("\n", counted, p)
            counted = p
            return line
        return line - buf.count("\n", p, counted)

    state, array = "start", False
    while True:
        pos = _WS.match(buf, pos).end()
        if pos >= len(buf):
            if more():
                continue
            break
        c = buf[pos]
        if state == "start":
            if c == "[":
                array, state, pos = True, "item", pos + 1
                continue
            if c != "{":
                raise ctx.error(line_of(pos), f"expected a JSON array of conversations, found {c!r}")
            state = "item"
        elif state == "sep":
            if array and c == ",":
                state, pos = "item", pos + 1
                continue
            if array and c == "]":
                state, pos = "end", pos + 1
                continue
            if not array and c == "{":
                state = "item"
            else:
                raise ctx.error(line_of(pos), f"expected ',' or ']' between conversations, found {c!r}")
        elif state == "end":
            raise ctx.error(line_of(pos), f"unexpected data after the closing ']': {buf[pos : pos + 20]!r}")
        if state == "item":
            if array and c == "]":
                state, pos = "end", pos + 1
                continue
            try:
                value, end = decode(buf, pos)
            except RecursionError:
                raise ctx.error(line_of(pos), "invalid JSON: nested too deeply") from None
            except ValueError as e:  # JSONDecodeError, or an integer too long to convert
                if not isinstance(e, json.JSONDecodeError):
                    raise ctx.error(line_of(pos), f"invalid JSON: {e}") from None
                if len(buf) - pos < _MAX_RECORD and more():
                    continue  # the element may just be incomplete: read on and retry
                if e.pos >= len(buf.rstrip()):
                    raise ctx.error(
                        line_of(e.pos), "invalid JSON: the file ends inside a conversation (truncated file?)"
                    ) from None
                raise ctx.error(line_of(e.pos), f"invalid JSON: {e.msg} (column {e.colno})") from None
            yield line_of(pos), value
            pos, state = end, "sep"
    if state == "start":
        raise ctx.error(None, "empty trace file")
    if array and state != "end":
        raise ctx.error(line_of(len(buf)), "invalid JSON: the array is not closed (truncated file?)")


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
