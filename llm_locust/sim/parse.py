"""What the simulator reads of a request: its prompt's length in words (its tokens), and the words
themselves for the prefix cache, per wire format; a malformed request is a BadRequest (400)."""

from __future__ import annotations


class BadRequest(Exception):
    pass


def count_words(x) -> int:
    if isinstance(x, str):
        return len(x.split())
    if isinstance(x, list):
        if x and all(isinstance(t, int) for t in x):
            return len(x)  # token ids
        return sum(count_words(t) for t in x)
    if isinstance(x, dict):  # a content part
        return count_words(x.get("text", ""))
    return 0


def words(x) -> list:
    """The tokens count_words counts, in order (words, or token ids): the prefix cache's items."""
    if isinstance(x, str):
        return x.split()
    if isinstance(x, list):
        if x and all(isinstance(t, int) for t in x):
            return list(x)
        return [w for t in x for w in words(t)]
    if isinstance(x, dict):
        return words(x.get("text", ""))
    return []


def prompt_words(req: dict, proto: str | None, chat: bool) -> list:
    """A prompt's tokens for the prefix cache: system text / instructions first, then the
    messages' contents (or the prompt) in order. Only computed when the cache is on."""
    if proto is None:
        out = [w for m in req["messages"] for w in words(m.get("content") or "")] if chat else words(req["prompt"])
    elif proto == "responses":
        x = req["input"]
        out = words(req.get("instructions") or "") + (
            words(x) if isinstance(x, str) else [w for m in x for w in words(m.get("content") or "")]
        )
    elif proto == "anthropic":
        out = words(req.get("system") or "") + [w for m in req["messages"] for w in words(m.get("content") or "")]
    else:
        out = words(req.get("text") if "text" in req else req["input_ids"])
    return out or [None]


def count_messages(msgs) -> int:
    """Words of every message's content (a string, or content parts' text)."""
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        raise BadRequest("'messages' must be a non-empty list of objects")
    return sum(count_words(m.get("content") or "") for m in msgs)


def count_input(req: dict, proto: str) -> int:
    """Prompt words of a request to one of PROTOCOLS (system text and instructions included)."""
    if proto == "responses":
        if "input" not in req:
            raise BadRequest("'input' is required")
        x = req["input"]
        n = count_words(x) if isinstance(x, str) else count_messages(x)
        n += count_words(req.get("instructions") or "")
    elif proto == "anthropic":
        n = count_messages(req.get("messages")) + count_words(req.get("system") or "")
    else:
        if "text" not in req and "input_ids" not in req:
            raise BadRequest("'text' or 'input_ids' is required")
        n = count_words(req.get("text") if "text" in req else req["input_ids"])
    return max(1, n)


def count_prompt(req: dict, chat: bool) -> int:
    if chat:
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise BadRequest("'messages' must be a non-empty list of objects")
        n = sum(count_words(m.get("content") or "") for m in msgs)
    else:
        if "prompt" not in req:
            raise BadRequest("'prompt' is required")
        n = count_words(req["prompt"])
    return max(1, n)


def int_field(req: dict, name: str, default: int, lo: int) -> int:
    v = req.get(name)
    if v is None:
        return default
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise BadRequest(f"'{name}' must be an integer >= {lo}")
    return v
