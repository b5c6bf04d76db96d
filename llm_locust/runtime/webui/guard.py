"""Who may control a run from the web UI, and with what.

Locust's start form (`POST /swarm`) copies any field it is sent into the parsed options, and any
page the user opens may post to the web UI (a browser sends the request, with no way for the page
to read the answer, but the run starts). Without this, a page could point `host` at its own server
(the API key then goes there), or `api_key_env` at any variable, or name a trace, a record log or a
results path. Here:

- **every state-changing request** (any method but GET, HEAD and OPTIONS: Locust's /swarm, /stop,
  /stats/reset and /user, our /llm/login) must come from the web UI's own page: its `Origin` (or,
  without one, its `Referer`) must be the address the request was sent to (`Host`), a browser's
  `Sec-Fetch-Site` must say same-origin, and `Host` must name this machine (an IP address,
  localhost, its host name, the --web-host address), so that a page whose own name resolves to
  this machine (DNS rebinding) is refused too. A request that carries none of these headers is
  not a browser's (curl, scripts): it passes. Origins in --web-origins (a
  comma-separated list, for a reverse proxy with a name of its own) pass as well;
- the start form may carry only load figures, the run's label and `host` equal to the target
  the run was started with (`FORM_FIELDS`), and a locustfile's own options that it chose to show in
  the form; anything else is refused with 403 before Locust reads it: the target, names, paths,
  URLs and headers come from the command line or the plan; the user-class editor (`POST /user`)
  may set weights, counts and tasks, not a class's host;
- **every request** (any method, any route: Locust's, ours, /metrics) must be sent to a `Host`
  that names this machine (as above, or a --web-origins host), else 403: a page whose own name
  resolves to this machine (DNS rebinding) is the same origin as the web UI for the browser, and
  could otherwise read /llm/data (the target's URL), /logs, /stats/requests and /metrics;
- the login's session cookie is SameSite=Strict and HttpOnly (Secure when the UI serves TLS);
- with `--web-login`, every route (Locust's, ours, /metrics) needs a login. A locustfile may set
  up its own (Locust's documented `login_manager.user_loader`); otherwise one user, named by
  LLM_LOCUST_WEB_USER (default "admin"), with the password in LLM_LOCUST_WEB_PASSWORD or, without
  one, a random password: printed on stderr when stderr is a terminal, else written to a file
  only its owner can read (0600; its path is printed, the password never is: a CI log keeps
  stderr). The session key is random unless FLASK_SECRET_KEY is set;
- a web UI that listens beyond this machine (--web-host 0.0.0.0) without --web-login gets a
  warning on stderr: anyone who can reach the port can start and stop runs.
"""

from __future__ import annotations

import atexit
import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from flask import jsonify, redirect, request, session, url_for
from flask_login import login_user

log = logging.getLogger(__name__)

