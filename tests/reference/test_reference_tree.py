"""DDTree builder (paper Alg. 1 / ddtree.py build_ddtree_tree) against a brute-force oracle.

The oracle enumerates every prefix of depth 1..L over the full vocabulary, scores it by the
factorised drafter log-probability sum_i log q_i(u_i) (fp32 log-softmax, as the builder uses)
and keeps the B best. Paper Prop. 2/3: the builder must return exactly that set, popped in
non-increasing score order, with K = min(B, V) candidates per depth sufficing (Lemma 1).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ddtree_overlay.reference.tree import (
    DDTreeDraft,
    ancestor_mask,
    build_ddtree_tree,
    follow_verified_tree,
    tree_positions,
)

# Tiny models: one intra-op thread is fastest, and avoids oversubscribing shared CI cores.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def prefixes_of(tree: DDTreeDraft) -> list[tuple[int, ...]]:
    """Token prefix of every drafted node, in node order (root excluded)."""
    out: list[tuple[int, ...]] = [()]
    for i in range(1, tree.num_nodes):
        out.append((*out[tree.parents[i]], tree.tokens[i]))
    return out[1:]


def oracle_top_b(logits: torch.Tensor, budget: int) -> dict[tuple[int, ...], float]:
    lp = torch.log_softmax(logits.float(), dim=-1).double()
    depth, vocab = lp.shape
    scored = {}
    for d in range(1, depth + 1):
        for u in itertools.product(range(vocab), repeat=d):
            scored[u] = sum(float(lp[i, t]) for i, t in enumerate(u))
    best = sorted(scored.items(), key=lambda kv: -kv[1])[:budget]
    return dict(best)


def check_invariants(tree: DDTreeDraft, logits: torch.Tensor) -> None:
    lp = torch.log_softmax(logits.float(), dim=-1).double()
    assert tree.parents[0] == -1 and tree.depths[0] == 0
    for i in range(1, tree.num_nodes):
        p = tree.parents[i]
        assert 0 <= p < i
        assert tree.depths[i] == tree.depths[p] + 1
        assert tree.child_maps[p][tree.tokens[i]] == i
        expect = tree.log_probs[p] + float(lp[tree.depths[i] - 1, tree.tokens[i]])
        assert math.isclose(tree.log_probs[i], expect, abs_tol=1e-4)
    assert all(
        a >= b - 1e-6 for a, b in zip(tree.log_probs[1:], tree.log_probs[2:], strict=False)
    )  # pop order
    assert sum(len(c) for c in tree.child_maps) == tree.num_nodes - 1
    assert len(set(prefixes_of(tree))) == tree.num_nodes - 1


@pytest.mark.parametrize("seed", range(300))
def test_builder_returns_exactly_the_top_b_prefixes(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    vocab = int(torch.randint(2, 6, (1,), generator=g))
    depth = int(torch.randint(1, 5, (1,), generator=g))
    reachable = sum(vocab**d for d in range(1, depth + 1))
    budget = int(torch.randint(0, min(reachable, 40) + 3, (1,), generator=g))
    logits = torch.randn(depth, vocab, generator=g) * float(torch.rand(1, generator=g) * 4 + 0.1)
    tree = build_ddtree_tree(logits, budget, root_token=7)
    check_invariants(tree, logits)
    oracle = oracle_top_b(logits, budget)
    assert tree.num_nodes - 1 == min(budget, reachable)
    assert set(prefixes_of(tree)) == set(oracle)


def test_budget_zero_is_root_only() -> None:
    tree = build_ddtree_tree(torch.randn(15, 32), 0, root_token=5)
    assert tree.tokens == (5,) and tree.parents == (-1,) and tree.depths == (0,)
    assert ancestor_mask(tree).tolist() == [[True]]
    assert (
        follow_verified_tree(tree, [9]).path == (0,)
        and follow_verified_tree(tree, [9]).next_token == 9
    )


def test_budget_one_is_the_top1_first_token() -> None:
    logits = torch.randn(15, 32, generator=torch.Generator().manual_seed(1))
    tree = build_ddtree_tree(logits, 1, root_token=3)
    assert (
        tree.tokens == (3, int(logits[0].argmax()))
        and tree.parents == (-1, 0)
        and tree.depths == (0, 1)
    )


def test_budget_above_reachable_takes_every_prefix() -> None:
    logits = torch.randn(2, 3, generator=torch.Generator().manual_seed(2))
    tree = build_ddtree_tree(logits, 1000, root_token=0)
    assert tree.num_nodes - 1 == 3 + 9
    assert set(prefixes_of(tree)) == set(itertools.product(range(3), repeat=1)) | set(
        itertools.product(range(3), repeat=2)
    )


def test_no_draft_positions_is_root_only() -> None:
    assert build_ddtree_tree(torch.empty(0, 8), 10, root_token=1).num_nodes == 1


def test_ties_are_deterministic_and_follow_rank_tuples() -> None:
    logits = torch.zeros(3, 4)  # every token equally likely at every depth
    a = build_ddtree_tree(logits, 10, root_token=0)
    b = build_ddtree_tree(logits, 10, root_token=0)
    assert a == b
    assert a.depths == (
        0,
        1,
        1,
        1,
        1,
        2,
        2,
        2,
        2,
        2,
        2,
    )  # all 4 depth-1 nodes before any depth-2 node
    assert a.parents[5:] == (1, 1, 1, 1, 2, 2)  # rank tuples (0,0) < (0,1) < ... < (1,0)


def test_ancestor_mask_rows_are_ancestors_plus_self() -> None:
    logits = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    tree = build_ddtree_tree(logits, 20, root_token=0)
    vis = ancestor_mask(tree)
    for i in range(tree.num_nodes):
        anc, j = {i}, i
        while tree.parents[j] >= 0:
            j = tree.parents[j]
            anc.add(j)
        assert {k for k in range(tree.num_nodes) if vis[i, k]} == anc
    assert tree_positions(tree, 100).tolist() == [100 + d for d in tree.depths]


def test_follow_verified_tree_walks_the_targets_choices() -> None:
    #        0 (root)
    #      /   \
    #   1:a     2:b
    #    |
    #   3:c
    tree = DDTreeDraft(
        tokens=(9, 10, 11, 12),
        parents=(-1, 0, 0, 1),
        depths=(0, 1, 1, 2),
        log_probs=(0.0, -0.1, -0.2, -0.3),
        child_maps=({10: 1, 11: 2}, {12: 3}, {}, {}),
    )
    acc = follow_verified_tree(tree, [10, 12, 0, 42])  # root->a, a->c, c says 42
    assert acc.path == (0, 1, 3) and acc.next_token == 42
    acc = follow_verified_tree(tree, [11, 0, 7, 0])  # root->b, b says 7 (no child)
    assert acc.path == (0, 2) and acc.next_token == 7
    acc = follow_verified_tree(tree, [5, 0, 0, 0])  # nothing accepted: bonus only
    assert acc.path == (0,) and acc.next_token == 5
