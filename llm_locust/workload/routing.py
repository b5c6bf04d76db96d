"""Client-side routing over several endpoints, a weighted model split, and the session headers a
router in front of the servers reads for session affinity.

Pure Python (hashlib, random, time): importable without Locust or gevent. One `Router` and one
`ModelSplit` per sender process; nothing here is shared between processes, so in-flight counts
and health are each process's own view.

Use (a sender, per request)::

    router = Router(settings.endpoint_list, settings.route, seed=settings.seed)
    models = ModelSplit(settings.model_split, seed=settings.seed)
    names = settings.session_header_names
    ...
    url = router.pick(session)           # session: the conversation / user id, or None
    model = models.pick(session)         # "" when no --model was given (the server's default)
    headers.update(session_headers(names, session))
    router.started(url)
    try:
        ok, connect_failed = send(url, model, headers)   # however the sender does it
    finally:
        router.finished(url, ok, connect_failed)   # exactly once per started(); a cancelled
                                                   # request counts as not ok, not connect_failed

Strategies (`Router(urls, strategy)`, strategy one of `STRATEGIES`, the same names as
settings' ROUTES):

- ``round-robin``: endpoint k, k+1, ... in the given order; exact (n picks over m endpoints all
  up: each gets n/m, +-1).
- ``random``: a seeded uniform draw.
- ``least-in-flight``: the endpoint with the fewest requests in flight (started and not yet
  finished in this process), ties to the first in the given order.
- ``affinity``: rendezvous (highest-random-weight) hashing of the session id: each endpoint
  scores blake2b(url, session) and the highest wins, so a session always lands on the same
  endpoint, sessions spread evenly, and when an endpoint goes down only its own sessions move
  (each to its second choice). No session id: round-robin.

Health: an endpoint is *down* after `down_after` (3) consecutive connection failures
(`finished(url, ok=False, connect_failed=True)`: refused, reset, timed out connecting), and *up*
again on its next success. A reply with an error status is not a connection failure: it breaks
the run of failures (the server answered) without changing the state. While an endpoint is down
every strategy routes around it, except that once per `retry_after` seconds (5 s, measured with
time.monotonic) one pick still goes to it, so it can come back: for ``affinity`` with a session
id, only a session whose first choice it is probes it (no foreign session is moved onto it).
When every endpoint is down, picks go on as if all were up (those requests fail and are
counted).

Session headers: `session_headers(names, session_id)` gives `{name: value}` for every name
(settings.session_header_names). What routers read (researched 2026-12; sources below):

- Shepherd Model Gateway (smg, PyPI `smg` 1.13.0, github.com/smg-project/smg, formerly
  sgl-project's sgl-model-gateway): the routing key is read from the headers named by
  ``--routing-key-headers`` (ordered, first valid wins), default **x-smg-routing-key** only
  (model_gateway/src/config/types.rs `default_routing_key_headers`, main.rs
  `--routing-key-headers ... default_value = "x-smg-routing-key"`, smg/router_args.py). A key is
  opaque non-empty UTF-8 of at most 128 bytes; longer values are ignored
  (routers/common/header_utils.rs ROUTING_KEY_HINT_MAX_BYTES). Policies that honour it:
  ``consistent_hashing`` (hash ring over worker URLs; policies/consistent_hashing.rs),
  ``manual`` (sticky map, new keys assigned by --assignment-mode) and ``prefix_hash`` (a
  routing key replaces the prompt-prefix key; policies/prefix_hash.rs); any other policy
  (round_robin, cache_aware, ...) honours it only with ``--routing-key-override`` (alias
  ``--sticky-sessions``; policies/registry.rs select_worker). ``X-SMG-Target-Worker: <index>``
  picks a worker directly under consistent_hashing / manual. Beware: consistent_hashing
  without a routing key hashes ``authorization`` (then x-forwarded-for, cookie), so a load test
  with one API key and no session header sends everything to one worker.
  x-session-id is NOT read unless named with --routing-key-headers.
- NVIDIA Dynamo: **x-dynamo-session-id** (with x-dynamo-parent-session-id for sub-agents),
  used for session affinity when the frontend runs ``--router-mode kv`` with
  ``--router-session-affinity-ttl-secs`` (docs.nvidia.com/dynamo/dev/agents/
  identify-agent-sessions and .../maintain-session-affinity); ids up to 256 bytes
  (dynamo-llm session_affinity MAX_SESSION_AFFINITY_ID_BYTES).
- llm-d inference scheduler: its ``session-affinity-scorer`` reads no request header of ours; it
  sets a cookie ``llm-d-session`` (base64 of the chosen pod's namespace/name) on the response
  and scores that pod first when the cookie comes back (llm-d/llm-d-inference-scheduler
  pkg/plugins/scorer/session_affinity.go). A client gets affinity there only by echoing that
  cookie, which is not a header we can precompute.

So that a value is always a valid header value and within every router's cap, a session id that
is not printable ASCII of at most 128 bytes is sent as ``s-`` + a 32-hex-digit blake2b digest of
it (stable: the same id, the same value).
"""

