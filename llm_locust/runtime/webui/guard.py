"""Who may control a run from the web UI, and with what.

Locust's start form (`POST /swarm`) copies any field it is sent into the parsed options, so
without this a request could point `api_key_env` at any variable and `host` at its own server
(the key then goes there), or name a trace, a record log or a results path. Here:

- the start form may carry only load figures, the host and the run's label (`FORM_FIELDS`), and
  a locustfile's own options that it chose to show in the form; anything else is refused with 403
  before Locust reads it: names, paths, URLs and headers come from the command line or the plan;
- with `--web-login`, every route (Locust's, ours, /metrics) needs a login. A locustfile may set
  up its own (Locust's documented `login_manager.user_loader`); otherwise one user, named by
  LLM_LOCUST_WEB_USER (default "admin"), with the password in LLM_LOCUST_WEB_PASSWORD or, without
  one, a random password printed once on stderr. The session key is random unless
  FLASK_SECRET_KEY is set.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import sys

log = logging.getLogger(__name__)

# Locust's own start-form fields; a locustfile's own options shown in the form (include_in_web_ui,
# Locust's "extra_options") are allowed too. llm-locust's options are never shown there.
FORM_FIELDS = frozenset({"user_count", "spawn_rate", "host", "run_time", "user_classes", "shape_class", "profile"})
USER_ENV = "LLM_LOCUST_WEB_USER"
PASSWORD_ENV = "LLM_LOCUST_WEB_PASSWORD"


def install(web_ui) -> None:
    from flask import jsonify, request

    prefix = (getattr(web_ui.environment.parsed_options, "web_base_path", "") or "").rstrip("/")
    swarm = f"{prefix}/swarm"

    @web_ui.app.before_request
    def only_load_figures_from_the_form():  # noqa: ANN202 - Flask hook
        if request.method == "POST" and request.path == swarm:
            shown = set((web_ui.template_args or {}).get("extra_options") or {})
            extra = sorted(set(request.form) - FORM_FIELDS - shown)
            if extra:
                log.warning("web UI: refused a start request setting %s", ", ".join(extra))
                return jsonify(
                    {
                        "success": False,
                        "message": "the web UI may set only users, spawn rate, run time and "
                        f"host; set {', '.join(extra)} on the command line or in the plan",
                    }
                ), 403
        return None

    if web_ui.web_login:
        _default_login(web_ui)


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
    from flask import redirect, request, session, url_for
    from flask_login import login_user

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
        print(
            f"llm-locust: web UI login: user {user!r}, password {password} (set {PASSWORD_ENV} to choose one)",
            file=sys.stderr,
            flush=True,
        )

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
