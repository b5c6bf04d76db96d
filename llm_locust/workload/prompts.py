"""Synthetic prompts of a given token length, for traces that carry only token counts.

`PromptBuilder.build(N, hash_ids, block_size)` returns a :class:`Prompt` whose text (for
``/v1/completions``) or single user message (for ``/v1/chat/completions``) has N tokens:

- **With a tokenizer** (`llm_locust.workload.tokenizer.load_tokenizer`): exactly N tokens as
  the server counts ``usage.prompt_tokens``: completions count the text plus the special tokens
  the tokenizer's post-processor adds (BOS for Llama-3-style tokenizers; none for SmolLM2, as
  llama-server), chat counts the whole templated prompt (system prompt the template may add,
  role headers, generation prompt).
- **Without one**: a calibrated approximation: ``round(N / calibration)`` words, where
  `calibration` is the measured tokens per word (:data:`DEFAULT_CALIBRATION`), minus an
  estimated chat-template overhead (:data:`DEFAULT_CHAT_OVERHEAD`). Its error is measured by
  ``benchmarks/bench_prompts.py`` (docs/prompts.md).

Text is built from *pieces*: a space and a common English word (:data:`WORDS`), each one token
for the tokenizer (words that are not are dropped for that tokenizer). With a pre-tokenizer
that splits at spaces (GPT-2/Llama-3/Qwen/SmolLM byte-level BPE, Metaspace) pieces never merge,
so k pieces are exactly k tokens and a prompt is built by joining pieces, without encoding
anything. The builder proves this once per tokenizer (it encodes a probe holding every piece
and checks the pre-tokenizer's split); for a tokenizer where it does not hold, every prompt is
encoded and fixed up at its end (few encodes), and ``Prompt.exact`` says whether N was reached.

Prefix blocks: with ``hash_ids`` and ``block_size`` the prompt is the concatenation of one text
block per hash id, ``block_size`` tokens each (the last one cut when N is smaller), then filler
when N is larger. A block's text depends only on (seed, hash id, block_size), so two prompts
sharing the first ids share exactly those blocks' text, and a server's prefix cache sees the
reuse the trace had. Blocks never merge across their boundary (each starts with a space piece).

Determinism: the same seed gives the same text for the same (N, hash ids, block size, key);
``key`` names the record (e.g. its ``source`` "file:line"); without one, a per-builder counter
is used, so the n-th call of a builder is reproducible. Different seeds give different text.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import random
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, SupportsIndex, cast

if TYPE_CHECKING:  # pragma: no cover
    from llm_locust.workload.tokenizer import Tokenizer
    from llm_locust.workload.trace_record import TraceRecord

__all__ = ["Prompt", "PromptBuilder", "PromptSynth", "WORDS", "DEFAULT_CALIBRATION", "DEFAULT_CHAT_OVERHEAD"]

# The 1,024 most frequent English words (wordfreq 3.1.1 `top_n_list("en", 5000)`, lower-case
# letters only, 1-2 letter words limited to common function words, a few violent/offensive ones
# dropped) that are ONE token with a leading space both for SmolLM2 (49k BPE, also the tiny test
# model) and for OpenAI's cl100k_base; in frequency order.
WORDS: tuple[str, ...] = tuple(
    """
