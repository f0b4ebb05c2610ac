"""DDTree builder (paper Alg. 1 / ddtree.py build_ddtree_tree) against a brute-force oracle.

The oracle (`tree_oracle`) enumerates every prefix of depth 1..L over the full vocabulary and
scores it by the factorised drafter log-probability sum_i log q_i(u_i). Paper Prop. 2/3: the
builder must return exactly the B best, popped in non-increasing score order, with
K = min(B, V) candidates per depth sufficing (Lemma 1); on degenerate drafter rows (-inf
entries, exact ties, log-probs of exactly 0.0, one-hot and empty rows) it must return the
min(B, reachable) best prefixes of non-zero probability and nothing else.
"""

from __future__ import annotations

import pytest
import torch
from tree_oracle import (
    DEGENERATE,
    Nodes,
    ancestors_or_self,
    budgets_for,
    check_best_tree,
    degenerate_logits,
    draft_log_probs,
)

from ddtree_overlay.reference.tree import (
    DDTreeDraft,
    ancestor_mask,
    build_ddtree_tree,
    follow_verified_tree,
    tree_positions,
)

# Tiny models: one intra-op thread is fastest, and avoids oversubscribing shared CI cores.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def check_tree(tree: DDTreeDraft, logits: torch.Tensor, budget: int) -> None:
    """The oracle's checks, plus the reference's own fields: root and child maps."""
    assert tree.tokens[0] == 7 and tree.parents[0] == -1 and tree.depths[0] == 0
    nodes = Nodes(list(tree.tokens[1:]), list(tree.parents[1:]), list(tree.depths[1:]), list(tree.log_probs[1:]))
    check_best_tree(nodes, draft_log_probs(logits), budget, padded=False)
    children = {(p, tree.tokens[i]): i for i, p in enumerate(tree.parents) if i > 0}
    assert {(p, t): i for p, m in enumerate(tree.child_maps) for t, i in m.items()} == children


@pytest.mark.parametrize("seed", range(300))
def test_builder_returns_exactly_the_top_b_prefixes(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    vocab = int(torch.randint(2, 6, (1,), generator=g))
    depth = int(torch.randint(1, 5, (1,), generator=g))
    reachable = sum(vocab**d for d in range(1, depth + 1))
    budget = int(torch.randint(0, min(reachable, 40) + 3, (1,), generator=g))
    logits = torch.randn(depth, vocab, generator=g) * float(torch.rand(1, generator=g) * 4 + 0.1)
    check_tree(build_ddtree_tree(logits, budget, root_token=7), logits, budget)


@pytest.mark.parametrize("kind", sorted(DEGENERATE))
@pytest.mark.parametrize("seed", range(6))
def test_degenerate_rows_give_the_best_reachable_prefixes(kind: str, seed: int) -> None:
    logits = degenerate_logits(kind, seed)[0]
    for budget in budgets_for(draft_log_probs(logits)):
        check_tree(build_ddtree_tree(logits, budget, root_token=7), logits, budget)


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
    tree = build_ddtree_tree(logits, 1000, root_token=7)
    assert tree.num_nodes - 1 == 3 + 9
    check_tree(tree, logits, 1000)


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
        assert {k for k in range(tree.num_nodes) if vis[i, k]} == ancestors_or_self(tree.parents, i)
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
