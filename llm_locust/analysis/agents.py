"""Agents under an SLO tier (issue 39 item 1, after Artificial Analysis's AA-AgentPerf): the most
concurrent agent sessions a server holds while at least a share of the sessions meet every SLO of
a tier. Pure: per-session tallies in, attainment and capacity figures out.

A tier (`--agent-tier ttft=2s,speed=20,share=90%`) is a TTFT limit, a per-session output speed
(tokens/s) and the share of sessions that must meet both. AA-AgentPerf publishes its tiers per
model (e.g. 20 to 180 tokens/s for one model) but not, in what we could find, their exact figures
or which TTFT statistic they judge: here the tier is a setting, and the rule is ours (stated in
docs/verdicts.md, "Agents under an SLO tier"):

- a session's TTFT is the median (p50) of its requests' TTFTs;
- its output speed is its requests' output tokens after the first, over the seconds from their
  first to their last token (summed over its requests: 1 / TPOT, token-weighted);
- a session meets the tier when it had at least one ok request, no failed one, its TTFT is at most
  the limit and its output speed at least the tier's;
- a probe meets the tier when met sessions / judged sessions >= share.

    parse_tier(text) -> Tier
    session_verdict(tally, tier) -> (met, why)
    attainment(sessions, tier) -> dict     {sessions, met, share, needed, ok, failed_by, medians}
    capacity(answer, gpus, power_w) -> dict {agents, per_gpu, per_megawatt, power_w}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# a session's tally (metrics.aggregate.SessionTally): [ok, failed, tokens after the first,
# seconds first-to-last token, ttft seconds...]
TIER_RULE = (
    "a session meets the tier when it had an ok request and no failed one, the median TTFT of its "
    "requests is at most the tier's and its output speed (tokens after the first / seconds from first "
    "to last token, summed over its requests) at least the tier's; a probe meets it when at least "
    "`share` of its sessions do"
)


@dataclass(frozen=True)
class Tier:
    ttft: float  # seconds: the most a session's median TTFT may be
    speed: float  # tokens/s: the least a session's output speed may be
    share: float = 0.9  # of sessions that must meet both

    def spec(self) -> str:
        return f"ttft={self.ttft * 1000:g}ms,speed={self.speed:g},share={self.share * 100:g}%"

    def to_dict(self) -> dict[str, float]:
        return {"ttft_s": self.ttft, "speed_tokens_per_s": self.speed, "share": self.share}


def _seconds(v: str) -> float:
    v = v.strip().lower()
    for unit, scale in (("ms", 1e-3), ("s", 1.0)):
        if v.endswith(unit):
            return float(v[: -len(unit)]) * scale
    return float(v)


def parse_tier(text: str) -> Tier:
    """`ttft=2s,speed=20[,share=90%]` -> Tier; ValueError with the part at fault."""
    got: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("ttft", "speed", "share"):
            raise ValueError(f"agent tier: unexpected {part!r}; expected ttft=2s,speed=20,share=90%")
        try:
            if key == "ttft":
                got[key] = _seconds(val)
            elif key == "share":
                v = val.strip()
                got[key] = float(v[:-1]) / 100 if v.endswith("%") else float(v)
            else:
                got[key] = float(val)
        except ValueError:
            raise ValueError(f"agent tier: {key}={val!r} is not a number") from None
    if "ttft" not in got or "speed" not in got:
        raise ValueError("agent tier: give both ttft= and speed=, e.g. ttft=2s,speed=20,share=90%")
    if got["ttft"] <= 0 or got["speed"] <= 0:
        raise ValueError("agent tier: ttft and speed must be above 0")
    share = got.get("share", 0.9)
    if not 0 < share <= 1:
        raise ValueError(f"agent tier: share {share:g} must be in (0, 100%]")
    return Tier(got["ttft"], got["speed"], share)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def session_figures(tally: Sequence[float]) -> dict[str, Any]:
    """A tally's figures: ok, failed, ttft_p50_s, speed_tokens_per_s (None where not measured)."""
    ok, failed, tokens, seconds, *ttfts = tally
    return {
        "ok": int(ok),
        "failed": int(failed),
        "ttft_p50_s": _median(ttfts) if ttfts else None,
        "speed_tokens_per_s": tokens / seconds if seconds > 0 else None,
    }


