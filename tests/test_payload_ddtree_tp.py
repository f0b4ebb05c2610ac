"""Vocab-parallel top-K and rank-0 broadcast (overlay ddtree_tp.py) on two gloo ranks, CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from payload_modules import load_payload_module  # noqa: E402

du = load_payload_module("sglang.srt.speculative.ddtree_utils")
tp = load_payload_module("sglang.srt.speculative.ddtree_tp")

VOCAB, HIDDEN, BS, DEPTH = 1001, 32, 3, 15


def full_problem(seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(BS, DEPTH, HIDDEN, generator=g)
    weight = torch.randn(VOCAB, HIDDEN, generator=g)
    return hidden, weight


def shard_bounds(rank: int, world: int) -> tuple[int, int]:
    per = (VOCAB + world - 1) // world  # uneven last shard, like a padded vocab split
    return rank * per, min(VOCAB, (rank + 1) * per)


def _rank_main(rank: int, world: int, init_file: str, k: int, seed: int, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        hidden, weight = full_problem(seed)
        start, end = shard_bounds(rank, world)
        local_logits = hidden @ weight[start:end].T
        got = tp.vocab_parallel_draft_topk(local_logits, vocab_start=start, k=k)
        tree = du.build_ddtree_tree(got, k)
        decisions = torch.full((BS, 4), rank, dtype=torch.int64)  # rank-local "accept decision"
        tp.broadcast_from_rank0([decisions])
        out[rank] = (got.log_probs, got.token_ids, tree.tokens, tree.parent_indices, decisions)
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path, world: int, k: int, seed: int) -> dict:
    manager = mp.get_context("spawn").Manager()
    out = manager.dict()
    mp.start_processes(
        _rank_main,
        args=(world, str(tmp_path / "init"), k, seed, out),
        nprocs=world,
        start_method="spawn",
    )
    return dict(out)


@pytest.mark.parametrize(("k", "seed"), [(1, 0), (32, 1), (256, 2)])
def test_two_ranks_agree_with_the_single_rank_top_k_and_tree(tmp_path, k, seed):
    hidden, weight = full_problem(seed)
    expect = du.compute_draft_topk(hidden @ weight.T, k)
    expect_tree = du.build_ddtree_tree(expect, k)
    results = run_ranks(tmp_path, world=2, k=k, seed=seed)
    for rank in (0, 1):
        log_probs, token_ids, tree_tokens, tree_parents, _ = results[rank]
        assert torch.equal(token_ids, expect.token_ids)
        assert torch.allclose(log_probs, expect.log_probs, atol=1e-5)
        assert torch.equal(tree_tokens, expect_tree.tokens)
        assert torch.equal(tree_parents, expect_tree.parent_indices)


def test_every_rank_takes_rank_zeros_decisions(tmp_path):
    results = run_ranks(tmp_path, world=2, k=8, seed=3)
    assert torch.equal(results[1][4], torch.zeros(BS, 4, dtype=torch.int64))
    assert torch.equal(results[0][4], results[1][4])


def test_a_shard_smaller_than_k_pads_with_unreachable_pairs(tmp_path):
    # 4 ranks over 1001 ids: shards of 251, 251, 251, 248; k = 300 exceeds every shard
    hidden, weight = full_problem(4)
    expect = du.compute_draft_topk(hidden @ weight.T, 300)
    results = run_ranks(tmp_path, world=4, k=300, seed=4)
    assert torch.equal(results[3][1], expect.token_ids)
