"""`llm-locust trace anonymize IN OUT`: a trace with prompt text -> lengths and prefix hashes only.

Reads our JSONL (e.g. written by `llm-locust trace record --store-text`; `.gz` read
transparently) and writes it without `prompt` / `messages`: `hash_ids` are the chained block
hashes of the text computed exactly as the recorder computes them (same rendering, same blocks,
sequential ids in file order), so the prefix sharing of the original survives. Conversation ids
are replaced by pseudonyms (conv-1, conv-2... in first-seen order); keys outside the trace schema
are dropped (their names are reported). See docs/recording.md.

input_tokens: a count the server reported (present and not flagged estimated) is kept unless
--recount; otherwise the --tokenizer count when given; otherwise an existing estimate; otherwise a
character estimate (flagged `input_tokens_estimated`).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import sys
import tempfile
import zlib
from typing import Any

import orjson

from llm_locust.report.files import check_outputs
from llm_locust.safe.terminal import terminal_safe
from llm_locust.workload.paths import check_input
from llm_locust.workload.prefix_hash import (
    CHARS_PER_TOKEN,
    CHAT,
    COMPLETIONS,
    DEFAULT_BLOCK_SIZE,
    PrefixHasher,
    Pseudonyms,
    TokenizerError,
    load_tokenizer,
    request_text,
)

PROG = "llm-locust trace anonymize"
TEXT_KEYS = ("prompt", "messages")
# what an anonymized line may keep, in the order it is written
KEEP = (
    "timestamp",
    "input_tokens",
    "input_tokens_estimated",
    "output_tokens",
    "output_tokens_estimated",
    "conversation_id",
    "turn",
    "model",
    "api",
    "status",
    "error",
    "hash_ids",
    "block_size",
)


class AnonymizeError(ValueError):
    """Bad input; the message names the file and line."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check(obj: dict, where: str) -> None:
    ts = obj.get("timestamp")
    if ts is not None and (not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0):
        raise AnonymizeError(f"{where}: 'timestamp' must be a number >= 0, got {ts!r}")
    for k in ("input_tokens", "output_tokens", "turn"):
        v = obj.get(k)
        if v is not None and (not _is_int(v) or v < 0):
            raise AnonymizeError(f"{where}: {k!r} must be an integer >= 0, got {v!r}")
    m = obj.get("messages")
    if m is not None and (not isinstance(m, list) or not all(isinstance(x, dict) for x in m)):
        raise AnonymizeError(f"{where}: 'messages' must be a list of objects")
    p = obj.get("prompt")
    if p is not None and not isinstance(p, (str, list)):
        raise AnonymizeError(f"{where}: 'prompt' must be a string or a list")
    api = obj.get("api")
    if api is not None and api not in (CHAT, COMPLETIONS):
        raise AnonymizeError(f"{where}: 'api' must be {CHAT!r} or {COMPLETIONS!r}, got {api!r}")


class Anonymizer:
    def __init__(self, hasher: PrefixHasher, recount: bool = False):
        self.hasher = hasher
        self.recount = recount
        self.convs = Pseudonyms()
        self.turns: dict[str, int] = {}
        self.lines = self.textless = 0
        self.dropped: set[str] = set()

    def line(self, obj: dict, where: str) -> dict:
        _check(obj, where)
        api = obj.get("api") or (CHAT if obj.get("messages") is not None else COMPLETIONS)
        has_text = obj.get("messages") is not None or obj.get("prompt") is not None
        text = request_text(api, obj.get("prompt"), obj.get("messages")) if has_text else None
        if has_text and text is None:
            raise AnonymizeError(f"{where}: no usable {'messages' if api == CHAT else 'prompt'} for api {api!r}")
        self.dropped.update(k for k in obj if k not in KEEP and k not in TEXT_KEYS)
        out = {k: obj[k] for k in KEEP if k in obj}
        self.lines += 1
        if text is None:
            if out.get("hash_ids"):
                raise AnonymizeError(
                    f"{where}: no prompt/messages but non-empty hash_ids from another numbering; "
                    "anonymize a trace whose lines carry text (or drop those hash_ids first)"
                )
            self.textless += 1
            if not _is_int(out.get("input_tokens")):
                raise AnonymizeError(f"{where}: needs prompt, messages or input_tokens")
        else:
            digests, n, est = self.hasher.digests(text)
            out["hash_ids"] = self.hasher.intern(digests)
            out["block_size"] = self.hasher.block_size
            have = out.get("input_tokens")
            reported = _is_int(have) and not out.get("input_tokens_estimated")
            if reported and not self.recount:
                pass
            elif not est:  # a tokenizer count (or a prompt of token ids)
                out["input_tokens"] = n
                out.pop("input_tokens_estimated", None)
            elif not _is_int(have) or self.recount:
                out["input_tokens"], out["input_tokens_estimated"] = n, True
        cid = out.get("conversation_id")
        if cid is not None:
            out["conversation_id"] = cid = self.convs.get(str(cid))
            if out.get("turn") is None:  # counted on from the last turn seen in this conversation
                out["turn"] = self.turns.get(cid, 0) + 1
            self.turns[cid] = max(self.turns.get(cid, 0), out["turn"])
        return {k: out[k] for k in KEEP if k in out}  # canonical key order


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _compressed(raw: Any, dst: str) -> Any:
    """The writer of `dst`'s lines: gzip over the open file for a .gz name (closing it flushes the
    gzip trailer into `raw`, which its own `with` closes), else the file itself."""
    return gzip.GzipFile(fileobj=raw, mode="wb") if dst.endswith(".gz") else contextlib.nullcontext(raw)