# Locust's own start-form fields; a locustfile's own options shown in the form (include_in_web_ui,
# Locust's "extra_options") are allowed too. llm-locust's options are never shown there.
FORM_FIELDS = frozenset({"user_count", "spawn_rate", "host", "run_time", "user_classes", "shape_class", "profile"})
# What the user-class editor (POST /user) may set; "host" only as it is.
USER_CLASS_FIELDS = frozenset({"user_class_name", "weight", "fixed_count", "tasks", "host"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
USER_ENV = "LLM_LOCUST_WEB_USER"
PASSWORD_ENV = "LLM_LOCUST_WEB_PASSWORD"
ORIGINS_OPTION = "--web-origins"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def install(web_ui) -> None:
    """The checks above, as before_request hooks on the web UI's app (before any route runs)."""
    prefix = (getattr(web_ui.environment.parsed_options, "web_base_path", "") or "").rstrip("/")
    names = _machine_names(web_ui.host)
    trusted = trusted_origins(getattr(web_ui.environment.parsed_options, "web_origins", ""))

    @web_ui.app.before_request
    def only_this_machines_names():  # noqa: ANN202 - Flask hook: every route, every method
        why = host_problem(request.headers.get("Host"), names, trusted)
        if why is None:
            return None
        log.warning("web UI: refused %s %s: %s", request.method, request.path, why)
        return jsonify({"success": False, "message": f"refused: {why}"}), 403

    @web_ui.app.before_request
    def only_the_ui_itself_changes_state():  # noqa: ANN202 - Flask hook
        why = origin_problem(request.method, request.headers, names, trusted)
        if why is None:
            return None
        log.warning("web UI: refused %s %s: %s", request.method, request.path, why)
        return jsonify({"success": False, "message": f"refused: {why}"}), 403

    @web_ui.app.before_request
    def only_load_figures_from_the_form():  # noqa: ANN202 - Flask hook
        if request.method != "POST":
            return None
        if request.path == f"{prefix}/swarm":
            shown = set((web_ui.template_args or {}).get("extra_options") or {})
            why = form_problem(request.form, shown, web_ui.environment.host)
        elif request.path == f"{prefix}/user":
            why = user_class_problem(request.get_data(cache=True), web_ui.environment)
        else:
            return None
        if why is None:
            return None
        log.warning("web UI: refused a %s request: %s", request.path, why)
        return jsonify({"success": False, "message": why}), 403

    _cookie_rules(web_ui)
    _warn_if_open(web_ui)
    if web_ui.web_login:
        _default_login(web_ui)


def origin_problem(
    method: str, headers, machine_names: frozenset[str], trusted: frozenset[str] = frozenset()
) -> str | None:
    """Why a request may not change the run's state (None: it may). `headers`: a mapping with
    case-insensitive get (Flask's, or a dict with these exact names); `trusted`: --web-origins."""
    if method.upper() in SAFE_METHODS:
        return None
    host = (headers.get("Host") or "").strip().lower()
    origin = headers.get("Origin")
    source = origin.strip().lower() if origin is not None else _origin_of(headers.get("Referer"))
    if source is not None and source in trusted:
        return None
    site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
    if site and site not in ("same-origin", "none"):
        return f"a {site} request (Origin {origin or '-'}): only the web UI's own page may start or stop a run"
    if source is not None and (source == "null" or _netloc(source) != host):
        return (
            f"sent from {source}, not from this web UI ({host or 'no Host'}); "
            f"a proxy with a name of its own: add its origin to {ORIGINS_OPTION}"
        )
    if not _known_host(host, machine_names, trusted):
        return (
            f"sent to Host {host or '(none)'}, which does not name this machine; "
            f"a proxy with a name of its own: add its origin to {ORIGINS_OPTION}"
        )
    return None


def host_problem(host_header: str | None, machine_names: frozenset[str], trusted: frozenset[str]) -> str | None:
    """Why a request, any method, may not be answered (None: it may): its `Host` names another
    machine. A page whose own name resolves to 127.0.0.1 (DNS rebinding) is the same origin as
    this web UI for the browser, so that page could read every GET (the target's URL in
    /llm/data, /logs, /stats/requests, /metrics); its requests carry its own name as `Host`."""
    host = (host_header or "").strip().lower()
    if _known_host(host, machine_names, trusted):
        return None
    return (
        f"sent to Host {host}, which does not name this machine (a page's own name resolving here: DNS "
        f"rebinding); a proxy with a name of its own: add its origin to {ORIGINS_OPTION}"
    )


def _cookie_rules(web_ui) -> None:
    """The login's session cookie: never sent with a request another site starts (SameSite=Strict:
    a cross-site form post carries no login), never readable by a script (HttpOnly), and over
    HTTPS only when the web UI serves HTTPS (--tls-cert / --tls-key). The same for flask_login's
    remember-me cookie, should a locustfile's own login set one."""
    tls = bool(getattr(web_ui, "tls_cert", None) and getattr(web_ui, "tls_key", None))
    for cookie in ("SESSION_COOKIE", "REMEMBER_COOKIE"):
        web_ui.app.config[f"{cookie}_SAMESITE"] = "Strict"
        web_ui.app.config[f"{cookie}_HTTPONLY"] = True
        web_ui.app.config[f"{cookie}_SECURE"] = tls


def form_problem(form, shown: set[str], target: str | None) -> str | None:
    """Why a start form may not start a run (None: it may): a field that is not a load figure,
    or a host other than the run's target."""
    extra = sorted(set(form) - FORM_FIELDS - shown)
    if extra:
        return (
            "the web UI may set only users, spawn rate and run time; "
            f"set {', '.join(extra)} on the command line or in the plan"
        )
    if "host" in form and not _same_url(form.get("host"), target):
        return (
            f"the web UI cannot change the target (given: {(target or 'none')!s}); "
            "set --host on the command line or host: in the plan"
        )
    return None


def user_class_problem(raw: bytes, environment) -> str | None:
    """Why a user-class edit (POST /user, JSON) may not be applied: a field other than weights,
    counts and tasks, or a host other than the class's own."""
    try:
        doc = json.loads(raw or b"{}")
    except ValueError:
        return "the user-class edit is not JSON"
    if not isinstance(doc, dict):
        return "the user-class edit is not a JSON object"
    extra = sorted(set(doc) - USER_CLASS_FIELDS)
    if extra:
        return f"the web UI may set only weights, counts and tasks of a user class, not {', '.join(extra)}"
    if "host" in doc:
        cls = (getattr(environment, "available_user_classes", None) or {}).get(doc.get("user_class_name"))
        own = getattr(cls, "host", None) or environment.host
        if doc["host"] not in (None, "") and not _same_url(doc["host"], own):
            return "the web UI cannot change the target; set --host on the command line or host: in the plan"
    return None


def _same_url(given, target: str | None) -> bool:
    norm = (str(given or "")).strip().rstrip("/")
    return norm == (target or "").strip().rstrip("/")


def _origin_of(referer: str | None) -> str | None:
    if not referer:
        return None
    p = urlsplit(referer.strip())
    return f"{p.scheme}://{p.netloc}".lower() if p.scheme and p.netloc else "null"


def _netloc(origin: str) -> str:
    """An origin's host[:port] as a Host header gives it (the scheme's default port omitted)."""
    p = urlsplit(origin)
    default = {"http": 80, "https": 443}.get(p.scheme)
    try:
        port = p.port
    except ValueError:
        return "?"
    host = p.netloc.rpartition("@")[2].lower()
    if port is not None and port == default:
        host = host.rsplit(":", 1)[0]
    return host


def _hostname(host_header: str) -> str:
    """The name or address part of a Host header (no port, no brackets)."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _known_host(host_header: str, machine_names: frozenset[str], trusted: frozenset[str]) -> bool:
    if not host_header:
        return True  # HTTP/1.0 without Host: not a browser's request
    name = _hostname(host_header)
    try:
        ipaddress.ip_address(name)
        return True  # a page cannot make a browser send its own name as an address
    except ValueError:
        pass
    return name in machine_names or any(_hostname(_netloc(o)) == name for o in trusted)


def _machine_names(bind_host: str | None) -> frozenset[str]:
    """Names a browser on or beside this machine may call it by."""
    names = set(LOOPBACK_NAMES)
    for get in (socket.gethostname, socket.getfqdn):
        try:
            names.add(get().lower())
        except OSError:
            pass
    if bind_host and bind_host not in ("*", ""):
        names.add(bind_host.lower())
    return frozenset(n for n in names if n)


def trusted_origins(raw: str) -> frozenset[str]:
    """--web-origins: origins (scheme://host[:port], comma-separated) trusted beside the UI's own address."""
    return frozenset(o.strip().rstrip("/").lower() for o in (raw or "").split(",") if o.strip())


def is_loopback(bind_host: str | None) -> bool:
    """Whether the web UI's listening address is reachable from this machine only."""
    if not bind_host or bind_host in ("*", "0.0.0.0", "::"):
        return False
    if bind_host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bind_host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def _warn_if_open(web_ui) -> None:
    if web_ui.web_login or is_loopback(web_ui.host):
        return
    where = web_ui.host or "all interfaces"
    print(
        f"llm-locust: warning: the web UI listens on {where} without a login: anyone who can reach "
        "its port can start and stop runs against the target; add --web-login (or keep "
        "--web-host 127.0.0.1 and reach it through an SSH tunnel)",
        file=sys.stderr,
        flush=True,
    )


class _User:
    """flask_login's user protocol, for the one built-in user."""

    is_authenticated = True
    is_active = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.name = name

    def get_id(self) -> str:
        return self.name


def _default_login(web_ui) -> None:
    app = web_ui.app
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = os.environ.get("FLASK_SECRET_KEY") or secrets.token_hex(32)
    manager = web_ui.login_manager
    if getattr(manager, "_user_callback", None) is not None:
        return  # the locustfile set up its own login
    user = os.environ.get(USER_ENV) or "admin"
    password = os.environ.get(PASSWORD_ENV)
    if not password:
        password = secrets.token_urlsafe(12)
        _tell_password(user, password, getattr(web_ui.environment.parsed_options, "web_port", None))

    @manager.user_loader
    def load_user(name: str):  # noqa: ANN202
        return _User(name) if name == user else None

    prefix = (getattr(web_ui.environment.parsed_options, "web_base_path", "") or "").rstrip("/")
    web_ui.auth_args = {**(web_ui.auth_args or {}), "username_password_callback": f"{prefix}/llm/login"}

    @app.route(f"{prefix}/llm/login", methods=["POST"])
    def llm_login():  # noqa: ANN202 - Flask view
        given_user = request.form.get("username", "")
        given = request.form.get("password", "")
        if hmac.compare_digest(given_user.encode(), user.encode()) and hmac.compare_digest(
            given.encode(), password.encode()
        ):
            login_user(_User(user))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "wrong user name or password"
        return redirect(url_for("locust.login"))


def _tell_password(user: str, password: str, port) -> None:
    """The generated password: on a terminal, printed; else (CI, a log file) written to a file
    only this user can read, and its path printed: logs keep stderr."""
    hint = f"set {PASSWORD_ENV} to choose one"
    if sys.stderr.isatty():
        print(f"llm-locust: web UI login: user {user!r}, password {password} ({hint})", file=sys.stderr, flush=True)
        return
    try:
        path = password_file(user, password, port)
    except OSError as e:
        print(
            f"llm-locust: --web-login: cannot write the generated password to a private file ({e}), and "
            f"stderr is not a terminal (a log would keep it): {hint}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(2)
    print(
        f"llm-locust: web UI login: user {user!r}, password in {path} (readable by you only; "
        f"removed when this process ends; {hint})",
        file=sys.stderr,
        flush=True,
    )


def password_dir() -> Path:
    """$XDG_RUNTIME_DIR (a per-user 0700 directory) when there is one, else the user's cache."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and os.path.isdir(run) and os.access(run, os.W_OK):
        return Path(run) / "llm-locust"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "llm-locust"


def password_file(user: str, password: str, port) -> Path:
    """A new 0600 file (in a 0700 directory) holding the login, removed at exit."""
    folder = password_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f"web-login-{port or 'ui'}-", suffix=".txt", dir=folder)  # 0600, O_EXCL
    with os.fdopen(fd, "w") as f:
        f.write(f"user {user}\npassword {password}\n")
    atexit.register(_remove, name)
    return Path(name)


def _remove(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass
