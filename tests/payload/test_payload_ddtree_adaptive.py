"""The per-round budget policy (overlay/.../ddtree_adaptive.py), on the CPU with fake CUDA events."""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from fake_cuda_events import FakeGPU  # noqa: E402
from payload_modules import load_payload_module  # noqa: E402

da = load_payload_module("sglang.srt.speculative.ddtree_adaptive")

BUDGETS = (8, 32, 128)
B1 = da.Bucket(1)  # batch size 1, no grammar-constrained request


def make(batch_sizes=(1, 2, 4, 8), **kwargs):
    gpu = FakeGPU()
    policy = da.AdaptiveBudget(
        BUDGETS,
        batch_sizes,
        device=torch.device("cpu"),
        new_event=gpu.event,
        new_host_buffer=lambda n: torch.empty(n),
        **kwargs,
    )
    return policy, gpu


def scores_with_prefix_mass(bs: int, phi: dict[int, float]) -> torch.Tensor:
    """[bs, 128] log scores whose q sums to phi[w] over the first w nodes, for each w."""
    q = torch.zeros(bs, max(BUDGETS))
    edges = [0, *BUDGETS]
    for lo, hi in itertools.pairwise(edges):
        q[:, lo:hi] = (phi[hi] - phi.get(lo, 0.0)) / (hi - lo)
    return q.log()  # q = 0 -> -inf: unreachable nodes


def run_rounds(policy, gpu, n, *, bs=1, phi, round_ms, accepted=1.0, gap_ms=0.5, grammar_requests=0):
    """``n`` decode rounds: each takes round_ms(budget) of GPU time and accepts ``accepted``
    times the Φ of the budget it used, per request. Returns the budgets chosen."""
    chosen = []
    for _ in range(n):
        budget = policy.begin_round(bs, grammar_requests=grammar_requests)
        chosen.append(budget)
        gpu.now += round_ms(budget)
        drafts = round(accepted * phi[budget])
        policy.end_round(scores_with_prefix_mass(bs, phi), torch.full((bs,), drafts + 1))
        gpu.now += gap_ms
    return chosen


PHI = {8: 3.0, 32: 5.0, 128: 5.5}


def test_untimed_widths_are_tried_first_then_the_most_tokens_per_ms_wins() -> None:
    policy, gpu = make()
    # (1 + Φ) / (gap + t): 4 / 1.58 = 2.53, 6 / 1.82 = 3.30, 6.5 / 2.78 = 2.34
    chosen = run_rounds(policy, gpu, 20, phi=PHI, round_ms=lambda b: 1.0 + 0.01 * b)
    assert chosen[:6] == [8, 8, 32, 32, 128, 128]
    assert set(chosen[6:]) == {32}
    assert policy.phi == pytest.approx([3.0, 5.0, 5.5], rel=1e-5)
    assert policy.round_ms[(B1, 32)] == pytest.approx(1.32, abs=0.01)  # the round
    assert policy.gap_ms[B1] == pytest.approx(0.5, abs=0.01)  # and the gap after it
    assert gpu.syncs == 0
    view = policy.snapshot()
    assert view["choice"] == {"1": 32} and view["gap_ms"] == {"1": pytest.approx(0.5, abs=0.01)}
    assert view["round_ms"]["1"] == pytest.approx({"8": 1.08, "32": 1.32, "128": 2.28}, abs=0.01)


def test_a_long_gap_after_one_widths_timing_is_shared_not_held_against_that_width() -> None:
    # The widest tree wins on rounds alone: 6.5 / 1.3 > 6 / 1.25 > 4 / 1.0. The scheduler's
    # work between rounds (a request finishing) lands after whichever round it follows.
    phi = {8: 3.0, 32: 5.0, 128: 5.5}
    cost = {8: 1.0, 32: 1.25, 128: 1.3}
    policy, gpu = make(sample_every=1)
    chosen = []
    for i in range(40):
        budget = policy.begin_round(1)
        chosen.append(budget)
        gpu.now += cost[budget]
        policy.end_round(scores_with_prefix_mass(1, phi), torch.full((1,), round(phi[budget]) + 1))
        gpu.now += 4.0 if budget == 128 and i < 6 else 0.3  # both of 128's first timings
    assert set(chosen[6:]) == {128}
    assert policy.round_ms[(B1, 128)] == pytest.approx(1.3)