from __future__ import annotations

import bisect
import hashlib
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

STRATEGIES = ("round-robin", "random", "least-in-flight", "affinity")
DOWN_AFTER = 3  # consecutive connection failures that mark an endpoint down
RETRY_AFTER_S = 5.0  # a down endpoint gets one probe per this many seconds
MAX_HEADER_VALUE_BYTES = 128  # SMG ignores longer routing keys


def stable_hash(*parts: str) -> int:
    """A 64-bit hash of the parts that is the same in every process and run (never hash())."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(4, "big"))
        h.update(b)
    return int.from_bytes(h.digest(), "big")


class _Endpoint:
    __slots__ = ("url", "in_flight", "sent", "down", "failures", "next_probe")

    def __init__(self, url: str) -> None:
        self.url = url
        self.in_flight = 0
        self.sent = 0
        self.down = False
        self.failures = 0  # consecutive connection failures
        self.next_probe = 0.0  # monotonic time of the next probe while down


class Router:
    """Picks one of `urls` per request (see the module docstring for the strategies and the
    health rule). `pick` does not count anything: call `started(url)` when the request is sent
    and `finished(url, ok, connect_failed)` once when it ends."""

    def __init__(
        self,
        urls: Sequence[str],
        strategy: str = "round-robin",
        seed: int | None = 0,
        *,
        down_after: int = DOWN_AFTER,
        retry_after: float = RETRY_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        urls = [u.rstrip("/") for u in urls]
        if not urls:
            raise ValueError("a router needs at least one endpoint")
        if len(set(urls)) != len(urls):
            raise ValueError("an endpoint is listed twice")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown route {strategy!r}: one of {', '.join(STRATEGIES)}")
        if down_after < 1:
            raise ValueError("down_after must be >= 1")
        self.urls = urls
        self.strategy = strategy
        self.down_after = down_after
        self.retry_after = retry_after
        self._clock = clock
        self._rng = random.Random(seed)
        self._eps = {u: _Endpoint(u) for u in urls}
        self._order = [self._eps[u] for u in urls]
        self._next = 0  # round-robin position
        self._serves: dict[str, frozenset[str]] = {}  # model -> the endpoints serving it (`serve`)

    # ---- picking ----
    def serve(self, models_by_url: Mapping[str, Iterable[str]]) -> None:
        """What each endpoint serves (its /v1/models): from then on a request for a model that
        some endpoints list and others do not goes to those that list it (several models, or
        LoRA adapters loaded on some replicas only, without a gateway). A model no endpoint
        lists goes anywhere."""
        by_model: dict[str, set[str]] = {}
        for url, models in models_by_url.items():
            for m in models:
                by_model.setdefault(m, set()).add(url.rstrip("/"))
        self._serves = {m: frozenset(u) for m, u in by_model.items() if len(u) < len(self._order)}

    def pick(self, session: str | None = None, model: str | None = None) -> str:
        """The endpoint for the next request; `session` (a conversation / user id) matters for
        ``affinity`` only; `model`, after `serve`, limits the choice to the endpoints serving it."""
        order = self._order
        if model and self._serves:
            among = self._serves.get(model)
            if among is not None:
                order = [e for e in order if e.url in among]
        if len(order) == 1:
            return order[0].url
        up = [e for e in order if not e.down]
        if not up:  # every endpoint down: route as if all were up (the requests fail, counted)
            up = order
        elif len(up) < len(order):
            probe = self._probe(session, order)
            if probe is not None:
                return probe.url
        if self.strategy == "affinity" and session:
            return max(up, key=lambda e: stable_hash(e.url, session)).url
        if self.strategy == "random":
            return self._rng.choice(up).url
        if self.strategy == "least-in-flight":
            return min(up, key=lambda e: e.in_flight).url  # min keeps the first of equals
        return self._round_robin(up).url

    def _round_robin(self, up: list[_Endpoint]) -> _Endpoint:
        n = len(self._order)
        for _ in range(n):
            e = self._order[self._next % n]
            self._next = (self._next + 1) % n
            if e in up:
                return e
        return up[0]  # unreachable: up is never empty

    def _probe(self, session: str | None, order: list[_Endpoint]) -> _Endpoint | None:
        """A down endpoint whose back-off has passed, now marked probed (one per retry_after)."""
        now = self._clock()
        if self.strategy == "affinity" and session:
            first = max(order, key=lambda e: stable_hash(e.url, session))
            candidates = [first] if first.down else []
        else:
            candidates = [e for e in order if e.down]
        for e in candidates:
            if now >= e.next_probe:
                e.next_probe = now + self.retry_after
                return e
        return None

    # ---- accounting ----
    def started(self, url: str) -> None:
        e = self._eps[url.rstrip("/")]
        e.in_flight += 1
        e.sent += 1

    def finished(self, url: str, ok: bool, connect_failed: bool = False) -> None:
        """A request to `url` ended: `ok` it succeeded; `connect_failed` no connection was made
        (refused, reset before any answer, connect timeout). Exactly once per `started`."""
        e = self._eps[url.rstrip("/")]
        e.in_flight = max(0, e.in_flight - 1)
        if connect_failed:
            e.failures += 1
            if not e.down and e.failures >= self.down_after:
                e.down = True
                e.next_probe = self._clock() + self.retry_after
        else:
            e.failures = 0
            if ok:
                e.down = False

    def is_down(self, url: str) -> bool:
        return self._eps[url.rstrip("/")].down

    def status(self) -> dict[str, dict]:
        """{url: {"in_flight", "sent", "down", "consecutive_failures"}}, in the given order."""
        return {
            e.url: {"in_flight": e.in_flight, "sent": e.sent, "down": e.down, "consecutive_failures": e.failures}
            for e in self._order
        }


class ModelSplit:
    """Picks the model of each request from a weighted split [(name, share)] (settings'
    `model_split`): a session always gets the same model (a stable hash of its id, salted apart
    from the endpoint hash, into the cumulative shares); without a session, a seeded draw.
    An empty split picks "" (no model given: the server's default); one model is always it."""

    def __init__(self, split: Iterable[tuple[str, float]], seed: int | None = 0) -> None:
        self.split = [(str(n), float(w)) for n, w in split]
        if any(not w > 0 for _, w in self.split):
            raise ValueError("a model's share must be > 0")
        total = sum(w for _, w in self.split)
        self._names = [n for n, _ in self.split]
        self._cum: list[float] = []
        acc = 0.0
        for _, w in self.split:
            acc += w / total
            self._cum.append(acc)
        if self._cum:
            self._cum[-1] = 1.0
        self._rng = random.Random(seed)

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def pick(self, session: str | None = None) -> str:
        if not self._names:
            return ""
        if len(self._names) == 1:
            return self._names[0]
        u = stable_hash("model-split", session) / 2.0**64 if session else self._rng.random()
        return self._names[min(bisect.bisect_right(self._cum, u), len(self._names) - 1)]


def header_value(session_id: str) -> str:
    """`session_id` itself when it is printable ASCII within 128 bytes, else ``s-`` + a stable
    32-hex-digit digest of it."""
    if (
        session_id.isascii()
        and session_id.isprintable()
        and 0 < len(session_id) <= MAX_HEADER_VALUE_BYTES
        and session_id == session_id.strip()
    ):
        return session_id
    return "s-" + hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def session_headers(names: Iterable[str], session_id: str | None) -> dict[str, str]:
    """{name: session id} for every header name; {} when there is no session id (or no name)."""
    if not session_id:
        return {}
    value = header_value(str(session_id))
    return {n: value for n in names}