def session_verdict(tally: Sequence[float], tier: Tier) -> tuple[bool, str | None]:
    """(met, why not): the tier's rule (TIER_RULE) on one session's tally."""
    f = session_figures(tally)
    if f["failed"]:
        return False, "failed"
    if not f["ok"]:
        return False, "no_ok"
    if f["ttft_p50_s"] is None or f["ttft_p50_s"] > tier.ttft:
        return False, "ttft"
    if f["speed_tokens_per_s"] is not None and f["speed_tokens_per_s"] < tier.speed:
        return False, "speed"
    return True, None


def attainment(sessions: Mapping[str, Sequence[float]], tier: Tier) -> dict[str, Any]:
    """The share of `sessions` (id -> tally) meeting the tier, and why the others did not."""
    met = 0
    why: dict[str, int] = {}
    for tally in sessions.values():
        ok, reason = session_verdict(tally, tier)
        if ok:
            met += 1
        elif reason:
            why[reason] = why.get(reason, 0) + 1
    n = len(sessions)
    share = met / n if n else 0.0
    figs = [session_figures(t) for t in sessions.values()]
    ttfts = [f["ttft_p50_s"] for f in figs if f["ttft_p50_s"] is not None]
    speeds = [f["speed_tokens_per_s"] for f in figs if f["speed_tokens_per_s"] is not None]
    return {
        "sessions": n,
        "met": met,
        "share": share,
        "needed": tier.share,
        "ok": n > 0 and share >= tier.share,
        "failed_by": why,
        # the median session's figures: where the probe stood against the tier
        "session_ttft_p50_s": _median(ttfts) if ttfts else None,
        "session_speed_p50": _median(speeds) if speeds else None,
    }


def broken_line(att: Mapping[str, Any]) -> str:
    """Why a probe broke the tier, for the probe's `broken` list."""
    if not att["sessions"]:
        return "agent tier: no session had a request in the window"
    why = ", ".join(f"{k} {v}" for k, v in sorted(att["failed_by"].items()))
    return f"agent tier: {att['met']}/{att['sessions']} sessions met it ({att['share']:.0%} < {att['needed']:.0%}" + (
        f"; missed by {why})" if why else ")"
    )


def capacity(
    answer: float | None, gpus: int | None, power_w: float | None, power_from: str | None = None
) -> dict[str, Any]:
    """Agents per GPU and per megawatt of the answer. power_w: the GPUs' power in W, all of them
    (the sidecar's mean over the answer's probe, or --gpu-power-w x GPUs); None: not known."""
    out: dict[str, Any] = {"agents": answer}
    if answer is None:
        return out
    if gpus:
        out["per_gpu"] = answer / gpus
    if power_w is not None and power_w > 0:
        out["power_w"] = power_w
        out["power_from"] = power_from
        out["per_megawatt"] = answer / (power_w / 1e6)
    return out


def format_agents(a: Mapping[str, Any]) -> str:
    """The verdict's line under the SLA search's lines."""
    tier = a.get("tier") or {}
    ttft_ms, speed = tier.get("ttft_s", 0) * 1000, tier.get("speed_tokens_per_s", 0)
    head = (
        f"  agents under tier (TTFT p50 <= {ttft_ms:g} ms, >= {speed:g} tokens/s per session,"
        f" {tier.get('share', 0):.0%} of sessions): "
    )
    if a.get("agents") is None:
        return head + "none (the lowest load already missed it)"
    parts = [f"{a['agents']:g} agents"]
    if a.get("per_gpu") is not None:
        parts.append(f"{a['per_gpu']:.3g} per GPU")
    if a.get("per_megawatt") is not None:
        parts.append(f"{a['per_megawatt']:.4g} per MW ({a['power_w']:.0f} W, {a.get('power_from')})")
    return head + ", ".join(parts)


def with_sidecar_power(agents: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The verdict with the GPU sidecar's mean power over the answer's probe (the verdicts' row of
    its step, `gpu_power_watts`, all GPUs) in place of --gpu-power-w; unchanged without one."""
    out = dict(agents)
    row = next((r for r in rows or [] if r.get("step") == agents.get("step")), None)
    power = row.get("gpu_power_watts") if row else None
    if power is None or agents.get("agents") is None:
        return out
    gpus = round(agents["agents"] / agents["per_gpu"]) if agents.get("per_gpu") else None
    out.update(capacity(agents["agents"], gpus, float(power), "gpu sidecar"))
    return out
