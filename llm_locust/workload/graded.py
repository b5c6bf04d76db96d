"""Graded prompt sets: questions with a known answer, mixed into the load so that accuracy is
measured beside latency (docs/verdicts.md, "Accuracy under load").

A set is JSONL, one item a line (blank lines and lines starting with `#` are skipped):

    {"id": "add-1", "prompt": "What is 12 + 7? Answer with the number only.", "expected": 19, "grader": "number"}
    {"messages": [{"role": "user", "content": "..."}], "expected": "B", "grader": "choice",
     "options": ["Berlin", "Paris", "Rome"]}

- `prompt` (a string) or `messages` (a chat message list): the question;
- `expected`: the right answer (a string, or a number for the number grader);
- `grader`: one of GRADERS (see `grade`);
- optional: `id`, `max_tokens` (>= 1), `tolerance` (number grader, >= 0; default 1e-6),
  `options` (choice grader: the option texts, A first), `answer` (a canonical right reply, which
  the simulator sends; default: `expected`).

Every bad line is reported at once, each as `file:line: what is wrong` (GradedSetError, a
TraceError). Core module: no Locust, no gevent.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_locust.metrics.records import RequestRecord, work_of
from llm_locust.protocols.base import RequestSpec
from llm_locust.workload.formats.reader import TraceError

GRADERS = ("exact", "regex", "number", "choice")
BUILTIN = "builtin"
BUILTIN_FILE = "graded_builtin.jsonl"
DEFAULT_TOLERANCE = 1e-6
CHOICE_LETTERS = "ABCDE"
KEYS = {"id", "prompt", "messages", "expected", "grader", "max_tokens", "tolerance", "options", "answer"}


class GradedSetError(TraceError):
    """A graded set that cannot be read; one line per bad item, each naming file:line."""


@dataclass(frozen=True)
class GradedItem:
    id: str
    messages: list[dict[str, Any]]
    expected: str
    grader: str
    source: str  # "file:line"
    max_tokens: int | None = None
    tolerance: float = DEFAULT_TOLERANCE
    options: tuple[str, ...] = ()
    answer: str = ""  # a canonical right reply (the simulator's); "" -> expected
    pattern: Any = field(default=None, compare=False)  # the compiled regex (regex grader)

    @property
    def question(self) -> str:
        """The last user message's text: what the simulator recognises the item by."""
        return last_user_text(self.messages)

    def grade(self, reply: str) -> bool:
        return grade(self, reply)


@dataclass
class GradedSet:
    name: str  # as given ("builtin" or the path)
    items: list[GradedItem]

    def __len__(self) -> int:
        return len(self.items)


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role", "user") == "user":
            c = m.get("content")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
            return c if isinstance(c, str) else ""
    return ""


def builtin_path() -> Path:
    """The built-in set, shipped as package data (llm_locust/data)."""
    return Path(__file__).resolve().parent.parent / "data" / BUILTIN_FILE


def resolve_path(name: str) -> Path:
    """The file of a set given as `builtin` or a path."""
    return builtin_path() if name == BUILTIN else Path(name)


def load_graded(name: str) -> GradedSet:
    """Read a graded set (`builtin` or a JSONL path). Raises GradedSetError naming every bad line."""
    path = resolve_path(name)
    shown = BUILTIN_FILE if name == BUILTIN else name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise GradedSetError(f"{shown}: cannot read the graded set: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise GradedSetError(f"{shown}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    items: list[GradedItem] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{shown}:{lineno}"
        try:
            item = parse_item(s, where)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if item.id in seen:
            problems.append(f"{where}: id {item.id!r} already used at line {seen[item.id]}")
            continue
        seen[item.id] = lineno
        items.append(item)
    if problems:
        more = f"\n... and {len(problems) - 20} more bad lines" if len(problems) > 20 else ""
        raise GradedSetError("\n".join(problems[:20]) + more)
    if not items:
        raise GradedSetError(f"{shown}: no graded item in the file")
    return GradedSet(name, items)


def parse_item(line: str, where: str) -> GradedItem:
    """One JSONL line as an item; ValueError saying what is wrong (without the file:line)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (keys: {', '.join(sorted(KEYS))})")
    grader = obj.get("grader")
    if grader not in GRADERS:
        raise ValueError(f"'grader' must be one of {', '.join(GRADERS)}, got {grader!r}")
    messages = _item_messages(obj)
    expected, exp = _item_expected(obj)
    max_tokens, tol, options = _item_limits(obj)
    exp, pattern = _graded_expected(grader, expected, exp, options)
    answer = obj.get("answer", "")
    if not isinstance(answer, str):
        raise ValueError("'answer' must be a string")
    ident = obj.get("id")
    if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
        raise ValueError("'id' must be a string or an integer")
    return GradedItem(
        id=str(ident) if ident is not None else where.rpartition(":")[2],
        messages=messages,
        expected=exp,
        grader=grader,
        source=where,
        max_tokens=max_tokens,
        tolerance=float(tol),
        options=tuple(options),
        answer=answer,
        pattern=pattern,
    )


def _item_messages(obj: dict) -> list:
    """The item's chat messages: its prompt as one user message, or its checked message list."""
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of 'prompt' (a string) or 'messages' (a chat message list)")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("'prompt' must be a non-empty string")
        return [{"role": "user", "content": prompt}]
    if not (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list))
            for m in messages
        )
    ):
        raise ValueError("'messages' must be a non-empty list of {role, content} objects")
    if not last_user_text(messages).strip():
        raise ValueError("'messages' has no user message with text")
    return messages


