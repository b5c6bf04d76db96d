"""What one client process can hold, judged step by step (`llm-locust calibrate`, docs/load-shapes.md
"Worker processes").

A step is a short closed-loop run of one process against the built-in simulator at some number of
streams, each getting the simulator's token rate (TOKENS_PER_STREAM). It held when the run judged
its own figures valid or unknown (not suspect: docs/metrics.md "Client validity") and its TTFT
error p99 against the simulator's own log of when it wrote each first token is at most
TTFT_ERROR_LIMIT_S (the error the accuracy study allows where a run is not flagged), with every
request answered. The ceiling is the token rate read by the largest step that held, every smaller
one having held too; a step whose rate fell short of what it asked (the simulator, sharing the
machine, could not serve more) ends the search with the ceiling "at least" what held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llm_locust.schema import Figures

TTFT_ERROR_LIMIT_S = 0.001  # TTFT error p99 a step may have (client's TTFT minus the server's truth)
SHORT_FACTOR = 0.8  # a step reading less than this share of the tokens/s it asked fell short
TOKENS_PER_STREAM = 100  # tokens/s a stream gets: the simulator's 10 ms iterations
STEPS = (25, 50, 100, 150, 200, 300, 400, 600, 800, 1000)  # streams a step, in order
QUICK_STEPS = (2, 4)


def ttft_errors(records: Iterable[Mapping[str, Any]], token_log: Iterable[Mapping[str, Any]]) -> list[float]:
    """Per ok request in both logs (joined by id): the client's TTFT minus the true one (the
    server's first write less the client's send; one perf_counter clock on one machine), seconds."""
    written = {r["id"]: r["t_tokens"] for r in token_log if r.get("outcome") == "ok" and r.get("t_tokens")}
    out = []
    for r in records:
        first = written.get(r.get("id"))
        chunks = r.get("chunks") or []
        if r.get("outcome") != "ok" or first is None or not chunks:
            continue
        out.append(chunks[0] - (first[0] - r["t_sent"]))
    return out


def p99(xs: list[float]) -> float | None:
    """Nearest-rank 99th percentile, None of nothing."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, -(-99 * len(s) // 100) - 1))]


def judge_step(streams: int, summary: Figures | None, errors: list[float], code: int) -> dict[str, Any]:
    """One step's row: what it asked and read, the run's client verdict, the TTFT error p99, and
    whether it held (with why not). summary: the run's (None: it wrote no results)."""
    rate = float(summary["output_tokens_per_s"] or 0.0) if summary else 0.0
    fig: Mapping[str, Any] = summary or {}
    client = fig.get("client") or {}
    verdict = client.get("verdict") or ("valid" if client.get("valid") else "suspect")
    asked = streams * TOKENS_PER_STREAM
    err = p99(errors)
    why = None
    if code != 0:
        why = f"the run exited {code}"
    elif not fig.get("ok"):
        why = "no request succeeded"
    elif fig.get("failed"):
        why = f"{fig['failed']} request(s) failed"
    elif verdict == "suspect":
        why = "the run judged its figures suspect: " + "; ".join(client.get("reasons") or [])
    elif err is None:
        why = "no request joined with the simulator's token log"
    elif err > TTFT_ERROR_LIMIT_S:
        why = f"TTFT error p99 {err * 1000:.2f} ms over {TTFT_ERROR_LIMIT_S * 1000:g} ms"
    return {
        "streams": streams,
        "asked_tokens_per_s": asked,
        "tokens_per_s": round(rate, 1),
        "verdict": verdict,
        "ttft_error_p99_ms": None if err is None else round(err * 1000, 3),
        "requests": len(errors),
        "held": why is None,
        "short": why is None and rate < SHORT_FACTOR * asked,
        "why": why,
    }


def ceiling(rows: list[dict[str, Any]]) -> tuple[int | None, str]:
    """(tokens/s one process holds, how it was found) from the steps run in order; None when the
    first step did not hold."""
    held = [r for r in rows if r["held"]]
    if not held:
        first = rows[0] if rows else None
        why = first["why"] if first else "no step ran"
        return None, f"not even the first step held ({why})"
    last = held[-1]
    value = int(last["tokens_per_s"] // 100 * 100) or int(last["tokens_per_s"])
    nxt = rows[len(held)] if len(rows) > len(held) else None
    if nxt is not None:
        held_at = f"{last['streams']} streams held ({last['tokens_per_s']:,.0f} tokens/s)"
        how = f"{held_at}; {nxt['streams']} did not: {nxt['why']}"
    elif last["short"]:
        how = (
            f"at least: {last['streams']} streams read {last['tokens_per_s']:,.0f} of {last['asked_tokens_per_s']:,} "
            "tokens/s asked (the simulator, on the same machine, served no more)"
        )
    else:
        how = f"at least: every step run held, up to {last['streams']} streams ({last['tokens_per_s']:,.0f} tokens/s)"
    return value, how


def table(rows: list[dict[str, Any]]) -> str:
    """The steps as printed: streams, tokens/s asked and read, verdict, TTFT error p99, held."""
    lines = ["streams  asked tok/s  read tok/s  client    TTFT err p99  held"]
    for r in rows:
        err = "-" if r["ttft_error_p99_ms"] is None else f"{r['ttft_error_p99_ms']:.2f} ms"
        held = "yes" if r["held"] else f"no: {r['why']}"
        rates = f"{r['asked_tokens_per_s']:>11,}  {r['tokens_per_s']:>10,.0f}"
        lines.append(f"{r['streams']:>7}  {rates}  {r['verdict']:<8}  {err:>12}  {held}")
    return "\n".join(lines)