the to and of a in is for that you it on with this was be as are have at he not by but from my
or we an your all so his they me if one can will just like about up out what has when more do no
were who had their there her which time get been would she new people how some also them now
other its our than good only after first him into know see two make over think any then could
back these us want because go well said way most much very where even should may here need
really did right work year years being day too going before off why made still take got many
never those life say world down great through last while best such love man home long look
something use same used both every come part state three around between always better find help
high little old since another does own things under during game thing give house place school
again next each without against end found must show big feel sure team ever family keep might
please put money free second someone away left number city days lot name night play until
company doing few let real called different having set thought done however getting government
group looking public top women business care start system times week already anything case
nothing person today change enough everything full live making point read told yet bad four hard
mean once support tell including music power seen states stop water based believe call head men
national small took white came far job side though try went yes actually american later less
line order party run says service country open season thank children everyone general trying
united using area black following law makes together whole car face five kind maybe per
president story working course games health hope important least means news within able book
early friends information local post thanks video young ago others social talk court fact given
guys half hand level mind often single become body coming control food guy hours office pay
problem south true almost history known large lost research room several started taking
university win wrong along anyone else girl john matter pretty remember air bit friend hit needs
nice playing probably saying understand yeah class close comes idea international looks past
possible wanted cause due happy human members months move question series wait woman ask
community data late leave north saw special watch either future light low million morning short
stay taken age buy deal rather reason red report soon third turn whether among check development
form further heart minutes myself services yourself act although asked child fire fun living
major media phone players art behind building easy gonna market near non plan political quite
six talking west works according available education final former front kids list ready
sometimes son street bring college current example experience heard meet program type baby
chance father march process song study word across action clear gave gets himself month outside
self students words board cost cut field held instead main moment mother road seems thinking
town wants department energy fine force hear issue played points price rest results running
shows space summer term wife america beautiful date goes land miss project site strong account
especially eyes include parents period position record similar total above club common film
happened knew lead likely perfect personal security share won center county couple english
happen hold industry inside issues online player private problems return rights sense star test
view weeks break companies event higher hour member middle needed present result sorry takes
training wish answer boy design finally girls gold gone guess interest king learn policy society
added alone average bank brought certain east hands hot longer medical movie original park
performance press received role sent themselves tried worked worth areas became bill books cool
director exactly giving ground meeting provide questions relationship sound source usually value
evidence follow lives official production rate reading round save stand stuff tax whatever
amount blue countries drive eat fall fast federal feeling felt green league management match
model picture size step trust central changes forward groups hey key mom page paid range review
science trade upon various attention brother cannot character chief cup football led looked
lower natural property quality send style vote amazing china complete dog economic involved
itself language oil related serious stage terms title add article born decided decision enjoy
entire french met perhaps poor release situation technology turned website written choice code
considered continue council cover currently door election events financial foreign hair increase
legal lose pick race seem seven sign simple simply staff super union walk bed began built career
changed daily daughter difficult figure hospital knows loss modern ones paper parts popular
published safe starting systems version voice whose writing earth forget goal huge internet
listen okay practice rules sea sir success towards waiting ways access base below created deep
followed mark missing offer pass professional released risk schools sleep table ten truth ball
box build card cases dark district europe india mine minister note percent piece products recent
seeing straight visit wall wrote allowed boys culture etc fans gives growth included married
officer pain places respect response river rock shall speak specific standard tonight write
album century charge cold create effect eight except eye funny limited moving network peace
provided recently required sales spent store student tomorrow track via watching weight addition
ahead allow anti association beat brown capital committee conference difference double expect
gas island moved normal plans population potential pressure radio station text treatment western
beginning campaign certainly completely content credit cross described despite female focus
husband ice individual interesting join kept leading loved message miles nearly particular
previous quickly region reported section sort speed travel consider contact drop fair feet kid
link positive sale throughout tour welcome absolutely additional beyond conditions earlier extra
forces immediately jobs leaving minute nature numbers quick sell significant studies unless
winning agree clean computer construction episode favorite income justice levels manager
movement photo posted safety san scene sold sounds spend statement sun teams
""".split()
)

#: Tokens per word of the text built without a tokenizer. Measured with the SmolLM2 tokenizer
#: (scripts/real-servers.sh tokenizer) by benchmarks/bench_prompts.py: 1,000,000 words of
#: built text encode to exactly 1,000,000 tokens (every word of WORDS is one token with its
#: leading space; also for cl100k_base: 1.0). Other tokenizers: pass calibration=measured.
DEFAULT_CALIBRATION = 1.0

#: Chat-template tokens added around one user message, used without a tokenizer. Measured with
#: SmolLM2's own template (which inserts its default system prompt when there is none: 23
#: tokens, plus 3 for "<|im_start|>user\n", 2 for "<|im_end|>\n", 3 for "<|im_start|>assistant\n"
#: = 31 minus 1 for the 1-token user content "hi"): templated prompt = content + 30 tokens.
#: A plain ChatML template without a system prompt adds 8. Pass chat_overhead= for others.
DEFAULT_CHAT_OVERHEAD = 30

_M64 = (1 << 64) - 1
_TAPE_LEN = 1 << 16  # pieces in the per-builder random tape that chunks are cut from
_HEAD = 8  # first pieces of a sequence hashed one by one: sequences differ from their start
_CHUNK = 64  # then chunks of this many pieces cut from the tape at hashed offsets
_FILLERS = (" a", " I", ".", ",", "\n", " x", "s", "!", " -", ":", "?", " the")
_MAX_FIT_ENCODES = 40


def _mix(x: int) -> int:
    """splitmix64 finaliser: a well-spread 64-bit hash of a 64-bit int."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