def _item_expected(obj: dict) -> tuple[str | int | float, str]:
    """(the expected answer as given, as text): a float keeps its repr, so 0.1 stays 0.1."""
    if "expected" not in obj:
        raise ValueError("'expected' is missing")
    expected = obj["expected"]
    if isinstance(expected, bool) or not isinstance(expected, (str, int, float)):
        raise ValueError(f"'expected' must be a string or a number, got {type(expected).__name__}")
    exp = str(expected) if not isinstance(expected, float) else repr(expected)
    if not exp.strip():
        raise ValueError("'expected' is empty")
    return expected, exp


def _item_limits(obj: dict) -> tuple[int | None, int | float, list[str]]:
    """(max_tokens, tolerance, options), each checked: they bound the reply and its grading."""
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}")
    tol = obj.get("tolerance", DEFAULT_TOLERANCE)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (tol >= 0 and math.isfinite(tol)):
        raise ValueError(f"'tolerance' must be a number >= 0, got {tol!r}")
    options = obj.get("options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) and o.strip() for o in options):
        raise ValueError("'options' must be a list of non-empty strings")
    if len(options) > len(CHOICE_LETTERS):
        raise ValueError(f"'options': at most {len(CHOICE_LETTERS)} (A-E), got {len(options)}")
    return max_tokens, tol, options


def _graded_expected(
    grader: str, expected: str | int | float, exp: str, options: list[str]
) -> tuple[str, re.Pattern[str] | None]:
    """(expected text, compiled pattern) as the grader needs them; ValueError when it cannot grade them."""
    pattern = None
    if grader == "number" and parse_number(exp) is None:
        raise ValueError(f"number grader: 'expected' must be a number, got {expected!r}")
    if grader == "choice":
        exp = exp.strip().upper()
        if len(exp) != 1 or exp not in CHOICE_LETTERS:
            raise ValueError(f"choice grader: 'expected' must be one option letter A-E, got {expected!r}")
        if options and CHOICE_LETTERS.index(exp) >= len(options):
            raise ValueError(f"choice grader: 'expected' {exp} but only {len(options)} options")
    if grader == "regex":
        try:
            pattern = re.compile(exp)
        except re.error as e:
            raise ValueError(f"regex grader: 'expected' is not a valid regular expression ({e})") from None
    return exp, pattern


# ---- graders ----

_WS = re.compile(r"\s+")
_STRIP = " \t\r\n.,;:!?\"'`*()[]"
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LETTER = re.compile(r"(?<![A-Za-z0-9])([A-E])(?![A-Za-z0-9])")


def normalise(text: str) -> str:
    """The exact grader's form of a text: whitespace runs as one space, case folded, and
    surrounding whitespace, punctuation, quotes, asterisks and brackets stripped."""
    return _WS.sub(" ", text).strip(_STRIP).casefold()


def parse_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    if m is None:
        return None
    s = m.group(0).replace(",", "").replace("−", "-")
    try:
        return float(s)
    except ValueError:
        return None


_EQUALS = re.compile(r"=|\bequals\b|\bis equal to\b", re.IGNORECASE)


def reply_number(reply: str) -> float | None:
    """The number a reply answers with: its first number; when the reply restates the question
    with '=' or 'equals' ('12 + 7 = 19', '20 minus 8 equals 12'), the first number after the
    last of them that one follows."""
    parts = _EQUALS.split(reply)
    for tail in reversed(parts[1:]):
        n = parse_number(tail)
        if n is not None:
            return n
    return parse_number(reply)


def reply_choice(reply: str, options: tuple[str, ...] = ()) -> str | None:
    """The option a reply picks: its first standalone letter A-E (within the options given);
    without one, the single option whose text the reply contains (case ignored)."""
    allowed = CHOICE_LETTERS[: len(options)] if options else CHOICE_LETTERS
    for m in _LETTER.finditer(reply):
        if m.group(1) in allowed:
            return m.group(1)
    if options:
        low = reply.casefold()
        hits = [CHOICE_LETTERS[i] for i, o in enumerate(options) if o.strip().casefold() in low]
        if len(hits) == 1:
            return hits[0]
    return None


def grade(item: GradedItem, reply: str) -> bool:
    """Whether `reply` answers `item` right:

    - exact: the reply equals the expected text after `normalise` on both;
    - regex: the pattern is found anywhere in the reply (re.search; add (?i) to ignore case);
    - number: `reply_number` is within `tolerance` of the expected number;
    - choice: `reply_choice` is the expected letter.
    """
    g = item.grader
    if g == "exact":
        return normalise(reply) == normalise(item.expected)
    if g == "regex":
        pattern = item.pattern if item.pattern is not None else re.compile(item.expected)
        return pattern.search(reply) is not None
    if g == "number":
        got, want = reply_number(reply), parse_number(item.expected)
        return got is not None and want is not None and abs(got - want) <= item.tolerance
    if g == "choice":
        return reply_choice(reply, item.options) == item.expected
    raise ValueError(f"unknown grader {g!r}")


# ---- on the sending side
# Accuracy under load, on the sending side: a seeded share of the requests are items of the
# graded set (--graded, --graded-share) instead of the workload's, and each graded reply is graded
# when its request ends (docs/verdicts.md, "Accuracy under load").
#
# `maybe_graded` is what the closed loop (runtime.closed_loop) and the open loop (runtime.dispatcher)
# call per request; `grade_record` is called by `account` for every finished request. A graded
# request is accounted like any other (its latencies count) and carries its grade in
# `rec.work.graded` (True: right), which metrics.aggregate counts per step.

SOURCE_PREFIX = "graded:"
_ITEMS: dict[str, GradedItem] = {}  # source -> item, in this process (every set loaded here)
_SETS: dict[str, list[GradedItem]] = {}


def _items(name: str) -> list[GradedItem]:
    items = _SETS.get(name)
    if items is None:
        items = _SETS[name] = load_graded(name).items
        for it in items:
            _ITEMS[SOURCE_PREFIX + it.source] = it
    return items


class GradedMix:
    """One sender's draws: with probability `share` the next request is the set's next item
    (the items in turn, from a per-process offset)."""

    def __init__(self, settings, index: int = 0) -> None:
        self.settings = settings
        self.items = _items(settings.graded)
        self.share = settings.graded_share
        self.rng = random.Random(settings.seed * 1_000_003 + index * 7 + 91)
        self.next = (index * 7919) % len(self.items)

    def draw(self, model: str | None) -> tuple[RequestSpec, str] | None:
        if self.share <= 0 or self.rng.random() >= self.share:
            return None
        it = self.items[self.next % len(self.items)]
        self.next += 1
        s = self.settings
        spec = RequestSpec(
            model=model,
            messages=[dict(m) for m in it.messages],
            max_tokens=it.max_tokens or s.graded_max_tokens,
            force_length=False,
            continuous_usage=s.continuous_usage,
            extra_body={"temperature": 0},
        )
        return spec, SOURCE_PREFIX + it.source


def maybe_graded(owner, settings, spec: RequestSpec, source: str | None, index: int = 0):
    """(spec, source, graded): the workload's request, or in its place (at --graded-share) a
    graded item's, whose text is then collected. `owner` keeps the sender's draws."""
    if not settings.graded:
        return spec, source, False
    mix = owner.__dict__.get("_graded_mix")
    if mix is None:
        mix = owner.__dict__["_graded_mix"] = GradedMix(settings, index)
    got = mix.draw(spec.model)
    if got is None:
        return spec, source, False
    return got[0], got[1], True


def grade_record(rec: RequestRecord) -> None:
    """Grade a finished graded request that ended ok: `rec.work.graded` = answered right."""
    src = rec.source
    if not src or not src.startswith(SOURCE_PREFIX) or not rec.ok:
        return
    it = _ITEMS.get(src)
    if it is None:
        return
    work_of(rec).graded = it.grade(rec.text or "")
