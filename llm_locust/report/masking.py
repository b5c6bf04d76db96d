"""One mask for every output: the secrets a run holds never leave it, whatever a server echoes.

The process registers its secrets once (`SECRETS.add`: the API key at init); every way out of the
process passes through `mask`: each finished request's error text before it reaches Locust's
tables, the metrics, the record log and the web view (runtime.send.account), every log line
(`LogFilter` on the root handlers: Locust's stderr too), and the results and report files.
A secret shorter than 4 characters is not masked (it would mask ordinary text).

URLs the run reads beside its target (--server-metrics, --gpu-metrics) may carry credentials:
`protect_url` registers them where the URL is read (transport/scraper.py), so the same mask covers
them in every output.
"""

from __future__ import annotations

import html
import json
import logging
import re
from urllib.parse import parse_qsl, quote, unquote, urlsplit

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

    def all(self) -> tuple[str, ...]:
        return tuple(self._forms)


SECRETS = Secrets()


def mask(text: str) -> str:
    return SECRETS.mask(text) if SECRETS and text else text


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
    from llm_locust.report.terminal import install_log_filter as install_terminal_filter

    install_terminal_filter()  # the same handlers: a server's words in a log line print as text


# A query parameter whose name says it carries a credential (?token=..., ?api_key=..., ?sig=...).
_SECRET_PARAM = re.compile(r"(key|token|secret|pass|auth|sig|credential|session|jwt)", re.I)


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
