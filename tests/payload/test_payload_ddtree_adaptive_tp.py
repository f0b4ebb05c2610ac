"""Adaptive budgets under TP (overlay ddtree_adaptive_tp.py): every rank verifies rank 0's
choice; two gloo ranks on the CPU with fake CUDA events."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from fake_cuda_events import FakeGPU  # noqa: E402
from gloo_ranks import run_ranks  # noqa: E402
from payload_modules import load_payload_module  # noqa: E402

da = load_payload_module("sglang.srt.speculative.ddtree_adaptive")
dat = load_payload_module("sglang.srt.speculative.ddtree_adaptive_tp")
db = load_payload_module("sglang.srt.speculative.ddtree_budget")
tp = load_payload_module("sglang.srt.speculative.ddtree_tp")

CHAIN = db.CHAIN
BUDGETS = (CHAIN, 32, 128)  # sorted as the policy sorts them: the chain first
WIDEST = 128
BATCH_SIZES = (1, 2, 4, 8)
BLOCK = 16
PHI = {CHAIN: 4.0, 32: 5.0, 128: 5.5}
# (1 + Φ) / (round + 0.2 ms gap). Rank 0: chain 5 / 1.2 = 4.2 beats 6 / 2.2 and 6.5 / 3.2;
# rank 1: the widest tree, 6.5 / 1.2 = 5.4, beats 6 / 2.2 and 5 / 3.2.
ROUND_MS = ({CHAIN: 1.0, 32: 2.0, 128: 3.0}, {CHAIN: 3.0, 32: 2.0, 128: 1.0})
BATCHES = [1] * 40 + [8] * 30 + [1] * 10  # each decode round's batch size
PREFILL_BEFORE = {10, 41, 55}  # rounds a prefill batch runs before


def tree_scores(bs: int) -> torch.Tensor:
    """[bs, 128] node log scores whose q sums to PHI[32] over the first 32 nodes, PHI[128] over
    all of them."""
    q = torch.full((bs, WIDEST), (PHI[128] - PHI[32]) / (WIDEST - 32))
    q[:, :32] = PHI[32] / 32
    return q.log()


def chain_scores(bs: int) -> torch.Tensor:
    return torch.full((bs, BLOCK - 1), PHI[CHAIN] / (BLOCK - 1)).log()


def recording_policy(gpu: FakeGPU) -> tuple:
    """An AdaptiveBudget on the fake GPU, and the list its choices are appended to."""
    policy = da.AdaptiveBudget(
        BUDGETS, BATCH_SIZES, device=torch.device("cpu"), new_event=gpu.event,
        new_host_buffer=lambda n: torch.empty(n),
    )
    choices = []
    begin = policy.begin_round

    def recorded(bs, shape=None, **kwargs):
        choices.append(begin(bs, shape, **kwargs))
        return choices[-1]

    policy.begin_round = recorded
    return policy, choices


def shared_budget(policy, gpu: FakeGPU):
    return dat.RankZeroBudget(
        policy, BUDGETS, BATCH_SIZES, device=torch.device("cpu"), new_event=gpu.event,
        new_host_buffer=lambda: torch.empty(1, dtype=torch.float64),
    )


def _rounds_main(rank: int, world: int, init_file: str, out: dict) -> None:
    """Decode rounds as the worker runs them under TP, each rank's rounds timed by its own clock.
    Rank 0's policy decides; rank 1's own policy (a witness) is fed the same rounds but decides
    nothing."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        group = dist.new_group(list(range(world)))
        gpu = FakeGPU()
        local, choices = recording_policy(gpu)
        shared = shared_budget(local if rank == 0 else None, gpu)
        generator = torch.Generator().manual_seed(rank)
        verified = []
        for i, bs in enumerate(BATCHES):
            if i in PREFILL_BEFORE:
                shared.interrupt()
                local.interrupt()
                gpu.now += 5.0
            shape = shared.begin_round(bs)
            if rank != 0:
                local.begin_round(bs, shape)
            verified.append(shape)
            packed = torch.randn(bs, BLOCK - 1, 9, generator=generator, dtype=torch.float64)
            _, tails = tp.gather_topk_pieces_with_tail(packed, shared.tail(), group)
            shared.received(tails)
            gpu.now += ROUND_MS[rank][shape]
            accepted = torch.full((bs,), round(PHI[shape]) + 1)
            shared.end_round(tree_scores(bs), accepted, chain_scores(bs))
            if rank != 0:
                local.end_round(tree_scores(bs), accepted, chain_scores(bs))
            gpu.now += 0.2
        out[rank] = (verified, choices, gpu.syncs)
    finally:
        dist.destroy_process_group()


