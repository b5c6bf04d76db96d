"""The batching model on a fake clock: exact timing, queueing, closed-form capacity."""

import pytest

from llm_locust.sim.engine import Engine, Seq, SimConfig, capacity, decode_rate, simulate

A, B, C = 0.005, 0.001, 0.0001
CFG = SimConfig(slots=8, kv_tokens=10_000, iter_base=A, iter_per_seq=B, iter_per_prefill_token=C)


def test_single_request_timing_is_a_plus_b_plus_prefill():
    [times] = simulate(CFG, [(1.0, 100, 5)])
    ttft = A + B + C * 100
    expected = [1.0 + ttft + k * (A + B) for k in range(5)]
    assert times == pytest.approx(expected, abs=1e-12)


def test_iteration_time_counts_running_sequences_and_prefill_of_admitted_ones():
    # two requests together: iteration 1 prefills both (2 running, 30 prompt tokens)
    t = simulate(CFG, [(0.0, 10, 3), (0.0, 20, 3)])
    first = A + 2 * B + C * 30
    assert t[0] == t[1] == pytest.approx([first, first + A + 2 * B, first + 2 * (A + 2 * B)])


def test_request_arriving_mid_iteration_waits_for_the_next_one():
    it1 = A + B + C * 10
    t = simulate(CFG, [(0.0, 10, 4), (it1 / 2, 50, 2)])
    # second request joins at iteration 2, which prefills its 50 tokens and runs 2 sequences
    it2 = A + 2 * B + C * 50
    assert t[1][0] == pytest.approx(it1 + it2)
    assert t[0][1] == pytest.approx(it1 + it2)  # the prefill slows the running request too
    assert t[1][1] == pytest.approx(it1 + it2 + A + 2 * B)


def test_ninth_request_on_eight_slots_waits_for_a_slot():
    arrivals = [(0.0, 1, 10)] * 8 + [(0.0, 1, 2)]
    t = simulate(CFG, arrivals)
    first8_done = max(ts[-1] for ts in t[:8])
    assert all(ts[-1] == first8_done for ts in t[:8])
    assert t[8][0] > first8_done  # admitted only after a slot frees
    assert t[8][0] == pytest.approx(first8_done + A + B + C * 1)


def test_waiting_and_running_counts_on_the_engine():
    eng = Engine(CFG)
    seqs = [Seq(n_in=1, target=3, reserve=4) for _ in range(9)]
    for s in seqs:
        eng.submit(s)
    assert eng.begin() == pytest.approx(A + 8 * B + 8 * C)
    assert len(eng.running) == 8 and list(eng.waiting) == [seqs[8]]
    got = eng.end()
    assert got == seqs[:8] and all(s.n_out == 1 for s in got)


def test_kv_budget_blocks_admission_until_kv_is_freed():
    cfg = SimConfig(slots=8, kv_tokens=100, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0)
    # each request reserves 10 + 40 = 50 KV tokens: two fit, the third waits for one to finish
    t = simulate(cfg, [(0.0, 10, 40), (0.0, 10, 40), (0.0, 10, 1)])
    assert t[2][0] > t[0][-1]
    eng = Engine(cfg)
    for _ in range(3):
        eng.submit(Seq(10, 40, 50))
    eng.begin()
    assert len(eng.running) == 2 and len(eng.waiting) == 1 and eng.kv_usage == 1.0


def test_fifo_head_of_line_blocks_smaller_requests():
    cfg = SimConfig(slots=8, kv_tokens=100, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0)
    eng = Engine(cfg)
    big, small = Seq(10, 80, 90), Seq(1, 1, 2)
    eng.submit(Seq(10, 10, 20))
    eng.submit(big)
    eng.submit(small)
    eng.begin()
    assert list(eng.waiting) == [big, small]  # small would fit, but FIFO keeps it behind big


def test_request_larger_than_the_cache_is_refused():
    with pytest.raises(ValueError):
        Engine(SimConfig(kv_tokens=10)).submit(Seq(5, 6, 11))


def test_cancel_and_pause():
    eng = Engine(CFG)
    a, b = Seq(1, 5, 6), Seq(1, 5, 6)
    eng.submit(a)
    eng.submit(b)
    eng.begin()
    eng.cancel(a)  # mid-iteration: it gets no token and frees its KV
    assert eng.end() == [b] and eng.kv_used == 6
    b.paused = True
    assert eng.begin() is None and not eng.has_work()
    b.paused = False
    assert eng.begin() == pytest.approx(A + B)