def test_a_host_bound_round_takes_the_widest_tree() -> None:
    policy, gpu = make()
    chosen = run_rounds(policy, gpu, 20, phi=PHI, round_ms=lambda b: 3.0 + 0.0001 * b)
    assert set(chosen[6:]) == {128}


def test_measured_acceptance_rescales_the_drafters_probabilities() -> None:
    phi = {8: 4.0, 32: 6.0, 128: 6.0}
    cost = {8: 1.0, 32: 1.37, 128: 3.0}
    # c = 1: 5 / 1.0 < 7 / 1.37 = 5.11.  c = 0.5: 3 / 1.0 > 4 / 1.37 = 2.92
    calibrated, gpu = make()
    assert set(run_rounds(calibrated, gpu, 30, phi=phi, round_ms=cost.get, gap_ms=0.0)[6:]) == {32}
    overconfident, gpu = make()
    chosen = run_rounds(overconfident, gpu, 200, phi=phi, round_ms=cost.get, accepted=0.5, gap_ms=0.0)
    assert overconfident.scale == pytest.approx(0.5, abs=0.05)
    assert set(chosen[-50:]) - {32, 128} == {8}  # exploration re-times the others now and then


def test_every_nth_round_of_a_batch_size_re_times_its_stalest_width() -> None:
    policy, gpu = make(explore_every=16)
    chosen = run_rounds(policy, gpu, 64, phi=PHI, round_ms=lambda b: 1.0 + 0.01 * b)
    others = [i + 1 for i, b in enumerate(chosen) if b != 32 and i >= 6]
    assert others == [16, 32, 48, 64]
    assert [chosen[i - 1] for i in others] == [8, 128, 8, 128]


def test_nothing_waits_on_the_gpu_and_a_late_gpu_only_delays_the_feedback() -> None:
    policy, gpu = make()
    gpu.completed = -1.0  # no event completes
    chosen = run_rounds(policy, gpu, 20, phi=PHI, round_ms=lambda b: 1.0)
    assert chosen == [8] * 20  # still untimed: the first width, no stall
    assert gpu.syncs == 0 and policy.phi is None
    gpu.completed = math.inf  # statistics of rounds past the 8 slots were dropped, timings kept
    policy.begin_round(1)
    assert policy._samples[(B1, 8)] == 20 and policy.phi is not None


def test_only_every_nth_round_is_measured_and_slots_are_reused() -> None:
    policy, gpu = make(sample_every=8, explore_every=1000)
    run_rounds(policy, gpu, 6, phi=PHI, round_ms=lambda b: 1.0 + 0.01 * b)  # every width timed
    created = gpu.created
    chosen = run_rounds(policy, gpu, 200, phi=PHI, round_ms=lambda b: 1.0 + 0.01 * b)
    assert set(chosen) == {32}
    # The last timing round's end, then 25 measured rounds: a start and a done event each, and
    # the next round's start as its end.
    assert gpu.created - created == 1 + 3 * 25
    assert policy._samples[(B1, 32)] == 2 + 25
    assert len(policy._free_slots) == da.STATS_SLOTS  # every measured round's came back


def test_a_measured_round_before_a_prefill_or_an_idle_engine_keeps_its_round_and_statistics() -> None:
    policy, gpu = make(sample_every=1)
    run_rounds(policy, gpu, 9, phi=PHI, round_ms=lambda b: 1.0, gap_ms=0.4)
    assert (policy.round_ms[(B1, 128)], policy.gap_ms[B1]) == pytest.approx((1.0, 0.4))
    samples = policy._samples[(B1, 128)]
    policy.interrupt()
    gpu.now += 5.0  # a prefill batch ran
    run_rounds(policy, gpu, 1, phi={**PHI, 128: 7.0}, round_ms=lambda b: 1.0, gap_ms=0.4)
    gpu.now += 30.0  # idle, and nothing told the policy
    policy.begin_round(1)
    assert policy._samples[(B1, 128)] == samples + 2  # both rounds count
    assert policy.gap_ms[B1] == pytest.approx(0.4)  # neither the prefill nor the idle time
    assert policy.phi[-1] > PHI[128]  # the statistics count too


