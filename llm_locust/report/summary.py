"""The end-of-run summary table, from `figures()` output."""

from __future__ import annotations

from typing import Any

ROWS = (
    ("TTFT", "ttft"),
    ("TTFT incl. queue", "ttft_queue"),
    ("ITL", "itl"),
    ("Inter-chunk", "inter_chunk"),
    ("TPOT", "tpot"),
    ("E2E", "e2e"),
    ("Schedule lag", "schedule_lag"),
)
COLS = ("p50", "p90", "p99", "p99.9", "mean", "max")


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def format_summary(fig: dict[str, Any], title: str = "llm-locust summary") -> str:
    lines = [title, ""]
    head = f"{'latency (ms)':<18}{'count':>8}" + "".join(f"{c:>10}" for c in COLS)
    lines += [head, "-" * len(head)]
    for label, key in ROWS:
        s = fig["latency"].get(key, {})
        lines.append(f"{label:<18}{s.get('count', 0):>8}" + "".join(f"{_ms(s.get(c)):>10}" for c in COLS))
    lines.append("")
    lines.append(
        f"requests: sent {fig['sent']}, ok {fig['ok']}, failed {fig['failed']}"
        f" (error rate {fig['error_rate'] * 100:.1f}%), cancelled at stop {fig['cancelled']},"
        + (f" lost {fig.get('lost', 0)}," if fig.get("lost") or fig.get("workers_lost") else "")
        + f" over {fig['duration_s']:.1f} s"
    )
    if fig.get("lost") or fig.get("workers_lost"):
        lines.append(
            f"workers lost: {fig.get('workers_lost', 0)}; the {fig.get('lost', 0)} request(s) they had in flight at their"
            " last report have no outcome, and what they sent after it is missing from these figures"
        )
    lines.append(
        f"throughput: {fig['output_tokens_per_s']:.1f} output tokens/s, {fig['requests_per_s']:.2f} requests/s,"
        f" concurrency (Little) {fig['concurrency']:.1f}"
    )
    lines.append(
        f"tokens: in {fig['tokens_in']}, out {fig['tokens_out']} (sources {_kv(fig['n_out_sources'])});"
        f" length mismatches {fig['length_mismatch']}/{fig['length_checked']}"
    )
    if fig.get("goodput_requests_per_s"):
        lines.append(
            f"goodput: {fig['goodput_requests_per_s']:.2f} requests/s, {fig['goodput_tokens_per_s']:.1f} tokens/s"
        )
    for api, k in (fig.get("kinds") or {}).items():
        lat = k["latency"]
        lines.append(
            f"{api}: {k['ok']} ok, {k['failed']} failed; latency p50 {_ms(lat.get('p50'))} ms, p99 {_ms(lat.get('p99'))} ms;"
            f" {k['items_per_s']:.1f} items/s, {k['input_tokens_per_s']:.1f} input tokens/s"
        )
    img = fig.get("images") or {}
    if img.get("sent"):
        lines.append(f"images: {img['sent']} sent ({img.get('per_request', 0):.2f} a request), "
                     f"{img.get('bytes', 0) / 1e6:.1f} MB")
    so = fig.get("structured_output") or {}
    if so.get("checked"):
        lines.append(f"structured output: {so.get('valid_rate', 0):.1%} valid against the schema, "
                     f"{so.get('parse_rate', 0):.1%} parse as JSON ({so['checked']} checked)")
    failures = {k: v for k, v in fig["outcomes"].items() if k not in ("ok", "cancelled") and v}
    if failures:
        lines.append("failures by kind:")
        for kind, n in sorted(failures.items(), key=lambda kv: -kv[1]):
            first = next(iter(fig["errors"].get(kind, {})), "")
            lines.append(f"  {kind:<14}{n:>7}  {first[:100]}")
    if fig.get("causes"):
        lines.append("causes: " + ", ".join(f"{c} {n}" for c, n in sorted(fig["causes"].items(), key=lambda kv: -kv[1])))
    client = fig["client"]
    lag = client["loop_lag"].get("p99")
    reasons = client.get("reasons") or []
    verdict = "valid" if client["valid"] else "SUSPECT (figures may be distorted: " + "; ".join(reasons or ["client saturated"]) + ")"
    lines.append(f"client: {verdict}; loop lag p99 {_ms(lag)} ms, CPU max {client['cpu_max_percent']:.0f}%")
    return "\n".join(lines)


def _kv(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"