def test_capacity_formulas():
    cap = capacity(CFG)
    assert cap["saturation_concurrency"] == 8
    assert cap["decode_tokens_per_s_saturated"] == pytest.approx(8 / (A + 8 * B))
    assert cap["itl_idle_s"] == pytest.approx(A + B)
    assert decode_rate(CFG, 3) == pytest.approx(3 / (A + 3 * B))
    kv_bound = capacity(SimConfig(slots=8, kv_tokens=500), prompt_tokens=50, output_tokens=50)
    assert kv_bound["max_running"] == 5


@pytest.mark.parametrize("stagger", [False, True])
@pytest.mark.parametrize("n_in,n_out", [(0, 50), (200, 30), (1000, 7)])
def test_capacity_matches_a_simulated_saturated_steady_state(n_in, n_out, stagger):
    cap = capacity(CFG, prompt_tokens=n_in, output_tokens=n_out)
    # open-loop overload: the queue never empties; staggered = the 8 slots finish out of step
    primer = [(0.0, n_in, k + 1) for k in range(8)] if stagger else []
    times = simulate(CFG, primer + [(0.0, n_in, n_out)] * 400)[len(primer) :]
    # window between two request completions well inside the run, so it spans whole batch cycles
    lo, hi = times[40][-1], times[360][-1]
    tokens = sum(lo < x <= hi for ts in times for x in ts)
    assert tokens / (hi - lo) == pytest.approx(cap["output_tokens_per_s"], rel=0.01)
    done = sum(lo < ts[-1] <= hi for ts in times)
    assert done / (hi - lo) == pytest.approx(cap["requests_per_s"], rel=0.03)


def test_capacity_matches_pure_decode_steady_state():
    cfg = SimConfig(slots=4, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0)
    times = simulate(cfg, [(0.0, 1, 1000)] * 4)
    span = times[0][-1] - times[0][0]
    assert 4 * 999 / span == pytest.approx(capacity(cfg)["decode_tokens_per_s_saturated"], rel=1e-9)


# ---------------------------------------------------------------- prefix cache and speculative decoding

from llm_locust.sim.engine import PrefixCache, block_hashes  # noqa: E402

BS = 4
CCFG = SimConfig(
    slots=8,
    kv_tokens=10_000,
    iter_base=A,
    iter_per_seq=B,
    iter_per_prefill_token=C,
    prefix_cache_tokens=1000,
    cache_block=BS,
)


def _words(n, tag="w"):
    return [f"{tag}{i}" for i in range(n)]


def test_block_hashes_are_chained():
    a, b = _words(8), _words(4, "x") + _words(8)[4:]
    ha, hb = block_hashes(a, BS), block_hashes(b, BS)
    assert len(ha) == 2 and len(block_hashes(a[:7], BS)) == 1
    assert ha[1] != hb[1]  # the same second block after a different first one is another block


def test_second_identical_request_hits_the_full_blocks_of_the_first_prompt_and_output():
    prompt, out = _words(10), _words(6, "o")
    eng = Engine(CCFG)
    t = simulate(CCFG, [(0.0, 10, 6), (1.0, 10, 6)], prompts=[prompt, prompt], outputs=[out, out], engine=eng)
    # first: nothing cached; second: the cache holds prompt + output (16 tokens, 4 blocks), but a
    # prompt of 10 can use only the full blocks within its first 9 tokens: 2 blocks, 8 tokens
    assert eng.cache.queries == 20 and eng.cache.hits == 8
    assert t[0][0] == pytest.approx(A + B + C * 10)
    assert t[1][0] - 1.0 == pytest.approx(A + B + C * (10 - 8))  # prefill falls by the cached share


