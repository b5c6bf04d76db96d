"""The simulator's answers to graded items (--graded-set FILE --graded-accuracy P).

It reads the graded set's JSONL itself (the simulator imports nothing else from llm_locust) and
knows each item by its question: the last user message's text (or the prompt). A request whose
question is an item's (exactly, or containing it) is answered right with probability P (one
seeded draw per such request, in arrival order), else wrong:

- right: the item's `answer`, else its `expected` (a number, the option letter, the exact text);
- wrong: number: expected + 1; choice: the next option letter; exact and regex: "I do not know".

The reply is that text, one token per word, and ends there (finish_reason stop), unless
max_tokens is smaller. Every other request is answered as before.
"""

from __future__ import annotations

import json
import random

WRONG_TEXT = "I do not know"
LETTERS = "ABCDE"


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def question_of(messages) -> str:
    for m in reversed(messages or []):
        if isinstance(m, dict) and m.get("role", "user") == "user":
            return _text(m.get("content")).strip()
    return ""


def request_text(req: dict) -> str:
    """The question a request asks: its last user message, else its prompt / input / text."""
    msgs = req.get("messages")
    if isinstance(msgs, list):
        return question_of(msgs)
    for key in ("input", "prompt", "text"):
        v = req.get(key)
        if isinstance(v, list):
            return question_of(v) if all(isinstance(m, dict) for m in v) else ""
        if isinstance(v, str):
            return v.strip()
    return ""


def _number_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class GradedAnswers:
    def __init__(self, path: str, accuracy: float, seed: int = 0) -> None:
        self.accuracy = accuracy
        self.rng = random.Random(seed * 1_000_003 + 4242)
        self.items: dict[str, tuple[str, str]] = {}  # question -> (right, wrong)
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the load test reports bad lines; the simulator only answers good ones
                if not isinstance(obj, dict) or "expected" not in obj:
                    continue
                q = obj["prompt"] if isinstance(obj.get("prompt"), str) else question_of(obj.get("messages"))
                if q.strip():
                    self.items[q.strip()] = self._replies(obj)
        self.right = self.wrong = 0

    @staticmethod
    def _replies(obj: dict) -> tuple[str, str]:
        exp, grader = obj["expected"], obj.get("grader")
        right = obj.get("answer") or str(exp)
        if grader == "number":
            try:
                n = float(str(exp).replace(",", ""))
                return obj.get("answer") or _number_text(n), _number_text(n + 1)
            except ValueError:
                pass
        if grader == "choice":
            k = max(len(obj.get("options") or []), 2)
            letter = str(exp).strip().upper()
            i = LETTERS.find(letter)
            return right, LETTERS[(i + 1) % k] if i >= 0 else "E"
        return right, WRONG_TEXT

    def answer(self, req: dict) -> list[str] | None:
        """The reply's tokens for a graded question; None for any other request."""
        text = request_text(req)
        if not text:
            return None
        pair = self.items.get(text)
        if pair is None:
            pair = next((p for q, p in self.items.items() if q in text), None)
            if pair is None:
                return None
        ok = self.rng.random() < self.accuracy
        if ok:
            self.right += 1
        else:
            self.wrong += 1
        return [" " + w for w in (pair[0] if ok else pair[1]).split()] or [" ?"]
