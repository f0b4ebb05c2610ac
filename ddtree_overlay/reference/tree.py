"""DDTree tree construction and verification walk, exactly as paper Alg. 1 / `ddtree.py` do it.

Reference: `liranringel/ddtree@c96427a:ddtree.py` — `build_ddtree_tree` (L84-166) and
`follow_verified_tree` (L212-223). Glossary (shared with the rest of `reference/`):

- node 0 is the root: the token carried over from the last verify (the "bonus" token), already
  chosen by the target but not yet run through it; nodes 1..B are drafted, numbered in heap-pop
  order, so `parents[i] < i` and `parents[0] == -1`;
- budget B counts drafted nodes (root excluded); the verify width is N = B + 1;
- depth of node i = number of drafted tokens on its path (root 0, drafted 1..L, L = block_size-1);
  position of node i = committed length + depth(i); siblings share a position;
- accept length of a round = accepted drafted nodes + 1 (the bonus token), like SGLang's
  `spec_accept_length` and the paper's tau;
- a prefix is reachable when its drafter probability is non-zero (no -inf log-prob on its path).
  The tree holds min(B, reachable) drafted nodes and nothing else: where `ddtree.py` keeps
  popping -inf candidates (and scores their siblings -inf - -inf = NaN), this builder stops. The
  payload's fixed-shape trees pad the missing nodes instead (token 0, parent -1, depth 0, score
  -inf); a variable-length tree needs no padding.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class DDTreeDraft:
    """One round's tree. Lists have length N = 1 + num drafted nodes; index 0 is the root."""

    tokens: tuple[int, ...]  # [N] token ids, tokens[0] = root
    parents: tuple[int, ...]  # [N] parents[0] = -1, parents[i] < i
    depths: tuple[int, ...]  # [N] depths[0] = 0
    log_probs: tuple[
        float, ...
    ]  # [N] cumulative log q of the prefix (root 0.0), pop order => non-increasing
    child_maps: tuple[dict[int, int], ...]  # [N] token -> child index

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Acceptance:
    path: tuple[int, ...]  # accepted node indices, root first
    next_token: int  # the target's token after the last accepted node (next round's root)


def build_ddtree_tree(draft_logits: torch.Tensor, budget: int, root_token: int) -> DDTreeDraft:
    """Best-first top-B prefixes under the factorised drafter distribution Q = prod_i q_i.

    draft_logits: [L, V] raw drafter logits for block slots 1..L (any dtype/device).
    Each pop adds one node and pushes at most two candidates: the next sibling (same parent,
    rank+1) and the first child (depth+1, rank 0), unless its score is -inf (then so is every
    later sibling: ranks are sorted). K = min(B, V) tokens per depth. Exactly min(B, reachable)
    pops. Ties pop in the order of the rank tuple, as in the reference, so a child whose
    log-prob rounds to 0.0 (its score equals its parent's) still pops after its parent.
    """
    if budget <= 0 or draft_logits.shape[0] == 0:
        return DDTreeDraft((int(root_token),), (-1,), (0,), (0.0,), ({},))
    assert draft_logits.dim() == 2, draft_logits.shape
    topk = min(budget, draft_logits.shape[-1])
    depth_limit = int(draft_logits.shape[0])

    logits = draft_logits.float()
    top_logits, top_ids = torch.topk(logits, k=topk, dim=-1)
    log_z = torch.logsumexp(logits, dim=-1, keepdim=True)
    log_z = log_z.masked_fill(log_z == float("-inf"), 0.0)  # a row of -inf has no mass: lp -inf
    lp = (
        (top_logits - log_z).to(device="cpu", dtype=torch.float32).numpy()
    )  # [L, K] log q_depth(rank)
    ids = top_ids.to(device="cpu", dtype=torch.long).numpy()  # [L, K]

    # heap entry: (-logw, rank tuple, parent index, depth, rank, logw); Python floats as in ddtree.py
    first = float(lp[0, 0])
    heap: list[tuple[float, tuple[int, ...], int, int, int, float]] = []
    _push_reachable(heap, (-first, (0,), 0, 1, 0, first))
    tokens, parents, depths, log_probs = [int(root_token)], [-1], [0], [0.0]
    child_maps: list[dict[int, int]] = [{}]
    while heap and len(tokens) - 1 < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        token = int(ids[depth - 1, rank])
        index = len(tokens)
        tokens.append(token)
        parents.append(parent)
        depths.append(depth)
        log_probs.append(logw)
        child_maps.append({})
        child_maps[parent][token] = index
        if rank + 1 < topk:  # next sibling: same parent, swap this depth's rank for rank+1
            sib = logw - float(lp[depth - 1, rank]) + float(lp[depth - 1, rank + 1])
            _push_reachable(heap, (-sib, (*ranks[:-1], rank + 1), parent, depth, rank + 1, sib))
        if depth < depth_limit:  # first child: extend by this depth+1's top-1 token
            child = logw + float(lp[depth, 0])
            _push_reachable(heap, (-child, (*ranks, 0), index, depth + 1, 0, child))
    return DDTreeDraft(
        tuple(tokens), tuple(parents), tuple(depths), tuple(log_probs), tuple(child_maps)
    )


def _push_reachable(heap: list, entry: tuple) -> None:
    """Push a candidate unless its score (the entry's last field) is -inf: probability zero."""
    if entry[-1] > float("-inf"):
        heapq.heappush(heap, entry)


def ancestor_mask(tree: DDTreeDraft) -> torch.Tensor:
    """[N, N] bool: row i sees its ancestors and itself (valid because parents[i] < i)."""
    n = tree.num_nodes
    vis = np.zeros((n, n), dtype=np.bool_)
    vis[0, 0] = True
    for i in range(1, n):
        vis[i, :i] = vis[tree.parents[i], :i]
        vis[i, i] = True
    return torch.from_numpy(vis)


def tree_positions(tree: DDTreeDraft, start: int) -> torch.Tensor:
    """[N] int64 position ids: committed length + depth (root at `start`)."""
    return torch.tensor(tree.depths, dtype=torch.long) + start


def follow_verified_tree(tree: DDTreeDraft, posterior: list[int]) -> Acceptance:
    """Walk from the root taking the target's own token at each node (argmax at T=0, one sample
    per node at T>0); move to the child holding that token, stop when there is none.
    posterior: [N] the target's token chosen at every node."""
    assert len(posterior) == tree.num_nodes, (len(posterior), tree.num_nodes)
    path = [0]
    cur = 0
    nxt = int(posterior[0])
    while nxt in tree.child_maps[cur]:
        cur = tree.child_maps[cur][nxt]
        path.append(cur)
        nxt = int(posterior[cur])
    return Acceptance(tuple(path), nxt)
