"""Vocab-parallel top-K (overlay ddtree_tp.py) on two and four gloo ranks, CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from gloo_ranks import run_ranks  # noqa: E402
from payload_modules import load_payload_module  # noqa: E402
from tree_oracle import (  # noqa: E402
    DEGENERATE,
    check_best_tree,
    check_chain,
    degenerate_logits,
    draft_log_probs,
    row_nodes,
)

du = load_payload_module("sglang.srt.speculative.ddtree_utils")
tp = load_payload_module("sglang.srt.speculative.ddtree_tp")

VOCAB, HIDDEN, BS, DEPTH = 1001, 32, 3, 15
VOCAB_PADDING = 64  # SGLang's DEFAULT_VOCAB_PADDING_SIZE
PADDING_ROW = 1e4  # outscores every real row: a top-K that reads padding rows fails
LM_HEAD_KS = (1, 16, 256)


def full_problem(seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(BS, DEPTH, HIDDEN, generator=g)
    weight = torch.randn(VOCAB, HIDDEN, generator=g)
    return hidden, weight


def shard_bounds(rank: int, world: int, vocab: int = VOCAB) -> tuple[int, int]:
    per = (vocab + world - 1) // world  # uneven last shard, like a padded vocab split
    return rank * per, min(vocab, (rank + 1) * per)


def _rank_main(rank: int, world: int, init_file: str, k: int, seed: int, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        hidden, weight = full_problem(seed)
        start, end = shard_bounds(rank, world)
        local_logits = hidden @ weight[start:end].T
        got = tp.vocab_parallel_draft_topk(local_logits, vocab_start=start, k=k)
        tree = du.build_ddtree_tree(got, k)
        out[rank] = (got.log_probs, got.token_ids, tree.tokens, tree.parent_indices)
    finally:
        dist.destroy_process_group()


def degenerate_cases() -> list[tuple[torch.Tensor, int]]:
    """(logits [bs, L, V], budget) pairs: every degenerate kind over a 5-token vocabulary (two
    ranks hold 3 and 2 ids, fewer than K), and rank 0's whole shard -inf with K = 4 > the 2
    finite ids left."""
    cases = []
    for kind in sorted(DEGENERATE):
        logits = degenerate_logits(kind, 11, bs=2, vocab=5)
        cases += [(logits, budget) for budget in (2, 4, 40)]
    dead_shard = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(12))
    dead_shard[..., :3] = float("-inf")
    return [*cases, (dead_shard, 4), (dead_shard, 9)]


def _degenerate_rank_main(rank: int, world: int, init_file: str, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = []
        for logits, budget in degenerate_cases():
            start, end = shard_bounds(rank, world, logits.shape[-1])
            k = min(budget, logits.shape[-1])
            got = tp.vocab_parallel_draft_topk(logits[..., start:end], vocab_start=start, k=k)
            tree = du.build_ddtree_tree(got, budget)
            fields = (tree.tokens, tree.parent_indices, tree.depths, tree.log_scores)
            results.append((got.log_probs, got.token_ids, fields))
        out[rank] = results
    finally:
        dist.destroy_process_group()


def chain_cases() -> list[torch.Tensor]:
    """Drafter logits [bs, L, V]: random ones over 9 tokens, every degenerate kind over 5."""
    random = torch.randn(3, 4, 9, generator=torch.Generator().manual_seed(13)) * 2.0
    return [random, *(degenerate_logits(kind, 14, bs=2, vocab=5) for kind in sorted(DEGENERATE))]


def _chain_rank_main(rank: int, world: int, init_file: str, out: dict) -> None:
    """The chain as a schedule's chain step builds it under TP: the widest step's pairs sent
    (pack_k 4), the top-1 combined from them."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = []
        for logits in chain_cases():
            start, end = shard_bounds(rank, world, logits.shape[-1])
            got = tp.vocab_parallel_draft_topk(logits[..., start:end], vocab_start=start, k=1, pack_k=4)
            chain = du.build_chain_tree(got)
            results.append((chain.tokens, chain.parent_indices, chain.depths, chain.log_scores))
        out[rank] = results
    finally:
        dist.destroy_process_group()


