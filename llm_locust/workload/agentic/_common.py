"""What the session readers share: typed field helpers on top of `formats.reader` (errors name file:line)."""

from __future__ import annotations

from typing import Any, Literal, overload

from llm_locust.workload.formats.reader import Context, json_id

ROLES = ("user", "tool")


@overload
def json_sid(obj: dict, key: str, ctx: Context, lineno: int, required: Literal[True]) -> str: ...
@overload
def json_sid(obj: dict, key: str, ctx: Context, lineno: int, required: bool = False) -> str | None: ...
def json_sid(obj: dict, key: str, ctx: Context, lineno: int, required: bool = False) -> str | None:
    """A session id: a non-empty string, or an integer taken as its decimal text."""
    v = json_id(obj, key, ctx, lineno)
    if v is None and required:
        raise ctx.error(lineno, f"missing {key!r}; found keys: {', '.join(obj) or '(none)'}")
    if v == "":
        raise ctx.error(lineno, f"{key!r} must not be empty")
    return v


def message_text(messages: list[dict[str, Any]]) -> str:
    """The text of chat messages (string contents, and the text parts of list contents), one per line."""
    parts: list[str] = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n".join(parts)


def delta_role(messages: list[dict[str, Any]]) -> str:
    """ "tool" when every new message is a tool result, else "user"."""
    return "tool" if messages and all(m.get("role") == "tool" for m in messages) else "user"


def check_messages(v: Any, key: str, ctx: Context, lineno: int, where: str = "") -> list[dict[str, Any]] | None:
    """A list of {role, ...} objects (content may be a string, a parts list or absent, as OpenAI allows)."""
    if v is None:
        return None
    if type(v) is not list or not all(type(m) is dict and isinstance(m.get("role"), str) for m in v):
        raise ctx.error(lineno, f"{where}{key!r} must be a list of chat messages (objects with a 'role')")
    return v