def test_multi_turn_history_hits_prompt_and_reply_blocks():
    p1, out = _words(10), _words(6, "o")
    p2 = p1 + out + _words(5, "u")  # the history re-sent with the reply, then a new turn: 21 tokens
    eng = Engine(CCFG)
    seqs = [Seq(10, 6, 16, prompt=p1, output=out), Seq(21, 3, 24, prompt=p2, output=_words(3, "r"))]
    eng.submit(seqs[0])
    while eng.has_work():
        eng.begin()
        eng.end()
    eng.submit(seqs[1])
    assert eng.begin() == pytest.approx(A + B + C * (21 - 16))  # prompt + reply = 4 full blocks cached
    assert seqs[1].n_cached == 16 and eng.cache.hits == 16 and eng.cache.queries == 31


def test_lru_evicts_the_oldest_blocks():
    cache = PrefixCache(tokens=2 * BS, block=BS)  # two blocks
    a, b = _words(9, "a"), _words(9, "b")
    assert cache.admit(a) == 0 and cache.admit(a) == 8
    assert cache.admit(b) == 0  # b's two blocks push a's out
    assert cache.lookup(a) == 0 and cache.lookup(b) == 8
    assert cache.hits == 16 and cache.queries == 5 * 9


def test_without_the_cache_prompts_are_ignored_and_timing_unchanged():
    prompt = _words(10)
    eng = Engine(CFG)
    t = simulate(CFG, [(0.0, 10, 3), (1.0, 10, 3)], prompts=[prompt, prompt], outputs=[prompt, prompt], engine=eng)
    assert eng.cache is None
    assert t[1][0] - 1.0 == pytest.approx(A + B + C * 10)


SCFG = SimConfig(
    slots=8, kv_tokens=100_000, iter_base=A, iter_per_seq=B, iter_per_prefill_token=C, spec_tokens=3, spec_accept=0.6
)


def test_speculative_decoding_counts_and_token_groups_add_up():
    eng = Engine(SCFG, seed=7)
    n_outs = [1, 2, 17, 40, 100]
    t = simulate(SCFG, [(0.0, 5, n) for n in n_outs], engine=eng)
    assert [len(ts) for ts in t] == n_outs  # every token once, groups add up to the output length
    # tokens after the first come from decode steps: each gives 1 + its accepted drafts
    iterations = [len(set(ts)) for ts in t]
    decode_tokens = sum(n - 1 for n in n_outs)
    assert eng.spec_accepted == decode_tokens - sum(i - 1 for i in iterations)
    assert eng.spec_drafts <= sum(i - 1 for i in iterations)  # the last step drafts nothing when 1 token is left
    assert eng.spec_draft_tokens <= 3 * eng.spec_drafts
    assert eng.spec_accepted_per_pos[0] >= eng.spec_accepted_per_pos[1] >= eng.spec_accepted_per_pos[2]
    assert sum(eng.spec_accepted_per_pos) == eng.spec_accepted
    assert max(ts.count(x) for ts in t for x in ts) <= 4  # at most 1 + K per iteration
    assert all(ts[0] != ts[1] for ts in t if len(ts) > 1)  # the prefill step gives one token


def test_speculative_acceptance_rate_converges_and_is_seeded():
    def run(seed):
        eng = Engine(SCFG, seed=seed)
        simulate(SCFG, [(0.0, 1, 2000)] * 4, engine=eng)
        return eng

    e1, e2 = run(1), run(1)
    assert (e1.spec_drafts, e1.spec_accepted) == (e2.spec_drafts, e2.spec_accepted)
    # each position is accepted with p^(i+1): rate = (p + p^2 + p^3) / 3, mean length 1 + p + p^2 + p^3
    p = 0.6
    assert e1.spec_accepted / e1.spec_draft_tokens == pytest.approx((p + p**2 + p**3) / 3, rel=0.05)
    assert 1 + e1.spec_accepted / e1.spec_drafts == pytest.approx(1 + p + p**2 + p**3, rel=0.05)


def test_spec_accept_one_gives_k_plus_one_tokens_per_step():
    cfg = SimConfig(
        slots=1, kv_tokens=1000, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0, spec_tokens=3, spec_accept=1.0
    )
    eng = Engine(cfg)
    [t] = simulate(cfg, [(0.0, 1, 10)], engine=eng)
    # 1 (prefill step), then 4, 4, then 1 left: no draft
    assert [t.count(x) for x in sorted(set(t))] == [1, 4, 4, 1]
    assert (eng.spec_drafts, eng.spec_draft_tokens, eng.spec_accepted) == (2, 6, 6)