def lagged(choices: list, batches: list) -> list:
    """What every rank should verify: at each batch size, rank 0's latest choice made LAG or
    more rounds before; the widest before any."""
    latest, shapes = {}, []
    for i, bs in enumerate(batches):
        if i >= dat.LAG:
            latest[batches[i - dat.LAG]] = choices[i - dat.LAG]
        shapes.append(latest.get(bs, WIDEST))
    return shapes


def test_ranks_whose_rounds_time_differently_verify_rank_0s_choice_every_round(tmp_path):
    results = run_ranks(tmp_path, _rounds_main, world=2, args=())
    (verified_0, choices_0, syncs_0), (verified_1, witness_1, syncs_1) = results[0], results[1]
    assert verified_0 == verified_1
    assert verified_0 == lagged(choices_0, BATCHES)
    # alone, each rank's policy would verify a different shape at batch size 1 ...
    assert choices_0[30:40] == [CHAIN] * 10 and witness_1[30:40] == [128] * 10
    # ... and both verify rank 0's, at batch size 8 too, and back at 1 at once
    assert verified_0[30:40] == [CHAIN] * 10 and verified_0[70:] == [CHAIN] * 10
    assert set(verified_0[40:70]) == set(BUDGETS) and verified_0[40:42] == [WIDEST] * 2
    assert syncs_0 == syncs_1 == 0  # every choice had reached the host when it was due


def test_a_choice_not_on_the_host_when_due_is_waited_for_not_skipped() -> None:
    gpu = FakeGPU()
    gpu.completed = -1.0  # no event completes unless waited for
    follower = shared_budget(None, gpu)
    sent = [CHAIN, 32, CHAIN, 128, 32]
    verified = []
    for shape in sent:
        verified.append(follower.begin_round(1))
        assert follower.tail().tolist() == [-1.0]  # a follower's tail is never read
        rank_0_tail = [float(BUDGETS.index(shape))]
        follower.received(torch.tensor([rank_0_tail, [-1.0]], dtype=torch.float64))
        gpu.now += 1.0
    assert verified == [WIDEST, WIDEST, CHAIN, 32, CHAIN]
    assert gpu.syncs == 3


def test_rank_0_sends_its_policys_choice_and_verifies_what_it_sent_lag_rounds_later() -> None:
    gpu = FakeGPU()
    policy, choices = recording_policy(gpu)
    leader = shared_budget(policy, gpu)
    verified = []
    for _ in range(12):
        verified.append(leader.begin_round(2))
        tail = leader.tail()
        assert tail.tolist() == [float(BUDGETS.index(choices[-1]))]
        leader.received(torch.stack([tail, torch.tensor([-1.0], dtype=torch.float64)]))
        gpu.now += ROUND_MS[0][verified[-1]]
        accepted = torch.full((2,), round(PHI[verified[-1]]) + 1)
        leader.end_round(tree_scores(2), accepted, chain_scores(2))
    assert verified == lagged(choices, [2] * 12)
    assert policy.round_ms[(da.Bucket(2), CHAIN)] == pytest.approx(1.0)  # timed as what it verified
    assert gpu.syncs == 0


def test_a_followers_choices_are_kept_apart_for_rounds_with_grammar_requests() -> None:
    """Rank 0 times constrained batches in tables of their own; what it chose for one applies to
    rounds of that batch size with as many constrained requests (to a power of two)."""
    follower = shared_budget(None, FakeGPU())
    sent = [(0, CHAIN), (3, 32), (0, CHAIN), (4, 32), (0, CHAIN), (1, 128)]
    verified = []
    for grammar_requests, shape in sent:
        verified.append(follower.begin_round(1, grammar_requests=grammar_requests))
        follower.received(torch.tensor([[float(BUDGETS.index(shape))], [-1.0]], dtype=torch.float64))
    # LAG rounds later: the free rounds take the chain, the 3- and 4-request rounds B = 32
    assert verified == [WIDEST, WIDEST, CHAIN, 32, CHAIN, WIDEST]
