"""Tokenizers for prompt synthesis: count tokens the way the server under test counts them.

`load_tokenizer(path)` reads a Hugging Face *fast* tokenizer: a ``tokenizer.json`` file, or a
directory holding one (plus, optionally, ``tokenizer_config.json`` with the special tokens and
the chat template, ``chat_template.jinja`` or ``chat_template.json``). It uses only the PyPI
``tokenizers`` library (a small Rust wheel); transformers is not needed at run time.

Counting rules (see docs/prompts.md):

- a completions prompt (``/v1/completions``) counts ``encode(text, add_special_tokens=True)``:
  the text plus whatever the tokenizer's post-processor adds (a BOS for Llama-3-style
  tokenizers, nothing for SmolLM2). llama-server adds a BOS exactly when the GGUF says
  ``tokenizer.ggml.add_bos_token``; vLLM encodes with ``add_special_tokens=True``. A tokenizer
  directory rebuilt from a GGUF by ``scripts/real-servers.sh tokenizer`` mirrors that flag.
- a chat prompt counts the chat template rendered with ``add_generation_prompt=True`` and
  encoded with ``add_special_tokens=False`` (the template writes its own BOS, if any), special
  tokens written in the text (``<|im_start|>``) counting as one token each, as servers do.

The chat template comes from the tokenizer directory when it has one; otherwise the
documented ChatML fallback :data:`CHATML_TEMPLATE` is used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Template

__all__ = ["Tokenizer", "TokenizerError", "load_tokenizer", "CHATML_TEMPLATE"]

#: Fallback chat template (ChatML, what SmolLM2 and Qwen use):
#: ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message, then ``<|im_start|>assistant\n``.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded or used (the message says why and what to do)."""