def anonymize_file(src: str, dst: str, anon: Anonymizer) -> None:
    """Writes dst (via a temporary file, so bad input leaves no partial output)."""
    try:
        check_input(src, "IN")
        check_outputs({"OUT": dst}, {"IN": src})  # never over IN, never through a link or a device
    except ValueError as e:
        raise AnonymizeError(str(e)) from None
    fd, tmp = tempfile.mkstemp(
        dir=os.path.dirname(os.path.abspath(dst)), prefix=f".{os.path.basename(dst)}.", suffix=".tmp"
    )
    lineno = 0
    try:
        with _open(src) as f, os.fdopen(fd, "wb") as raw_out, _compressed(raw_out, dst) as out:
            try:
                for lineno, raw in enumerate(f, 1):
                    where = f"{src}:{lineno}"
                    if not raw.strip():
                        continue
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise AnonymizeError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
                    try:
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError as e:
                        raise AnonymizeError(f"{where}: invalid JSON: {e}") from None
                    if not isinstance(obj, dict):
                        raise AnonymizeError(f"{where}: expected a JSON object, got {type(obj).__name__}")
                    out.write(orjson.dumps(anon.line(obj, where)) + b"\n")
            except (EOFError, gzip.BadGzipFile, zlib.error) as e:
                raise AnonymizeError(f"{src}:{lineno + 1}: cannot read (truncated or corrupt gzip?): {e}") from None
        if anon.lines == 0:
            raise AnonymizeError(f"{src}: empty trace (no JSON lines)")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Turn a JSONL trace carrying prompt text (prompt / messages) into a length-and-hash-only "
            "one: prefix-block hash_ids computed as `llm-locust trace record` does (so prefix sharing is "
            "kept), input_tokens counted, conversation ids pseudonymised, text dropped."
        ),
    )
    p.add_argument("input", metavar="IN", help="JSONL trace with text (.gz read transparently)")
    p.add_argument("output", metavar="OUT", help="JSONL trace to write (.gz written compressed)")
    p.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        metavar="TOKENS",
        help="prefix block size in tokens (default %(default)s; without --tokenizer a block is "
        f"TOKENS*{CHARS_PER_TOKEN} characters); use the recorder's value",
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json (or a directory with one): token blocks and input_tokens counts; "
        "needs the 'tokenizers' package",
    )
    p.add_argument(
        "--recount", action="store_true", help="recount input_tokens even where the line has a server-reported count"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0, 2 (bad arguments or input); --help prints the help and returns 0."""
    p = build_parser()
    try:
        a = p.parse_args(argv)
        if a.block_size < 1:
            p.error("--block-size must be >= 1")
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        tok = load_tokenizer(a.tokenizer) if a.tokenizer else None
        anon = Anonymizer(PrefixHasher(a.block_size, tok), recount=a.recount)
        anonymize_file(a.input, a.output, anon)
    except (AnonymizeError, TokenizerError, OSError) as e:
        print(terminal_safe(f"{PROG}: error: {e}"), file=sys.stderr)
        return 2
    msg = f"{PROG}: {anon.lines} lines -> {a.output} ({anon.hasher.distinct_blocks} distinct prefix blocks"
    if anon.textless:
        msg += f"; {anon.textless} lines had no text and were copied without it"
    if anon.dropped:
        msg += f"; dropped keys: {', '.join(sorted(anon.dropped))}"
    print(msg + ")", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