def test_widths_are_timed_per_graph_batch_size() -> None:
    policy, _ = make(batch_sizes=(1, 2, 4, 8, 16))
    assert [policy.bucket(bs).batch_size for bs in (1, 3, 8, 9, 16, 17, 40)] == [1, 4, 8, 16, 16, 32, 64]
    policy, gpu = make()
    run_rounds(policy, gpu, 12, bs=1, phi=PHI, round_ms=lambda b: 1.0 + 0.01 * b)
    assert run_rounds(policy, gpu, 1, bs=3, phi=PHI, round_ms=lambda b: 1.0) == [8]  # bucket 4: untimed


def test_rounds_with_grammar_requests_are_timed_apart_per_power_of_two_of_them() -> None:
    """SGLang's bitmask walk, on the host beside the verify, lengthens a constrained batch's
    round by about 0.2 ms per tree node and constrained request: timed with the free rounds,
    those would be dropped as stalls (more than MAX_EXCESS_MS above the running cost) and the
    widest tree would keep looking cheap."""
    policy, gpu = make(batch_sizes=(1, 2, 4, 8, 16))
    assert [tuple(policy.bucket(16, n)) for n in (0, 1, 2, 3, 5, 16)] == [(16, 0), (16, 1), (16, 2), (16, 4), (16, 8), (16, 16)]
    free = lambda b: 1.0 + 0.01 * b  # noqa: E731
    assert set(run_rounds(policy, gpu, 20, bs=16, phi=PHI, round_ms=free)[6:]) == {32}
    walk = lambda b: free(b) + 0.2 * b * 3  # noqa: E731 - three constrained requests
    constrained = run_rounds(policy, gpu, 20, bs=16, phi=PHI, round_ms=walk, grammar_requests=3)
    assert constrained[:6] == [8, 8, 32, 32, 128, 128] and set(constrained[6:]) == {8}
    four = da.Bucket(16, 4)
    assert policy.round_ms[(four, 128)] == pytest.approx(walk(128), abs=0.01)
    assert policy.round_ms[(da.Bucket(16), 128)] == pytest.approx(free(128), abs=0.01)
    assert set(run_rounds(policy, gpu, 5, bs=16, phi=PHI, round_ms=free)) == {32}  # free rounds unchanged
    view = policy.snapshot()
    assert view["choice"] == {"16": 32, "16 grammar 4": 8}
    assert view["round_ms"]["16 grammar 4"]["128"] == pytest.approx(walk(128), abs=0.01)


def test_a_batch_counts_the_requests_its_grammar_walk_constrains() -> None:
    import types

    def batch(grammars, has_grammar):
        return types.SimpleNamespace(has_grammar=has_grammar, reqs=[types.SimpleNamespace(grammar=g) for g in grammars])

    matcher = object()
    assert da.grammar_requests(batch([matcher, None, matcher], True)) == 2
    assert da.grammar_requests(batch([None, None], False)) == 0
    assert da.grammar_requests(batch([matcher], False)) == 0  # SGLang's flag decides whether the walk runs


# --- the chain among the choices ---------------------------------------------------------------

db = load_payload_module("sglang.srt.speculative.ddtree_budget")
CHAIN = db.CHAIN
BLOCK = 16


def make_with_chain(budgets=(CHAIN, 32, 128), **kwargs):
    gpu = FakeGPU()
    policy = da.AdaptiveBudget(
        budgets, (1, 2, 4, 8), device=torch.device("cpu"), new_event=gpu.event,
        new_host_buffer=lambda n: torch.empty(n), **kwargs,
    )
    return policy, gpu


def chain_scores_with_mass(bs: int, mass: float) -> torch.Tensor:
    """[bs, block - 1] chain log scores whose q sums to ``mass``."""
    return torch.full((bs, BLOCK - 1), mass / (BLOCK - 1)).log()


def run_chain_rounds(policy, gpu, n, *, phi, round_ms, bs=1):
    chosen = []
    tree_phi = {b: v for b, v in phi.items() if b != CHAIN}
    for _ in range(n):
        shape = policy.begin_round(bs)
        chosen.append(shape)
        gpu.now += round_ms[shape]
        policy.end_round(
            scores_with_prefix_mass(bs, tree_phi),
            torch.full((bs,), round(phi[shape]) + 1),
            chain_scores_with_mass(bs, phi[CHAIN]),
        )
        gpu.now += 0.2
    return chosen


