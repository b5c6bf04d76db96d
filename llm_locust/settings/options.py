"""The project's command-line options, added to Locust's parser, and the settings read from them.

Locust passes custom options to workers only with the spawn message, so users read them at
`on_start` (test start), never at import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources

from llm_locust.protocols.base import Timeouts
from llm_locust.settings.plan import DEFAULT_DURATION, DEFAULT_WARMUP
from llm_locust.protocols import API_NAMES

DEFAULT_API = "openai-chat"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


def sample_trace_path() -> str:
    return str(resources.files("llm_locust") / "data" / "sample_trace.jsonl")


def add_arguments(parser) -> None:
    g = parser.add_argument_group("llm-locust", "LLM inference server options")
    g.add_argument("--api", default=DEFAULT_API, choices=API_NAMES, help="wire format of the server's streaming API")
    g.add_argument("--model", default="", help="model name; default: the first one /v1/models lists")
    g.add_argument(
        "--api-key-env",
        default=DEFAULT_API_KEY_ENV,
        help="name of the environment variable holding the API key (sent as a Bearer token, never logged)",
    )
    g.add_argument("--trace", default="", help="workload trace file (see docs/traces.md); default: bundled sample")
    g.add_argument("--trace-format", default="", help="force the trace format instead of detecting it")
    g.add_argument("--tokenizer", default="", help="tokenizer.json or HF directory: prompts of exact token length")
    g.add_argument("--speed", type=float, default=1.0, help="replay: trace time runs this many times faster")
    g.add_argument("--start-offset", type=float, default=0.0, help="replay: skip this many trace seconds")
    g.add_argument("--duration", type=float, default=0.0, help="replay: trace seconds to replay (0: to the end)")
    g.add_argument("--loops", type=int, default=1, help="replay: passes over the trace window")
    g.add_argument("--max-in-flight", type=int, default=0, help="replay: cap on requests in flight per worker (0: none)")
    g.add_argument("--think-time", type=float, default=0.0, help="seconds between a reply and the next request of a user or conversation")
    g.add_argument("--max-tokens", type=int, default=0, help="output tokens per request; default: the trace's")
    g.add_argument("--max-tokens-cap", type=int, default=0, help="upper bound on the trace's output lengths")
    g.add_argument(
        "--no-force-length",
        action="store_true",
        default=False,
        help="do not ask the server to emit exactly max_tokens (ignore_eos / min_tokens)",
    )
    g.add_argument("--continuous-usage", action="store_true", default=False, help="ask vLLM for usage on every chunk")
    g.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to open a connection")
    g.add_argument("--no-progress-timeout", type=float, default=60.0, help="seconds without a byte before giving up")
    g.add_argument("--request-timeout", type=float, default=600.0, help="seconds for a whole request")
    g.add_argument(
        "--slo",
        default="",
        help="SLOs in seconds, e.g. ttft=0.5,tpot=0.05,ttft_p50=0.2,error_rate=0.01 (see docs/load-shapes.md)",
    )
    g.add_argument("--ladder", default="", help="stepped load, e.g. concurrency:1..64, rate:1..16:+1, speed:0.5,1,2")
    g.add_argument("--warmup", type=float, default=DEFAULT_WARMUP, help="ladder: seconds discarded at the start of each step")
    g.add_argument("--step-duration", type=float, default=DEFAULT_DURATION, help="ladder: seconds per step, warm-up included")
    g.add_argument("--step-requests", type=int, default=0, help="ladder: end a step's measurement after this many requests")
    g.add_argument("--stable-window", type=float, default=0.0, help="ladder: extend a step until throughput over windows of this many seconds is stable")
    g.add_argument("--stable-tolerance", type=float, default=0.05, help="ladder: stability tolerance (fraction of the mean)")
    g.add_argument("--stable-max-extend", type=float, default=0.0, help="ladder: at most this many seconds of extension per step")
    g.add_argument("--arrivals", default="poisson", choices=("poisson", "constant"), help="rate ladder: inter-arrival times")
    g.add_argument("--max-error-rate", type=float, default=0.05, help="ladder: stop early above this error rate")
    g.add_argument("--no-early-stop", action="store_true", default=False, help="ladder: always run every step")
    g.add_argument("--results", default="", help="write the results JSON to this path")
    g.add_argument("--report", default="", help="write the HTML report of the run to this path (see `llm-locust report`)")
    g.add_argument(
        "--record-log",
        default="",
        help="append one JSON line per finished request to this file (workers add .workerN)",
    )
    g.add_argument(
        "--server-metrics",
        default="",
        help="the inference server's Prometheus URL, read beside each step (default: HOST/metrics; 'off': none)",
    )
    g.add_argument("--gpu-metrics", default="", help="the GPU sidecar's URL (llm-locust gpu-sidecar), read beside each step")
    g.add_argument(
        "--metrics-interval",
        type=float,
        default=2.0,
        help="mean seconds between reads of --server-metrics and --gpu-metrics (each wait 0.5-1.5x this; default 2)",
    )
    g.add_argument("--prometheus-port", type=int, default=0, help="serve Prometheus metrics on this port (master / local; the web UI always has /metrics)")
    g.add_argument("--prometheus-host", default="127.0.0.1", help="address for --prometheus-port")
    g.add_argument("--seed", type=int, default=0, help="seed for prompt synthesis")


_TOKENIZERS: dict[str, object] = {}


def parse_slos(text: str) -> dict[str, float]:
    from llm_locust.analysis.steps import check_slo_names, slo_vocabulary

    slos: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            slos[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"bad SLO {part!r}: expected NAME=SECONDS with NAME {slo_vocabulary()}") from None
        if not sep:
            raise ValueError(f"bad SLO {part!r}: expected NAME=SECONDS")
    check_slo_names(slos)
    return slos


@dataclass(slots=True)
class Settings:
    api: str = DEFAULT_API
    model: str = ""
    api_key: str | None = field(default=None, repr=False)  # never printed
    api_key_env: str = DEFAULT_API_KEY_ENV
    trace: str = ""
    trace_format: str = ""
    tokenizer: str = ""
    speed: float = 1.0
    start_offset: float = 0.0
    duration: float = 0.0
    loops: int = 1
    max_in_flight: int = 0
    think_time: float = 0.0
    max_tokens: int = 0
    max_tokens_cap: int = 0
    force_length: bool = True
    continuous_usage: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)
    slos: dict[str, float] = field(default_factory=dict)
    ladder: str = ""
    warmup: float = DEFAULT_WARMUP
    step_duration: float = DEFAULT_DURATION
    step_requests: int = 0
    stable_window: float = 0.0
    stable_tolerance: float = 0.05
    stable_max_extend: float = 0.0
    arrivals: str = "poisson"
    max_error_rate: float = 0.05
    no_early_stop: bool = False
    results: str = ""
    report: str = ""
    seed: int = 0

    @classmethod
    def from_options(cls, opts) -> "Settings":
        get = lambda name, default: getattr(opts, name, default) if opts is not None else default  # noqa: E731
        key_env = get("api_key_env", DEFAULT_API_KEY_ENV)
        return cls(
            api=get("api", DEFAULT_API),
            model=get("model", ""),
            api_key=os.environ.get(key_env) or None,
            api_key_env=key_env,
            trace=get("trace", "") or sample_trace_path(),
            trace_format=get("trace_format", ""),
            tokenizer=get("tokenizer", ""),
            speed=get("speed", 1.0),
            start_offset=get("start_offset", 0.0),
            duration=get("duration", 0.0),
            loops=get("loops", 1),
            max_in_flight=get("max_in_flight", 0),
            think_time=get("think_time", 0.0),
            max_tokens=get("max_tokens", 0),
            max_tokens_cap=get("max_tokens_cap", 0),
            force_length=not get("no_force_length", False),
            continuous_usage=get("continuous_usage", False),
            timeouts=Timeouts(
                connect=get("connect_timeout", 10.0),
                no_progress=get("no_progress_timeout", 60.0),
                total=get("request_timeout", 600.0),
            ),
            slos=parse_slos(get("slo", "")),
            ladder=get("ladder", ""),
            warmup=get("warmup", DEFAULT_WARMUP),
            step_duration=get("step_duration", DEFAULT_DURATION),
            step_requests=get("step_requests", 0),
            stable_window=get("stable_window", 0.0),
            stable_tolerance=get("stable_tolerance", 0.05),
            stable_max_extend=get("stable_max_extend", 0.0),
            arrivals=get("arrivals", "poisson"),
            max_error_rate=get("max_error_rate", 0.05),
            no_early_stop=get("no_early_stop", False),
            results=get("results", ""),
            report=get("report", ""),
            seed=get("seed", 0),
        )

    @property
    def request_slos(self) -> dict[str, float]:
        """The SLOs a single request can be judged by (goodput)."""
        from llm_locust.analysis.steps import request_slos

        return request_slos(self.slos)

    def tokenizer_obj(self):
        """The tokenizer named by --tokenizer, loaded once per process; None without one."""
        if not self.tokenizer:
            return None
        from llm_locust.workload.tokenizer import load_tokenizer

        cached = _TOKENIZERS.get(self.tokenizer)
        if cached is None:
            cached = _TOKENIZERS[self.tokenizer] = load_tokenizer(self.tokenizer)
        return cached

    def public(self) -> dict:
        """Settings safe to store in results: the key's variable name, never the key."""
        return {
            "api": self.api,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "api_key_set": self.api_key is not None,
            "trace": self.trace,
            "trace_format": self.trace_format,
            "tokenizer": self.tokenizer,
            "replay": {
                "speed": self.speed,
                "start_offset": self.start_offset,
                "duration": self.duration,
                "loops": self.loops,
                "max_in_flight": self.max_in_flight,
            },
            "think_time": self.think_time,
            "max_tokens": self.max_tokens,
            "max_tokens_cap": self.max_tokens_cap,
            "force_length": self.force_length,
            "continuous_usage": self.continuous_usage,
            "timeouts": {"connect": self.timeouts.connect, "no_progress": self.timeouts.no_progress, "total": self.timeouts.total},
            "slos": self.slos,
            "ladder": {
                "spec": self.ladder,
                "warmup": self.warmup,
                "step_duration": self.step_duration,
                "step_requests": self.step_requests,
                "stable": {"window": self.stable_window, "tolerance": self.stable_tolerance, "max_extend": self.stable_max_extend},
                "arrivals": self.arrivals,
                "max_error_rate": self.max_error_rate,
                "early_stop": not self.no_early_stop,
            },
            "seed": self.seed,
        }