@dataclass(slots=True)
class Prompt:
    """A built prompt: ``text`` for completions APIs or ``messages`` (one user message) for chat."""

    tokens: int  # its token count as the server counts it (the target when exact or approximate)
    exact: bool  # True when a tokenizer confirmed ``tokens == target``
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    target: int = 0  # the requested input token count

    @property
    def content(self) -> str:
        """The synthesised text (the completions prompt, or the user message's content)."""
        if self.text is not None:
            return self.text
        return self.messages[-1]["content"] if self.messages else ""


class PromptBuilder:
    """Builds prompts of a given token length; see the module doc.

    tokenizer: a :class:`~llm_locust.workload.tokenizer.Tokenizer` for exact lengths, or None
        for the calibrated approximation.
    seed: text seed; the same seed + the same request gives the same text.
    chat: build ``messages`` (one user message) and count the chat template; else ``text``.
    calibration: tokens per word without a tokenizer (default :data:`DEFAULT_CALIBRATION`).
    chat_overhead: template tokens around the user message without a tokenizer (default
        :data:`DEFAULT_CHAT_OVERHEAD`); with a tokenizer the template is rendered and counted.
    add_special_tokens: completions count the BOS/EOS the tokenizer's post-processor adds, as
        servers do (default True); False counts the text alone.
    verify: None (default): encode a prompt only when the tokenizer is not proven additive;
        True: always encode each prompt once to confirm (~2 us/token here); False: never.
    block_cache: how many prefix-block texts to keep (LRU).
    """

    def __init__(
        self,
        tokenizer: Tokenizer | None = None,
        seed: int = 0,
        *,
        chat: bool = False,
        calibration: float | None = None,
        chat_overhead: int | None = None,
        add_special_tokens: bool = True,
        verify: bool | None = None,
        block_cache: int = 4096,
    ) -> None:
        if calibration is not None and not calibration > 0:
            raise ValueError(f"calibration must be > 0 tokens per word, got {calibration!r}")
        self.tokenizer = tokenizer
        self.seed = int(seed)
        self.chat = bool(chat)
        self.calibration = float(calibration) if calibration is not None else DEFAULT_CALIBRATION
        self.chat_overhead = int(chat_overhead) if chat_overhead is not None else DEFAULT_CHAT_OVERHEAD
        self.add_special_tokens = bool(add_special_tokens)
        self.verify = verify
        self._counter = itertools.count()
        self._blocks: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._block_cache = max(0, int(block_cache))
        self._salt = _mix(self.seed & _M64) ^ _mix((self.seed >> 64) & _M64)
        self._key_secret = hashlib.blake2b(str(self.seed).encode(), digest_size=16).digest()

        pieces = [" " + w for w in WORDS]
        self.proven = False  # k pieces == k tokens in every context the builder uses
        if tokenizer is not None:
            counts = [tokenizer.count(p) for p in pieces]  # (no encode_batch: no Rust thread pool before a fork)
            unit = [p for p, c in zip(pieces, counts, strict=True) if c == 1]
            pieces = unit if len(unit) >= 64 else pieces
        self._pool: list[str] = pieces
        rng = random.Random(f"llm-locust-prompts/{self.seed}")
        self._tape: list[str] = rng.choices(self._pool, k=_TAPE_LEN)
        # token count of everything but the content: special tokens (completions) or template
        self._overhead = 0
        self._overhead_empty = 0  # the same for an empty content
        self._tpp = 1.0  # tokens per piece
        if tokenizer is not None:
            self._self_check()

    # ------------------------------------------------------------------ set-up
    def _self_check(self) -> None:
        """Measure the overhead around the content and prove (or not) that pieces are additive:
        k pieces of content always add exactly k tokens to the prompt's count."""
        tok = self.tokenizer
        assert tok is not None
        probe_pieces = self._pool + self._tape[:2048]
        n = len(probe_pieces)
        probe = "".join(probe_pieces)
        c_probe = self._count(probe)
        o_5 = self._count("".join(self._tape[2048:2053])) - 5
        o_50 = self._count("".join(self._tape[2053:2103])) - 50
        self._overhead_empty = self._count("")
        self.proven = o_5 == o_50 == c_probe - n and tok.count(probe) == n and self._pretokenizer_splits(probe, n)
        # proven: k pieces make a prompt of overhead + k tokens; else estimates for a first guess
        self._overhead = o_5 if self.proven else self._overhead_empty
        self._tpp = 1.0 if self.proven else max(0.05, (c_probe - self._overhead_empty) / n)

    def _pretokenizer_splits(self, text: str, n: int) -> bool:
        backend = getattr(self.tokenizer, "backend", None)
        pre = getattr(backend, "pre_tokenizer", None)
        if backend is None or pre is None:
            return False
        try:
            norm = backend.normalizer
            normalized = norm.normalize_str(text) if norm is not None else text
            return len(pre.pre_tokenize_str(normalized)) == n
        except Exception:
            return False

    def _count(self, content: str) -> int:
        """Token count of a prompt with this content, as the server counts it."""
        tok = self.tokenizer
        assert tok is not None
        if self.chat:
            return tok.count(tok.apply_chat_template([{"role": "user", "content": content}]))
        return tok.count(content, add_special_tokens=self.add_special_tokens)

    # ------------------------------------------------------------------ text
    def _ident(self, kind: bytes, value: Hashable) -> int:
        if kind == b"b":
            try:
                # numpy integers name the same block as ints; a TypeError says value is no integer
                value = operator.index(cast(SupportsIndex, value))
            except TypeError:
                pass
            if isinstance(value, int) and 0 <= value <= _M64:
                return _mix(value ^ self._salt)
        data = kind + b":" + (repr(value).encode() if not isinstance(value, str) else value.encode())
        return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=self._key_secret).digest(), "little")

    def _pieces(self, ident: int, k: int) -> list[str]:
        """The first k pieces of the deterministic sequence named by ``ident``."""
        pool, p = self._pool, len(self._pool)
        head = min(k, _HEAD)
        out = [pool[_mix((ident + i * 0x9E3779B97F4A7C15) & _M64) % p] for i in range(head)]
        need = k - head
        if need > 0:
            tape, span = self._tape, _TAPE_LEN - _CHUNK + 1
            h = _mix(ident ^ 0x5851F42D4C957F2D)
            j = 0
            while need > 0:
                off = _mix((h + j) & _M64) % span
                take = min(_CHUNK, need)
                out.extend(tape[off : off + take])
                need -= take
                j += 1
        return out

    def _block_text(self, h: int, words: int) -> str:
        cache = self._blocks
        key = (h, words)
        text = cache.get(key)
        if text is not None:
            cache.move_to_end(key)
            return text
        text = "".join(self._pieces(self._ident(b"b", h), words))
        if self._block_cache:
            cache[key] = text
            if len(cache) > self._block_cache:
                cache.popitem(last=False)
        return text

    def block_text(self, hash_id: int, block_size: int) -> str:
        """The text of prefix block ``hash_id`` (``block_size`` tokens with a tokenizer)."""
        return self._block_text(hash_id, self._block_words(block_size))

    def _block_words(self, block_size: int) -> int:
        """Pieces per block: block_size when pieces are proven one token each, else estimated."""
        if self.tokenizer is not None:
            return int(block_size) if self.proven else max(1, round(block_size / self._tpp))
        return max(1, round(block_size / self.calibration))

    def _content(self, k: int, hash_ids: Sequence[int] | None, block_words: int, key_ident: int) -> str:
        """k pieces: whole blocks, then part of the next block, then the record's own filler."""
        if k <= 0:
            return ""
        parts: list[str] = []
        remaining = k
        if hash_ids and block_words > 0:
            for h in hash_ids:
                if remaining >= block_words:
                    parts.append(self._block_text(h, block_words))
                    remaining -= block_words
                else:
                    parts.append("".join(self._pieces(self._ident(b"b", h), remaining)))
                    remaining = 0
                if remaining == 0:
                    break
        if remaining > 0:
            parts.append("".join(self._pieces(key_ident, remaining)))
        return "".join(parts)

    # ------------------------------------------------------------------ build
    def build(
        self,
        input_tokens: int,
        hash_ids: Sequence[int] | None = None,
        block_size: int | None = None,
        *,
        key: Hashable | None = None,
    ) -> Prompt:
        """A prompt of ``input_tokens`` tokens; see the class and module docs."""
        n = int(input_tokens)
        if n < 1:
            raise ValueError(f"input_tokens must be >= 1, got {input_tokens!r}")
        if hash_ids is not None and len(hash_ids) and not (block_size and block_size > 0):
            raise ValueError(f"hash_ids need a block_size > 0, got {block_size!r}")
        if key is None:
            key = ("#", next(self._counter))
        key_ident = self._ident(b"k", key)
        block_words = self._block_words(block_size) if hash_ids and block_size else 0  # checked > 0 above

        if self.tokenizer is None:
            overhead = self.chat_overhead if self.chat else 0
            k = max(0, round((n - overhead) / self.calibration))
            return self._prompt(self._content(k, hash_ids, block_words, key_ident), n, False, n)

        if self.proven:
            k = n - self._overhead
            if k <= 0:
                c = self._overhead_empty
                return self._prompt("", c, c == n, n)
            content = self._content(k, hash_ids, block_words, key_ident)
            if not self.verify:
                return self._prompt(content, n, True, n)
        else:
            k = max(0, round((n - self._overhead) / self._tpp))
            content = self._content(k, hash_ids, block_words, key_ident)
            if self.verify is False:  # not provable and not to be checked: an estimate
                return self._prompt(content, n, False, n)
        return self._fit(n, k, hash_ids, block_words, key_ident, content)

    def build_record(self, entry: TraceRecord, *, key: Hashable | None = None) -> Prompt:
        """``build`` for a token-count trace record (key: the record's ``source`` when set)."""
        if key is None and entry.source:
            key = entry.source
        return self.build(entry.input_tokens or 1, entry.hash_ids, entry.block_size, key=key)

    def _prompt(self, content: str, tokens: int, exact: bool, target: int) -> Prompt:
        if self.chat:
            return Prompt(tokens, exact, messages=[{"role": "user", "content": content}], target=target)
        return Prompt(tokens, exact, text=content, target=target)

    def _fit(self, n: int, k: int, hash_ids, block_words: int, key_ident: int, content: str) -> Prompt:
        """Encode and adjust the number of pieces (then append small fillers) until the count
        is n; for tokenizers where pieces are not provably additive, or verify=True."""
        seen: dict[int, tuple[int, str]] = {}
        encodes = 0
        while encodes < 8:
            c = self._count(content)
            encodes += 1
            seen[k] = (c, content)
            if c == n:
                return self._prompt(content, n, True, n)
            step = round((n - c) / self._tpp) or (1 if n > c else -1)
            k_next = max(0, k + step)
            if k_next in seen:
                break
            k = k_next
            content = self._content(k, hash_ids, block_words, key_ident)
        below = [(c, kk, t) for kk, (c, t) in seen.items() if c < n]
        if not below:  # even the fewest pieces tried are too many tokens
            kk = min(seen)
            c, t = seen[kk]
            if kk > 0:
                t = ""
                c = self._count(t)
                encodes += 1
            return self._prompt(t, c, c == n, n)
        c, _, base = max(below)
        suffix = ""
        while c < n and encodes < _MAX_FIT_ENCODES:  # grow by small fillers, a token at a time
            for f in _FILLERS:
                cf = self._count(base + suffix + f)
                encodes += 1
                if cf == n:
                    return self._prompt(base + suffix + f, n, True, n)
                if c < cf < n:
                    c, suffix = cf, suffix + f
                    break
                if encodes >= _MAX_FIT_ENCODES:
                    break
            else:
                break  # no filler adds tokens without overshooting
        return self._prompt(base + suffix, c, c == n, n)


class PromptSynth:
    """The earlier API: approximate prompts without a tokenizer (kept for callers of it)."""

    def __init__(self, seed: int = 0) -> None:
        self._builder = PromptBuilder(seed=seed)

    def prompt(self, n_tokens: int) -> str:
        return self._builder.build(max(1, n_tokens)).text or ""
