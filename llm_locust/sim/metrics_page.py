"""The simulator's /metrics: vLLM's metric names for what its engine did (so a run reads it as it
reads vLLM), and llm_locust_sim_info with the settings its figures depend on."""

from __future__ import annotations

import os

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


def _label_value(v: str) -> str:
    """A Prometheus label value, escaped as the text format wants it."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 elsewhere), as prometheus_client exports it."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def info_labels(app) -> str:
    """llm_locust_sim_info's labels: the model, the engine's settings (sim.engine.SimConfig),
    the pacing and the faults (Prometheus label values: strings)."""
    o, c = app.opts, app.opts.sim
    labels = {
        "model_name": o.model,
        "slots": c.slots,
        "kv_tokens": c.kv_tokens,
        "iter_base": c.iter_base,
        "iter_per_seq": c.iter_per_seq,
        "iter_per_prefill_token": c.iter_per_prefill_token,
        "cache_tokens": c.prefix_cache_tokens,  # the prefix cache (0: none)
        "cache_block": c.cache_block,
        "spec_tokens": c.spec_tokens,
        "spec_accept": c.spec_accept,
        "preempt": str(c.preempt).lower(),
        "fast": str(o.fast).lower(),
        "eos_mean": "" if o.eos_mean is None else o.eos_mean,
        "faults": ",".join(f"{getattr(f, 'spec', f)}={rate:g}" for f, rate in o.faults),
    }
    text = {k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in labels.items()}
    return ",".join(f'{k}="{_label_value(v)}"' for k, v in text.items())


def exposition(app) -> str:
    """The /metrics page: vLLM's names for what the engine did, and the simulator's own info."""
    e = app.engine
    running = app.active if app.opts.fast else len(e.running)
    lab = f'model_name="{app.opts.model}"'
    out = []

    def one(name, typ, help_, samples):
        out.append(f"# HELP {name} {help_}\n# TYPE {name} {typ}\n")
        out.extend(f"{name}{{{labels}}} {float(v)}\n" for labels, v in samples)

    # what this server is: the simulator (its metrics are vLLM's names), and the settings its
    # figures depend on, so that a results file says which simulator it measured and two runs
    # against different ones compare as different servers
    one("llm_locust_sim_info", "gauge", "The llm-locust simulator and its settings.", [(info_labels(app), 1)])
    one("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", [(lab, running)])
    one("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [(lab, len(e.waiting))])
    one("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [(lab, e.kv_usage)])
    one("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [(lab, app.prompt_tokens)])
    one(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        [(lab, app.gen_tokens)],
    )
    one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [(lab, _rss_bytes())])
    one(
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemption from the engine.",
        [(lab, e.preemptions)],
    )
    one(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        [(f'finished_reason="{r}",{lab}', app.success.get(r, 0)) for r in ("length", "stop")],
    )
    if e.cache is not None:
        one(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(lab, e.cache.queries)],
        )
        one(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(lab, e.cache.hits)],
        )
    if app.opts.sim.spec_tokens > 0:
        one(
            "vllm:spec_decode_num_drafts_total",
            "counter",
            "Number of spec decoding drafts.",
            [(lab, e.spec_drafts)],
        )
        one(
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "Number of draft tokens.",
            [(lab, e.spec_draft_tokens)],
        )
        one(
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "Number of accepted tokens.",
            [(lab, e.spec_accepted)],
        )
        one(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "counter",
            "Accepted tokens per draft position.",
            [(f'{lab},position="{i}"', v) for i, v in enumerate(e.spec_accepted_per_pos)],
        )
    name = "vllm:time_to_first_token_seconds"
    out.append(f"# HELP {name} Histogram of time to first token in seconds.\n# TYPE {name} histogram\n")
    acc = 0
    for le, c in zip([*map(str, TTFT_BUCKETS), "+Inf"], app.ttft, strict=True):
        acc += c
        out.append(f'{name}_bucket{{le="{le}",{lab}}} {float(acc)}\n')
    out.append(f"{name}_count{{{lab}}} {float(acc)}\n{name}_sum{{{lab}}} {app.ttft_sum}\n")
    return "".join(out)
