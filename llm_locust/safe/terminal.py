"""One choke point for the terminal: text a server or a file supplies, made safe to print.

A server's error text, a model's id, a results file's `model_id` or server version reach the
terminal inside our own lines (the summary, the fail-fast line, Locust's error table, the log,
`compare`). Printed raw, an escape sequence in them would set the window title, clear the
screen or plant a link (OSC 8), and a bidi override would reorder what the user reads.
`terminal_safe` writes each such character as a visible escape instead, as Python writes it:

- the C0 controls U+0000-U+001F (ESC is U+001B) and DEL U+007F: `\\x1b`, `\\x07`, `\\r`, `\\n`, `\\t`;
- the C1 controls U+0080-U+009F (U+009B is a one-character CSI): `\\x9b`;
- the bidi controls U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069, and the line and
  paragraph separators U+2028, U+2029: `\\u202e`.

A field (one value inside a line of ours: an error text, a model id) has its newlines and tabs
escaped too, so that it cannot start a line of its own or break a table's columns. A block of
lines (`lines=True`: a log record, a comparison written to standard output) keeps `\\n` and `\\t`;
`\\r` is escaped in both (it would overwrite the line printed before it).

Everything else passes as it is: letters of every script, emoji, a backslash. The log's records
go through `TerminalFilter` (installed with the secrets' mask, safe/masking.py), a finished
request's error text through runtime/send.py `account`, `compare`'s and the run summary's
texts through their printers.
"""

from __future__ import annotations

import logging

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)
_CONTROLS = (*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI)
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _visible(cp: int) -> str:
    return _NAMED.get(cp) or (f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}")


_FIELD = {cp: _visible(cp) for cp in _CONTROLS}
_LINES = {cp: v for cp, v in _FIELD.items() if cp not in (0x09, 0x0A)}


def terminal_safe(text: object, *, lines: bool = False) -> str:
    """`text` (str() of it) with every control, DEL and bidi character written as a visible escape;
    `lines`: newlines and tabs kept (a block of lines), else escaped too (one field)."""
    s = text if isinstance(text, str) else str(text)
    return s.translate(_LINES if lines else _FIELD)


class TerminalFilter(logging.Filter):
    """Every log record's final message (its arguments included) and traceback made terminal-safe,
    lines kept: a server's words quoted in a log line print as text, never as escapes."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        safe = terminal_safe(msg, lines=True)
        if safe != msg:
            record.msg, record.args = safe, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = terminal_safe(record.exc_text, lines=True)
        return True


def install_log_filter() -> None:
    """TerminalFilter on every handler of the root logger (once each)."""
    f = TerminalFilter()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(x, TerminalFilter) for x in handler.filters):
            handler.addFilter(f)