class Tokenizer:
    """A loaded tokenizer: encode, decode, count, and render/count chat prompts.

    Thread-safe for encoding (the Rust tokenizer is); the chat template is compiled once.
    """

    def __init__(
        self,
        backend: Any,
        *,
        name: str = "tokenizer",
        chat_template: str | None = None,
        chat_template_source: str = "",
        special_tokens: Mapping[str, str] | None = None,
    ) -> None:
        self.backend = backend  # tokenizers.Tokenizer
        self.name = name
        if chat_template is None:
            chat_template, chat_template_source = CHATML_TEMPLATE, "chatml-fallback"
        self.chat_template: str = chat_template
        self.chat_template_source: str = chat_template_source or "given"
        self.special_tokens: dict[str, str] = dict(special_tokens or {})
        self._compiled: Template | None = None
        # tokens the post-processor adds to one sequence (BOS and/or EOS): 0 for SmolLM2
        probe = " the"
        self.special_tokens_added: int = self.count(probe, add_special_tokens=True) - self.count(probe)

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self.name!r}, vocab={self.vocab_size}, chat_template={self.chat_template_source}, "
            f"adds {self.special_tokens_added} special token(s))"
        )

    # ------------------------------------------------------------------ basics
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def bos_token(self) -> str:
        return self.special_tokens.get("bos_token", "")

    @property
    def eos_token(self) -> str:
        return self.special_tokens.get("eos_token", "")

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` (special-token strings in it are recognised as such)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = False) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def count(self, text: str, *, add_special_tokens: bool = False) -> int:
        """Number of tokens of ``text``; ``add_special_tokens`` adds the post-processor's BOS/EOS."""
        return len(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def count_batch(self, texts: Sequence[str], *, add_special_tokens: bool = False) -> list[int]:
        return [len(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def count_prompt(self, text: str) -> int:
        """Tokens a server counts for ``text`` sent as a completions prompt (text + BOS if the
        tokenizer adds one)."""
        return self.count(text, add_special_tokens=True)

    # ------------------------------------------------------------------ chat
    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True, **extra: Any
    ) -> str:
        """Render ``messages`` with the chat template (Jinja, sandboxed, rendered as
        transformers renders it: trim_blocks, lstrip_blocks)."""
        if self._compiled is None:
            self._compiled = _compile_template(self.chat_template)
        variables = dict(self.special_tokens)
        variables.update(extra)
        try:
            return self._compiled.render(
                messages=list(messages), add_generation_prompt=add_generation_prompt, **variables
            )
        except Exception as e:  # jinja2 errors, raise_exception() in the template
            raise TokenizerError(
                f"{self.name}: chat template ({self.chat_template_source}) failed to render: {e}"
            ) from e

    def count_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> int:
        """Tokens of the templated chat prompt (what ``usage.prompt_tokens`` reports for
        ``/v1/chat/completions`` when the server uses the same template)."""
        return self.count(self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt))


# ---------------------------------------------------------------------- loading
def load_tokenizer(path: str | os.PathLike[str], *, chat_template: str | None = None) -> Tokenizer:
    """Load a tokenizer from a ``tokenizer.json`` file or a Hugging Face tokenizer directory.

    ``chat_template`` overrides the directory's template: ``"chatml"`` for the ChatML fallback,
    a path to a ``.jinja`` file, or the template text itself.
    Raises :class:`TokenizerError` with a hint when the path is wrong or unsupported.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise TokenizerError(
            f"tokenizer path does not exist: {p} (give a tokenizer.json file or a Hugging Face "
            f"tokenizer directory holding one)"
        )
    if p.is_dir():
        directory, file = p, p / "tokenizer.json"
        if not file.is_file():
            present = sorted(x.name for x in p.iterdir())
            listed = ", ".join(present[:10]) + (f", ... ({len(present) - 10} more)" if len(present) > 10 else "")
            hint = ""
            if any(n in ("tokenizer.model", "vocab.json", "spiece.model") for n in present):
                hint = (
                    " It has only a slow-tokenizer file; convert it once with transformers: "
                    "AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR) writes tokenizer.json."
                )
            raise TokenizerError(f"no tokenizer.json in directory {p} (it holds: {listed or 'nothing'}).{hint}")
    else:
        directory, file = p.parent, p
        if p.suffix.lower() == ".gguf" or _is_gguf(p):
            raise TokenizerError(
                f"{p} is a GGUF model file, not a tokenizer; rebuild a tokenizer directory from its "
                f"metadata (docs/prompts.md; `scripts/real-servers.sh tokenizer` does it for SmolLM2)"
            )
    try:
        from tokenizers import Tokenizer as _Backend
    except ImportError:
        raise TokenizerError("loading a tokenizer needs the 'tokenizers' package: pip install tokenizers") from None
    try:
        backend = _Backend.from_file(str(file))
    except Exception as e:  # serde errors come as Exception subclasses
        raise TokenizerError(f"cannot load tokenizer from {file}: {e}") from None

    config: dict[str, Any] = {}
    cfg_path = directory / "tokenizer_config.json"
    if p.is_dir() and cfg_path.is_file():
        try:
            config = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TokenizerError(f"cannot read {cfg_path}: {e}") from None
    special = {}
    for key in _SPECIAL_NAMES:
        value = _token_content(config.get(key))
        if value is not None:
            special[key] = value

    template, source = None, ""
    if chat_template is not None:
        template, source = _override_template(chat_template)
    elif p.is_dir():
        template, source = _find_template(directory, config)
    name = str(p)
    return Tokenizer(backend, name=name, chat_template=template, chat_template_source=source, special_tokens=special)


def _is_gguf(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _token_content(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):  # serialised AddedToken
        return value["content"]
    return None


def _pick_template(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default") or next((v for v in named.values() if isinstance(v, str)), None)
        return chosen if isinstance(chosen, str) else None
    return None


def _find_template(directory: Path, config: Mapping[str, Any]) -> tuple[str | None, str]:
    t = _pick_template(config.get("chat_template"))
    if t:
        return t, "tokenizer_config.json"
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), "chat_template.jinja"
    js = directory / "chat_template.json"
    if js.is_file():
        try:
            t = _pick_template(json.loads(js.read_text(encoding="utf-8")).get("chat_template"))
        except (OSError, ValueError, AttributeError) as e:
            raise TokenizerError(f"cannot read {js}: {e}") from None
        if t:
            return t, "chat_template.json"
    return None, ""


def _override_template(value: str) -> tuple[str, str]:
    if value.strip().lower() == "chatml":
        return CHATML_TEMPLATE, "chatml-fallback"
    if "{{" in value or "{%" in value:
        return value, "given"
    f = Path(value).expanduser()
    if not f.is_file():
        raise TokenizerError(f"chat template is neither 'chatml', template text, nor an existing file: {value}")
    return f.read_text(encoding="utf-8"), str(f)


def _compile_template(source: str) -> Template:
    """Compile a chat template with the conventions of Hugging Face chat templates."""
    try:
        from jinja2 import TemplateError, ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:  # pragma: no cover - jinja2 comes with Flask/Locust
        raise TokenizerError("chat templates need the 'jinja2' package: pip install jinja2") from None

    def raise_exception(message: str):
        raise TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except TemplateError as e:
        raise TokenizerError(f"chat template does not compile: {e}") from None
