"""A brute-force top-B oracle for DDTree trees, degenerate drafter rows, and one validator that
every tree builder's output goes through (reference, payload torch, Triton, tensor parallel).

The oracle shares no code with the builders: it enumerates every prefix u of depth 1..L over the
whole vocabulary, scores it sum_i log q_i(u_i) in float64 and drops the prefixes of probability
zero (a -inf log-prob on the path). A tree is a valid best-B tree when
- every node's parent comes before it (so its first b nodes are a tree for every b <= B, which
  adaptive budgets rely on), tokens are in the vocabulary, scores are finite and equal the
  oracle's score of the node's prefix, and no prefix appears twice;
- it holds min(B, reachable prefixes) nodes whose scores are the B best, in non-increasing
  order (with prefix-closure this makes its first b nodes a best-b tree for every b);
- a fixed-shape tree pads the rest with token 0, parent -1, depth 0 and score -inf.
`check_chain` holds the other tree a round may verify, the drafter's top-1 chain, to the same
oracle. Every walk here is bounded by the node count, so a malformed tree fails instead of
hanging.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

NEG_INF = float("-inf")
SCORE_TOL = 1e-4  # builders sum fp32 log-probs, the oracle float64 ones


def draft_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """[L, V] -> float64 log q_i(v); a row without a finite logit has no mass (all -inf)."""
    x = logits.double()
    has_mass = torch.isfinite(x).any(dim=-1, keepdim=True)
    log_z = torch.logsumexp(torch.where(has_mass, x, 0.0), dim=-1, keepdim=True)
    return torch.where(has_mass, x - log_z, NEG_INF)


def reachable_prefix_scores(log_probs: torch.Tensor) -> dict[tuple[int, ...], float]:
    """Every prefix of depth 1..L with non-zero probability, and its float64 score."""
    depth_limit, vocab = log_probs.shape
    table = log_probs.tolist()
    scores = {}
    for depth in range(1, depth_limit + 1):
        for prefix in itertools.product(range(vocab), repeat=depth):
            score = math.fsum(table[i][token] for i, token in enumerate(prefix))
            if score > NEG_INF:
                scores[prefix] = score
    return scores


@dataclass(frozen=True)
class Nodes:
    """Drafted nodes 1..B of one tree, in node order (the root is node 0 and not listed).
    parents[i] is the node index of node i + 1's parent (0 = root, -1 = padding)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    scores: list[float]


def check_best_tree(nodes: Nodes, log_probs: torch.Tensor, budget: int, *, padded: bool) -> None:
    """Assert `nodes` is a valid best-B tree for the drafter log-probs [L, V] (see module doc).
    padded: a fixed-shape tree of exactly B nodes (the payload's), else only the real nodes."""
    oracle = reachable_prefix_scores(log_probs)
    expect = min(budget, len(oracle))
    real = sum(p >= 0 for p in nodes.parents)
    assert real == expect, f"{real} nodes with a parent, expected min(B={budget}, {len(oracle)})"
    assert len(nodes.tokens) == (budget if padded else expect)
    assert all(p >= 0 for p in nodes.parents[:real]), "a padding node before a real one"
    vocab = log_probs.shape[1]
    prefixes: list[tuple[int, ...]] = [()]  # prefixes[n]: tokens from the root to node n
    for n, (token, parent, depth, score) in enumerate(
        zip(nodes.tokens[:real], nodes.parents, nodes.depths, nodes.scores, strict=False), start=1
    ):
        assert 0 <= parent < n, f"node {n}: parent {parent} does not come before it"
        assert 0 <= token < vocab, f"node {n}: token {token} outside the vocabulary"
        prefix = (*prefixes[parent], token)
        assert depth == len(prefix), f"node {n}: depth {depth}, path length {len(prefix)}"
        assert prefix in oracle, f"node {n}: prefix {prefix} has probability zero"
        assert math.isfinite(score) and abs(score - oracle[prefix]) <= SCORE_TOL, (n, score, oracle[prefix])
        prefixes.append(prefix)
    assert len(set(prefixes)) == len(prefixes), "a prefix appears twice"
    got = nodes.scores[:real]
    assert all(a >= b - SCORE_TOL for a, b in itertools.pairwise(got)), f"scores not non-increasing: {got}"
    best = sorted(oracle.values(), reverse=True)[:expect]
    assert all(abs(a - b) <= SCORE_TOL for a, b in zip(got, best, strict=True)), (got, best)
    for n in range(real, len(nodes.tokens)):
        padding = (nodes.tokens[n], nodes.parents[n], nodes.depths[n], nodes.scores[n])
        assert padding == (0, -1, 0, NEG_INF), f"node {n + 1}: padding {padding}"


