"""One mask for every output: the secrets a run holds never leave it, whatever a server echoes.

The process registers its secrets once (`SECRETS.add`: the API key at init); every way out of the
process passes through `mask`: each finished request's error text before it reaches Locust's
tables, the metrics, the record log and the web view (runtime.send.account), every log line
(`LogFilter` on the root handlers: Locust's stderr too), and every file a run hands around:
report.files.write_atomic masks what it writes (`mask_data`), and it is the one writer of the
results, the report, a grid's or a repetition's combined files, JUnit, compare and export files;
what goes to MLflow (parameters, tags, artifacts) is read from those bytes or masked the same way.
A secret shorter than 4 characters is not masked (it would mask ordinary text).

URLs in the settings (--mlflow, --server-metrics, --gpu-metrics) may carry credentials: their
`user:password@` and the values of query parameters named like a credential (`?token=`). `protect_url`
registers them as soon as the settings are read (settings.derive), in every process that reads
them, so the same mask covers them in every output; `redact_url` writes such a URL for a line
without relying on what was registered.
"""

from __future__ import annotations

import html
import json
import logging
import re
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from llm_locust.safe.terminal import install_log_filter as install_terminal_filter

MASK = "***"
MIN_LEN = 4


class Secrets:
    def __init__(self) -> None:
        self._forms: list[str] = []  # each secret as written, JSON-escaped and HTML-escaped

    def add(self, secret: str | None) -> None:
        if not secret or len(secret) < MIN_LEN:
            return
        for form in (secret, json.dumps(secret)[1:-1], html.escape(secret, quote=True)):
            if form not in self._forms:
                self._forms.append(form)
        self._forms.sort(key=len, reverse=True)  # a longer form first: no half-masked secret

    def __bool__(self) -> bool:
        return bool(self._forms)

    def mask(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        return text

    def mask_bytes(self, data: bytes) -> bytes:
        """`mask` on UTF-8 bytes (a file's content), without decoding them."""
        for form in self._forms:
            raw = form.encode("utf-8")
            if raw in data:
                data = data.replace(raw, MASK.encode())
        return data

    def all(self) -> tuple[str, ...]:
        return tuple(self._forms)


SECRETS = Secrets()


def mask(text: str) -> str:
    return SECRETS.mask(text) if SECRETS and text else text


def mask_bytes(data: bytes) -> bytes:
    return SECRETS.mask_bytes(data) if SECRETS and data else data


def mask_data(data: bytes | str) -> bytes | str:
    """The choke point of every file written (report.files.write_atomic): `data` with this
    process's secrets masked, bytes as bytes, text as text."""
    return mask_bytes(data) if isinstance(data, bytes) else mask(data)


class LogFilter(logging.Filter):
    """Masks the secrets in a log record's final message (its arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if SECRETS:
            msg = record.getMessage()
            masked = SECRETS.mask(msg)
            if masked != msg:
                record.msg, record.args = masked, None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = SECRETS.mask(record.exc_text)
        return True


def protect(secret: str | None) -> None:
    """Register a secret of this process and mask the log lines (each process does, workers too)."""
    SECRETS.add(secret)
    install_log_filter()


def install_log_filter() -> None:
    """On every handler of the root logger (the filters of a logger do not see its children's records)."""
    f = LogFilter()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(x, LogFilter) for x in handler.filters):
            handler.addFilter(f)
    install_terminal_filter()  # the same handlers: a server's words in a log line print as text


# A query parameter whose name says it carries a credential (?token=..., ?api_key=..., ?sig=...).
_CREDENTIAL = "key|token|secret|pass|auth|sig|credential|session|jwt"
_SECRET_PARAM = re.compile(f"({_CREDENTIAL})", re.I)


def url_secrets(url: str) -> list[str]:
    """The credentials written in a URL: its user:password (and the password alone), a user name
    given without a password (http://TOKEN@host), and the values of query parameters whose names
    say they carry one; each as written and percent-decoded."""
    parts = urlsplit(url)
    found: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        found.append(userinfo)
        if parts.password:
            found.append(parts.password)
        elif parts.username:
            found.append(parts.username)
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if _SECRET_PARAM.search(name):
            found.append(value)
            found.append(quote(value, safe=""))
    out: list[str] = []
    for s in found:
        for form in (s, unquote(s)):
            if form and form not in out:
                out.append(form)
    return out


def protect_url(url: str | None) -> None:
    """Register the credentials a URL carries (see url_secrets) as this process's secrets."""
    for secret in url_secrets(url or ""):
        protect(secret)


_USERINFO = re.compile(r"(://)[^/@\s]+@")
_SECRET_QUERY = re.compile(rf"([?&][^=&#\s]*(?:{_CREDENTIAL})[^=&#\s]*=)[^&#\s]+", re.I)


def redact_url(text: str) -> str:
    """A URL, or a line holding URLs, fit to show: `user:password@` as `***@`, the value of each
    query parameter named like a credential as `***` (http://***@host/x?token=***), whatever their
    length, and any registered secret masked."""
    return mask(_SECRET_QUERY.sub(rf"\1{MASK}", _USERINFO.sub(rf"\1{MASK}@", text)))