def test_the_chain_is_chosen_when_its_tokens_per_ms_are_best() -> None:
    # (1 + Φ) / (gap + t): chain 5 / 1.2 = 4.2; B = 32: 6 / 2.2 = 2.7; B = 128: 6.5 / 3.2 = 2.0
    policy, gpu = make_with_chain()
    phi = {CHAIN: 4.0, 8: 4.5, 32: 5.0, 128: 5.5}
    chosen = run_chain_rounds(policy, gpu, 20, phi=phi, round_ms={CHAIN: 1.0, 32: 2.0, 128: 3.0})
    assert chosen[:6] == [CHAIN, CHAIN, 32, 32, 128, 128]  # the chain is timed first
    assert set(chosen[6:]) == {CHAIN}
    assert policy.phi == pytest.approx([4.0, 5.0, 5.5], rel=1e-5)  # the chain's Φ is its own mass
    view = policy.snapshot()
    assert view["choice"] == {"1": CHAIN} and set(view["round_ms"]["1"]) == {"chain", "32", "128"}
    assert gpu.syncs == 0


def test_a_tree_whose_gain_pays_for_its_width_wins_over_the_chain() -> None:
    # chain 3 / 1.2 = 2.5; B = 32: 7 / 1.7 = 4.1
    policy, gpu = make_with_chain()
    phi = {CHAIN: 2.0, 8: 4.5, 32: 6.0, 128: 6.5}
    chosen = run_chain_rounds(policy, gpu, 20, phi=phi, round_ms={CHAIN: 1.0, 32: 1.5, 128: 3.0})
    assert set(chosen[6:]) == {32}


def test_the_chain_is_timed_and_scaled_per_batch_size_like_any_width() -> None:
    policy, gpu = make_with_chain()
    phi = {CHAIN: 4.0, 8: 4.5, 32: 5.0, 128: 5.5}
    # small batches: the verify is cheap, the wide tree pays; large ones: the chain does
    run_chain_rounds(policy, gpu, 12, bs=1, phi=phi, round_ms={CHAIN: 1.0, 32: 1.05, 128: 1.1})
    run_chain_rounds(policy, gpu, 12, bs=8, phi=phi, round_ms={CHAIN: 1.0, 32: 2.0, 128: 4.0})
    assert policy.snapshot()["choice"] == {"1": 128, "8": CHAIN}


def test_rounds_that_verify_an_earlier_choice_are_timed_as_what_they_verify() -> None:
    # Under TP a round verifies rank 0's choice of two rounds before: the chosen shape to time
    # is timed by the round that verifies it, and the policy settles where it would unlagged.
    policy, gpu = make_with_chain(sample_every=1000)
    phi = {CHAIN: 4.0, 8: 4.5, 32: 5.0, 128: 5.5}
    cost = {CHAIN: 1.0, 32: 2.0, 128: 3.0}
    choices, verified = [], []
    for i in range(30):
        shape = choices[i - 2] if i >= 2 else 128
        choices.append(policy.begin_round(1, shape))
        verified.append(shape)
        gpu.now += cost[shape]
        policy.end_round(
            scores_with_prefix_mass(1, {b: v for b, v in phi.items() if b != CHAIN}),
            torch.full((1,), round(phi[shape]) + 1),
            chain_scores_with_mass(1, phi[CHAIN]),
        )
        gpu.now += 0.2
    assert policy.round_ms == pytest.approx({(B1, CHAIN): 1.0, (B1, 32): 2.0, (B1, 128): 3.0})
    assert set(choices[-10:]) == set(verified[-10:]) == {CHAIN}
    assert policy._wanted == set()  # no width left waiting to be timed


def test_a_round_far_above_its_widths_running_cost_is_left_out_as_a_stall() -> None:
    """What serving.md warns of for grammar rounds that wait on the host walk."""
    policy, gpu = make(sample_every=1, explore_every=1000)
    run_rounds(policy, gpu, 12, phi=PHI, round_ms=lambda b: 10.0)
    assert all(policy.round_ms[(B1, b)] == pytest.approx(10.0) for b in BUDGETS)
    run_rounds(policy, gpu, 20, phi=PHI, round_ms=lambda b: 10.0 + da.MAX_EXCESS_MS + 1.0)
    assert all(policy.round_ms[(B1, b)] == pytest.approx(10.0) for b in BUDGETS)
    run_rounds(policy, gpu, 20, phi=PHI, round_ms=lambda b: 10.0 + da.MAX_EXCESS_MS - 1.0)
    assert max(policy.round_ms.values()) > 20.0