def sglang_lm_head(weight: torch.Tensor, rank: int, world: int) -> SimpleNamespace:
    """This rank's ParallelLMHead as SGLang lays it out: the vocabulary padded to a multiple
    of 64, split evenly, so the last shard holds fewer real rows and the rest padding."""
    padded = -(-VOCAB // VOCAB_PADDING) * VOCAB_PADDING
    per_rank = padded // world
    start, end = min(rank * per_rank, VOCAB), min((rank + 1) * per_rank, VOCAB)
    padding = torch.full((per_rank - (end - start), HIDDEN), PADDING_ROW)
    shard = SimpleNamespace(
        org_vocab_start_index=start,
        num_org_elements=end - start,
        num_org_elements_padded=per_rank,
        num_added_elements=0,
        added_vocab_start_index=VOCAB,
    )
    return SimpleNamespace(weight=torch.cat([weight[start:end], padding]), shard_indices=shard)


def _lm_head_rank_main(rank: int, world: int, init_file: str, seed: int, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        group = dist.new_group(list(range(world)))  # a subgroup, as SGLang's TP device_group is
        hidden, weight = full_problem(seed)
        lm_head = sglang_lm_head(weight, rank, world)
        by_k = {}

        def draft_topk(k, pack_k):  # as the worker runs it eagerly
            every = tp.gather_topk_pieces(tp.lm_head_topk_pieces(lm_head, hidden, k=pack_k), group)
            return tp.combine_topk_pieces(every, k)

        for k in LM_HEAD_KS:
            got = draft_topk(k, k)
            # what the worker sends every round: the widest budget's pairs, whatever this k
            wide = draft_topk(k, max(LM_HEAD_KS))
            by_k[k] = (got.log_probs, got.token_ids, wide.log_probs, wide.token_ids)
        out[rank] = by_k
    finally:
        dist.destroy_process_group()


def _graph_rank_main(rank: int, world: int, init_file: str, seed: int, out: dict) -> None:
    """The worker's TP tree stage with graphs: this rank's top-K pieces from one graph, the
    all-gather eager, the combine + tree build from another; graphs of 2 and 4 requests, so the
    3-request round replays padded ones."""
    from fake_graphs import gr, make_graphs

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        group = dist.new_group(list(range(world)))
        hidden, weight = full_problem(seed)
        lm_head = sglang_lm_head(weight, rank, world)
        pack_k, k = 32, 16  # the widest budget's pairs sent, a narrower budget's tree built

        def copy_into(out, fresh):
            out.copy_(fresh)

        def copy_tree(out, fresh):
            for field in ("tokens", "parent_indices", "depths", "log_scores"):
                getattr(out, field).copy_(getattr(fresh, field))

        local, _ = make_graphs(
            lambda hidden: tp.lm_head_topk_pieces(lm_head, hidden, k=pack_k),
            [2, 4], {"hidden": gr.StaticInput((DEPTH, HIDDEN), torch.float32)}, [], copy_into,
        )
        combine, _ = make_graphs(
            lambda every: du.build_ddtree_tree(tp.combine_topk_pieces(every, k), k),
            [2, 4], {"every": gr.StaticInput((DEPTH, world, 1 + 2 * pack_k), torch.float64)}, [], copy_tree,
        )
        local.inputs_for(BS)["hidden"].copy_(hidden)
        every = tp.gather_topk_pieces(local.replay(BS)[:BS], group)
        combine.inputs_for(BS)["every"].copy_(every)
        tree = combine.replay(BS)
        out[rank] = (tree.tokens[:BS], tree.parent_indices[:BS], tree.log_scores[:BS])
    finally:
        dist.destroy_process_group()


def _tail_rank_main(rank: int, world: int, init_file: str, out: dict) -> None:
    """The pieces with and without a tail riding on the all-gather, and the tails gathered."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        group = dist.new_group(list(range(world)))
        logits = torch.randn(BS, DEPTH, 40, generator=torch.Generator().manual_seed(20 + rank))
        packed = tp.local_topk_pieces(logits, vocab_start=40 * rank, k=4)
        tail = torch.tensor([rank + 0.5, -7.0 * rank], dtype=torch.float64)
        every, tails = tp.gather_topk_pieces_with_tail(packed, tail, group)
        out[rank] = (every.clone(), tails.clone(), tp.gather_topk_pieces(packed, group))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("k", "seed"), [(1, 0), (32, 1), (256, 2)])
def test_two_ranks_agree_with_the_single_rank_top_k_and_tree(tmp_path, k, seed):
    hidden, weight = full_problem(seed)
    expect = du.compute_draft_topk(hidden @ weight.T, k)
    expect_tree = du.build_ddtree_tree(expect, k)
    results = run_ranks(tmp_path, _rank_main, world=2, args=(k, seed))
    for rank in (0, 1):
        log_probs, token_ids, tree_tokens, tree_parents = results[rank]
        assert torch.equal(token_ids, expect.token_ids)
        assert torch.allclose(log_probs, expect.log_probs, atol=1e-5)
        assert torch.equal(tree_tokens, expect_tree.tokens)
        assert torch.equal(tree_parents, expect_tree.parent_indices)


def test_every_rank_builds_the_bit_identical_tree_without_a_broadcast(tmp_path):
    # ranks hold different shards and sum their normalisers' pieces in different places;
    # the gathered bytes are the same, so everything computed from them is too
    results = run_ranks(tmp_path, _rank_main, world=4, args=(64, 3))
    for rank in (1, 2, 3):
        for mine, rank0 in zip(results[rank], results[0], strict=True):
            assert torch.equal(mine, rank0)


def test_a_shard_smaller_than_k_pads_with_unreachable_pairs(tmp_path):
    # 4 ranks over 1001 ids: shards of 251, 251, 251, 248; k = 300 exceeds every shard
    hidden, weight = full_problem(4)
    expect = du.compute_draft_topk(hidden @ weight.T, 300)
    results = run_ranks(tmp_path, _rank_main, world=4, args=(300, 4))
    assert torch.equal(results[3][1], expect.token_ids)


def test_lm_head_top_k_skips_padding_rows_and_is_the_same_on_every_rank(tmp_path):
    hidden, weight = full_problem(5)
    results = run_ranks(tmp_path, _lm_head_rank_main, world=2, args=(5,))
    last_shard = sglang_lm_head(weight, 1, 2)
    assert last_shard.shard_indices.num_org_elements < last_shard.weight.shape[0]  # padding rows
    for k in LM_HEAD_KS:
        expect = du.compute_draft_topk(hidden @ weight.T, k)
        (log_probs, token_ids, *_), (log_probs_1, token_ids_1, *_) = results[0][k], results[1][k]
        assert torch.equal(token_ids, expect.token_ids)
        assert torch.allclose(log_probs, expect.log_probs, atol=1e-5)
        assert torch.equal(log_probs, log_probs_1) and torch.equal(token_ids, token_ids_1)


def test_sending_more_pairs_than_k_gives_the_same_top_k(tmp_path):
    hidden, weight = full_problem(6)
    results = run_ranks(tmp_path, _lm_head_rank_main, world=2, args=(6,))
    for k in LM_HEAD_KS:
        expect = du.compute_draft_topk(hidden @ weight.T, k)
        for rank in (0, 1):
            log_probs, token_ids, wide_log_probs, wide_token_ids = results[rank][k]
            assert torch.equal(wide_token_ids, token_ids) and torch.equal(wide_token_ids, expect.token_ids)
            assert torch.equal(wide_log_probs, log_probs)


def test_the_graphed_tree_stage_around_the_all_gather_builds_the_single_rank_tree(tmp_path):
    hidden, weight = full_problem(7)
    expect = du.build_ddtree_tree(du.compute_draft_topk(hidden @ weight.T, 16), 16)
    results = run_ranks(tmp_path, _graph_rank_main, world=2, args=(7,))
    for rank in (0, 1):
        tokens, parents, log_scores = results[rank]
        assert torch.equal(tokens, expect.tokens) and torch.equal(parents, expect.parent_indices)
        assert torch.allclose(log_scores, expect.log_scores, atol=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(results[0], results[1], strict=True))


def test_degenerate_shards_give_in_vocabulary_ids_and_the_best_reachable_tree(tmp_path):
    results = run_ranks(tmp_path, _degenerate_rank_main, world=2, args=())
    for (logits, budget), (log_probs, token_ids, fields) in zip(degenerate_cases(), results[0], strict=True):
        tree = du.DDTreeDraftTree(*fields)
        vocab = logits.shape[-1]
        expect = du.compute_draft_topk(logits, min(budget, vocab))
        assert ((token_ids >= 0) & (token_ids < vocab)).all(), token_ids
        assert torch.allclose(log_probs, expect.log_probs, atol=1e-5)
        finite = torch.isfinite(expect.log_probs)  # each id's own log-prob (ties may swap ids)
        own = torch.stack([draft_log_probs(row) for row in logits]).gather(-1, token_ids).float()
        assert torch.allclose(own[finite], log_probs[finite], atol=1e-5)
        for b in range(logits.shape[0]):
            check_best_tree(row_nodes(tree, b), draft_log_probs(logits[b]), budget, padded=True)
    for mine, rank0 in zip(results[1], results[0], strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine[:2], rank0[:2], strict=True))


def test_the_chain_under_tp_is_the_single_rank_chain_on_every_rank(tmp_path):
    results = run_ranks(tmp_path, _chain_rank_main, world=2, args=())
    random, *_ = chain_cases()
    expect = du.build_chain_tree(du.compute_draft_topk(random, 1))
    assert torch.equal(results[0][0][0], expect.tokens)
    assert torch.allclose(results[0][0][3], expect.log_scores, atol=1e-5)
    for logits, fields in zip(chain_cases(), results[0], strict=True):
        chain = du.DDTreeDraftTree(*fields)
        for b in range(logits.shape[0]):
            check_chain(row_nodes(chain, b), draft_log_probs(logits[b]))
    for mine, rank0 in zip(results[1], results[0], strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, rank0, strict=True))


def test_a_tail_rides_on_the_all_gather_and_leaves_the_pieces_as_they_were(tmp_path):
    results = run_ranks(tmp_path, _tail_rank_main, world=3, args=())
    for rank in range(3):
        every, tails, plain = results[rank]
        assert every.shape == plain.shape == (BS, DEPTH, 3, 1 + 2 * 4)
        assert torch.equal(every, plain)
        assert tails.tolist() == [[0.5, 0.0], [1.5, -7.0], [2.5, -14.0]]