def check_chain(nodes: Nodes, log_probs: torch.Tensor) -> None:
    """Assert `nodes` (a fixed-shape tree of L nodes) is the drafter's top-1 path through the
    block [L, V], what DFLASH verifies: node d + 1 holds a most probable token of position d
    (any of tied ones), is the child of node d and scores its prefix. The path ends before the
    first position without mass (every log-prob -inf, as the oracle drops prefixes of
    probability zero); padding follows, as in a best-B tree."""
    oracle = reachable_prefix_scores(log_probs)
    table = log_probs.tolist()
    depth_limit = len(table)
    assert len(nodes.tokens) == depth_limit, f"{len(nodes.tokens)} nodes, expected L={depth_limit}"
    real = next((d for d, row in enumerate(table) if max(row) == NEG_INF), depth_limit)
    path: tuple[int, ...] = ()
    for d in range(real):
        token, parent, depth, score = nodes.tokens[d], nodes.parents[d], nodes.depths[d], nodes.scores[d]
        assert (parent, depth) == (d, d + 1), f"node {d + 1}: parent {parent}, depth {depth}"
        assert 0 <= token < len(table[d]), f"node {d + 1}: token {token} outside the vocabulary"
        assert table[d][token] >= max(table[d]) - SCORE_TOL, f"node {d + 1}: {token} is not a top-1"
        path = (*path, token)
        assert path in oracle and abs(score - oracle[path]) <= SCORE_TOL, (d + 1, score, oracle.get(path))
    for n in range(real, depth_limit):
        padding = (nodes.tokens[n], nodes.parents[n], nodes.depths[n], nodes.scores[n])
        assert padding == (0, -1, 0, NEG_INF), f"node {n + 1}: padding {padding}"


def ancestors_or_self(parents: list[int] | tuple[int, ...], node: int) -> set[int]:
    """Node indices on the path from `node` up to a node without a parent (-1): at most
    len(parents) hops, so a parent cycle fails the test instead of hanging it."""
    path = {node}
    for _ in range(len(parents)):
        if parents[node] < 0:
            return path
        node = parents[node]
        path.add(node)
    raise AssertionError(f"parents {list(parents)} hold a cycle")


def linked_children(first_child: list[int], next_sibling: list[int], node: int) -> list[int]:
    """The children SGLang's left-child / right-sibling links give `node`, in link order; at
    most len(first_child) links, so a sibling cycle fails the test instead of hanging it."""
    children, child = [], first_child[node]
    for _ in range(len(first_child)):
        if child == -1:
            return children
        children.append(child)
        child = next_sibling[child]
    raise AssertionError(f"the sibling links from node {node} hold a cycle")


def row_nodes(tree, b: int) -> Nodes:
    """Request b's nodes of a fixed-shape payload tree (a ``DDTreeDraftTree``)."""
    return Nodes(
        tokens=tree.tokens[b].tolist(),
        parents=tree.parent_indices[b].tolist(),
        depths=tree.depths[b].tolist(),
        scores=tree.log_scores[b].tolist(),
    )


# --- degenerate drafter rows ------------------------------------------------------------------
#
# Each maker returns raw drafter logits [L, V] for one request; vocabularies stay tiny so the
# oracle can enumerate every prefix.


def minus_inf_logits(g: torch.Generator, depth_limit: int, vocab: int) -> torch.Tensor:
    """Random logits with some entries -inf (masked out of the vocabulary); a row keeps at
    least one finite entry."""
    logits = torch.randn(depth_limit, vocab, generator=g) * 2.0
    masked = torch.rand(depth_limit, vocab, generator=g) < 0.5
    masked[torch.arange(depth_limit), torch.randint(0, vocab, (depth_limit,), generator=g)] = False
    return logits.masked_fill(masked, NEG_INF)


def tied_logits(g: torch.Generator, depth_limit: int, vocab: int) -> torch.Tensor:
    """Logits from {0, -1, -2}: equal log-probs, so many prefixes score exactly the same."""
    return -torch.randint(0, 3, (depth_limit, vocab), generator=g).float()


def confident_logits(g: torch.Generator, depth_limit: int, vocab: int) -> torch.Tensor:
    """A confident drafter: each row's top logit 40 above the rest, so its log-prob rounds to
    exactly 0.0 in fp32 and a node's first child ties its parent's score."""
    logits = torch.zeros(depth_limit, vocab)
    logits[torch.arange(depth_limit), torch.randint(0, vocab, (depth_limit,), generator=g)] = 40.0
    return logits


def one_hot_logits(g: torch.Generator, depth_limit: int, vocab: int) -> torch.Tensor:
    """One finite logit per row (some -0.0, some random), -inf elsewhere: log-probs 0 / -inf."""
    logits = torch.full((depth_limit, vocab), NEG_INF)
    hot = torch.randint(0, vocab, (depth_limit,), generator=g)
    values = torch.where(torch.rand(depth_limit, generator=g) < 0.5, -0.0, torch.randn(depth_limit, generator=g))
    logits[torch.arange(depth_limit), hot] = values
    return logits


def empty_row_logits(g: torch.Generator, depth_limit: int, vocab: int) -> torch.Tensor:
    """Random logits with one row entirely -inf: no prefix reaches past it (row 0 included)."""
    logits = torch.randn(depth_limit, vocab, generator=g)
    logits[int(torch.randint(0, depth_limit, (1,), generator=g))] = NEG_INF
    return logits


DEGENERATE = {
    "minus-inf": minus_inf_logits,
    "ties": tied_logits,
    "confident": confident_logits,
    "one-hot": one_hot_logits,
    "empty-row": empty_row_logits,
}


def degenerate_logits(kind: str, seed: int, *, bs: int = 1, depth_limit: int = 3, vocab: int = 4) -> torch.Tensor:
    """[bs, L, V] logits of one degenerate kind (see DEGENERATE)."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([DEGENERATE[kind](g, depth_limit, vocab) for _ in range(bs)])


def budgets_for(log_probs: torch.Tensor) -> list[int]:
    """Budgets around the reachable count: 1, below it, at it and beyond it."""
    reachable = len(reachable_prefix_scores(log_probs))
    return sorted({1, max(1, reachable // 2), max(1, reachable), reachable + 5})
