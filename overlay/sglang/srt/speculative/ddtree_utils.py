"""DDTREE: draft-tree construction and verify bookkeeping (pure torch).

DDTree (Ringel & Romano, arXiv 2604.12989) turns one DFlash draft pass into a
tree: the top-B prefixes under the drafter's factorised per-position
distribution, verified by the target in one TARGET_VERIFY forward with an
ancestor-only attention mask.

Vocabulary (used the same way in every DDTREE file):
- node 0 is the root: the token carried over from the last verify (DFlash's
  ``verified_id``, the bonus token), at position ``prefix_len``;
- ``budget`` B counts drafted nodes, root excluded; drafted nodes are 1..B,
  numbered in pop order of the paper's best-first heap, so
  ``parent_indices[i] < i``;
- ``num_verify_tokens`` N >= B + 1 is the verify width; nodes B+1..N-1 are
  padding (unreachable, attend only to themselves);
- a prefix is reachable when its draft probability is non-zero (no -inf
  log-prob on its path); a tree holds min(B, reachable) real nodes and pads
  the rest as unreachable (``DDTreeDraftTree``);
- ``depth`` of node i is its distance from the root; position = prefix + depth;
- the chain (``build_chain_tree``) is the other tree a round may verify: the
  drafter's top-1 token at every draft position, one path of L nodes, as
  DFLASH verifies (ddtree_budget: a round's shape);
- ``num_correct_drafts`` counts accepted drafts; ``accept_lens`` includes the
  bonus token (SGLang's convention).

Everything here is shape-static and sync-free, so it runs inside overlap
scheduling; it also runs on CPU, where the tests compare it with a heap oracle.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import List, NamedTuple, Optional

import torch

from sglang.srt.speculative.ddtree_budget import CHAIN, Shape


@contextmanager
def replaced_attribute(obj, name: str, value):
    """``obj.name`` is ``value`` inside the scope and what it was again afterwards (the shims
    build a narrower verify width under the width and batch sizes their release reads)."""
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


@dataclass(frozen=True)
class DDTreeDraftTopK:
    """Per-position top-K of the drafter, in fp32 log-probabilities.

    Shape: ``log_probs`` / ``token_ids`` [bs, L, K], sorted descending along K,
    where L = block_size - 1 draft positions and K = min(budget, vocab).
    Every id is in the vocabulary; an entry of log-prob -inf (a token the drafter
    rules out, or padding) never becomes a node, whatever its id.
    """

    log_probs: torch.Tensor
    token_ids: torch.Tensor


@dataclass(frozen=True)
class DDTreeDraftTree:
    """A batch of draft trees, node i+1 stored at column i.

    Shape: every field [bs, B]. Nodes are in pop order: scores non-increasing,
    ``parent_indices[:, i] < i + 1``, so the first b columns are the best-b tree.
    - ``tokens``: int64 token of each drafted node;
    - ``parent_indices``: int64 node index of the parent (0 = root);
    - ``depths``: int64, 1..L;
    - ``log_scores``: fp32 cumulative draft log-probability, finite.
    When fewer than B prefixes are reachable, the columns after the real nodes
    are unreachable padding: token 0, parent -1, depth 0, score -inf.
    """

    tokens: torch.Tensor
    parent_indices: torch.Tensor
    depths: torch.Tensor
    log_scores: torch.Tensor

    @property
    def budget(self) -> int:
        return int(self.tokens.shape[1])

    def first_nodes(self, budget: int) -> "DDTreeDraftTree":
        """The tree of ``budget`` nodes inside this one: its first nodes in pop order (the
        best-first rule pops the same nodes first whatever the budget)."""
        if self.budget == budget:
            return self
        return DDTreeDraftTree(*(field[:, :budget] for field in self._fields()))

    def first_rows(self, bs: int) -> "DDTreeDraftTree":
        """The trees of the first ``bs`` requests (a graph's padded batch cut to the round's)."""
        if int(self.tokens.shape[0]) == bs:
            return self
        return DDTreeDraftTree(*(field[:bs] for field in self._fields()))

    def _fields(self):
        return self.tokens, self.parent_indices, self.depths, self.log_scores


class DDTreeDrafts(NamedTuple):
    """What a round's tree stage built (``DraftStage``): the best-first tree, and the chain;
    None for the one it did not build."""

    tree: Optional[DDTreeDraftTree]
    chain: Optional[DDTreeDraftTree]

    def verified(self, shape: Shape) -> DDTreeDraftTree:
        """The tree a round of this shape verifies."""
        if shape == CHAIN:
            return self.chain
        return self.tree.first_nodes(int(shape))

    def first_rows(self, bs: int) -> "DDTreeDrafts":
        return DDTreeDrafts(*(None if t is None else t.first_rows(bs) for t in self))


@dataclass(frozen=True)
class DDTreeVerifyTensors:
    """What the verify forward and the accept kernels read of a round's trees.

    Shape: every field [bs, N], int64.
    """

    draft_token: torch.Tensor
    positions: torch.Tensor
    retrieve_index: torch.Tensor
    retrieve_next_token: torch.Tensor
    retrieve_next_sibling: torch.Tensor


@dataclass(frozen=True)
class DDTreeVerifyBuffers(DDTreeVerifyTensors):
    """The verify tensors plus the ancestor mask the custom mask is built from.

    Shape: ``ancestor_mask`` [bs, N, N] (bool, row i = ancestors-or-self of node i).
    """

    ancestor_mask: torch.Tensor


def draft_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Logits [bs, L, V] of the lm_head rows ``weight`` [V, H] over draft hidden states
    [bs, L, H], as one 2-D GEMM.

    The draft slots are a strided slice of the block, and ``torch.matmul`` does not fold a 3-D
    operand it cannot view as 2-D: it runs a batched GEMM that reads the whole weight once per
    request (Qwen3.6-27B's 2.5 GB lm_head at bs 16: 9.9 against 0.9 ms on an H200, 2026-12-04).
    Flattening copies only the hidden states.
    """
    bs, depth, width = hidden.shape
    flat = hidden.reshape(bs * depth, width).to(weight.dtype)
    return torch.mm(flat, weight.T).view(bs, depth, weight.shape[0])


def compute_draft_topk(logits: torch.Tensor, k: int) -> DDTreeDraftTopK:
    """Top-K log-probabilities of the drafter with the full-vocabulary normaliser.

    Args:
        logits: raw drafter logits for draft positions 1..L. Shape: [bs, L, V].
        k: K = min(budget, V).

    Notes: the paper's rule is log q_i(v) = l_i(v) - logsumexp(l_i) in fp32 at
    T=1, whatever the sampling temperature. A row of only -inf logits has no
    mass: its log-probs are -inf (not -inf - -inf = NaN).
    """
    if logits.ndim != 3:
        raise ValueError(f"DDTREE draft logits must be [bs, L, V], got {tuple(logits.shape)}.")
    logits = logits.float()
    k = min(int(k), int(logits.shape[-1]))
    log_z = finite_log_normaliser(torch.logsumexp(logits, dim=-1, keepdim=True))
    top_logits, top_ids = torch.topk(logits, k, dim=-1, sorted=True)
    return DDTreeDraftTopK(log_probs=top_logits - log_z, token_ids=top_ids)


def finite_log_normaliser(log_z: torch.Tensor) -> torch.Tensor:
    """logsumexp of the logits with a row of only -inf (log Z = -inf) set to 0, so that
    row's log-probs l - log Z stay -inf instead of NaN."""
    return log_z.masked_fill(log_z == float("-inf"), 0.0)


def _order_keys(scores: torch.Tensor) -> torch.Tensor:
    """[bs, M] fp32 -> int64 keys whose descending order is (score desc, column asc).

    Exact ties (a child whose log-prob is 0.0 ties its parent) then order by
    column on every device, without relying on a sort's stability, and -0.0
    ranks with +0.0 (a radix sort puts -0.0 below +0.0). The fp32 bits map to
    an int32 of the same order (negative floats flip their magnitude bits).
    """
    bits = (scores + 0.0).view(torch.int32)  # + 0.0 folds -0.0 into +0.0
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    column = torch.arange(scores.shape[1], device=scores.device)
    return (ordered.to(torch.int64) << 32) | (0x7FFFFFFF - column)


def build_ddtree_tree(topk: DDTreeDraftTopK, budget: int) -> DDTreeDraftTree:
    """The best B prefixes under q(u) = prod_i q_i(u_i), as a tree (paper Alg. 1).

    The paper pops a max-heap B times. The same set comes out of a fixed-shape
    search: the best B prefixes of depth d are children of the best B prefixes
    of depth d-1 (a better parent's top-1 child always beats a worse parent's
    child), so keep a frontier of B per depth and take the best B over all
    depths. Ordering by (score desc, depth asc) puts every parent before its
    children -- the heap's pop order up to ties, and a child scores at most its
    parent's score -- so taking the first B keeps the set prefix-closed.
    """
    log_probs, token_ids = topk.log_probs, topk.token_ids
    bs, depth_limit, k = log_probs.shape
    device = log_probs.device
    budget = int(budget)
    if budget <= 0 or depth_limit == 0:
        empty = torch.empty((bs, 0), dtype=torch.int64, device=device)
        return DDTreeDraftTree(empty, empty, empty, empty.float())

    width = budget  # frontier per depth
    neg_inf = torch.full((bs, width), float("-inf"), device=device)
    take = min(width, k)
    scores = neg_inf.clone()
    scores[:, :take] = log_probs[:, 0, :take]
    tokens = torch.zeros((bs, width), dtype=torch.int64, device=device)
    tokens[:, :take] = token_ids[:, 0, :take]
    parent_flat = torch.full((bs, width), -1, dtype=torch.int64, device=device)

    all_scores, all_tokens, all_parents = [scores], [tokens], [parent_flat]
    for d in range(1, depth_limit):
        cand = scores.unsqueeze(2) + log_probs[:, d, None, :]  # [bs, width, k]
        scores, flat_idx = torch.topk(cand.reshape(bs, width * k), width, dim=1)
        rank = flat_idx % k
        tokens = token_ids[:, d, :].gather(1, rank)
        parent_flat = (d - 1) * width + flat_idx // k
        all_scores.append(scores)
        all_tokens.append(tokens)
        all_parents.append(parent_flat)

    cand_scores = torch.cat(all_scores, dim=1)  # [bs, L*width], depth-major
    cand_tokens = torch.cat(all_tokens, dim=1)
    cand_parents = torch.cat(all_parents, dim=1)
    cand_depths = (
        torch.arange(depth_limit, device=device).repeat_interleave(width) + 1
    ).expand(bs, -1)

    # Columns are depth-major: (score desc, column asc) = (score desc, depth asc).
    chosen = torch.topk(_order_keys(cand_scores), budget, dim=1).indices

    node_of_cand = torch.full_like(cand_parents, -1)
    node_ids = torch.arange(1, budget + 1, device=device).expand(bs, -1)
    node_of_cand.scatter_(1, chosen, node_ids)

    log_scores = cand_scores.gather(1, chosen)
    reachable = torch.isfinite(log_scores)
    parent_cand = cand_parents.gather(1, chosen)
    parents = torch.where(
        parent_cand >= 0, node_of_cand.gather(1, parent_cand.clamp(min=0)), 0
    )
    return DDTreeDraftTree(
        tokens=torch.where(reachable, cand_tokens.gather(1, chosen), 0),
        parent_indices=torch.where(reachable, parents, -1),
        depths=torch.where(reachable, cand_depths.gather(1, chosen), 0),
        log_scores=log_scores,
    )


def build_chain_tree(topk: DDTreeDraftTopK) -> DDTreeDraftTree:
    """The drafter's top-1 path through the block as a tree of L nodes: node d (1..L) is the
    top-1 token of draft position d, child of node d - 1, scored by the summed top-1 log-probs
    (summed in the order ``build_ddtree_tree`` sums a path). This is what DFLASH verifies.

    The path ends before the first position without mass (a top-1 log-prob of -inf): the
    nodes from there are ``DDTreeDraftTree``'s padding, as the best-first tree pads
    unreachable prefixes.
    """
    log_probs, token_ids = topk.log_probs, topk.token_ids
    bs, depth_limit, _ = log_probs.shape
    device = log_probs.device
    if depth_limit == 0:
        empty = torch.empty((bs, 0), dtype=torch.int64, device=device)
        return DDTreeDraftTree(empty, empty, empty, empty.float())
    top1 = log_probs[:, :, 0].float()
    summed = [top1[:, 0]]
    for d in range(1, depth_limit):
        summed.append(summed[-1] + top1[:, d])
    log_scores = torch.stack(summed, dim=1)
    depth = torch.arange(1, depth_limit + 1, device=device).expand(bs, -1)
    reachable = torch.isfinite(log_scores)
    return DDTreeDraftTree(
        tokens=torch.where(reachable, token_ids[:, :, 0].long(), 0),
        parent_indices=torch.where(reachable, depth - 1, -1),
        depths=torch.where(reachable, depth, 0),
        log_scores=log_scores,
    )


def tree_to_verify_buffers(
    tree: DDTreeDraftTree,
    root_tokens: torch.Tensor,
    prefix_lens: torch.Tensor,
    num_verify_tokens: int,
    max_depth: int,
) -> DDTreeVerifyBuffers:
    """Flatten trees into verify inputs: root first, nodes in pop order, padding last.

    Args:
        tree: [bs, B] trees.
        root_tokens: the bonus token of the last verify. Shape: [bs].
        prefix_lens: committed length; the root sits at this position. Shape: [bs].
        num_verify_tokens: N >= B + 1.
        max_depth: a bound on node depth (block_size - 1); sets the number of
            parent hops, so the loop is static and needs no device sync.
    """
    bs, budget = tree.tokens.shape
    n = int(num_verify_tokens)
    if n < budget + 1:
        raise ValueError(f"DDTREE num_verify_tokens must be >= budget + 1, got {n} < {budget + 1}.")
    device = tree.tokens.device
    pad = n - 1 - budget

    def with_root(root_col: torch.Tensor, nodes: torch.Tensor, fill: int) -> torch.Tensor:
        padding = torch.full((bs, pad), fill, dtype=nodes.dtype, device=device)
        return torch.cat([root_col.view(bs, 1).to(nodes.dtype), nodes, padding], dim=1)

    zeros = torch.zeros((bs, 1), dtype=torch.int64, device=device)
    draft_token = with_root(root_tokens, tree.tokens, 0)
    depths = with_root(zeros, tree.depths, 0)
    parents = with_root(zeros, tree.parent_indices, -1)  # root's own parent: itself
    positions = prefix_lens.view(bs, 1).to(torch.int64) + depths

    node = torch.arange(n, device=device).expand(bs, n)
    hop = torch.where(parents >= 0, parents, node)  # unreachable nodes loop on themselves
    ancestor_mask = torch.zeros((bs, n, n), dtype=torch.bool, device=device)
    cur = node
    for _ in range(min(int(max_depth), budget) + 1):
        ancestor_mask.scatter_(2, cur.unsqueeze(2), True)
        cur = hop.gather(1, cur)

    next_token, next_sibling = _first_child_and_next_sibling(parents)
    retrieve_index = node + torch.arange(bs, device=device).view(bs, 1) * n
    return DDTreeVerifyBuffers(
        draft_token=draft_token,
        positions=positions,
        retrieve_index=retrieve_index,
        retrieve_next_token=next_token,
        retrieve_next_sibling=next_sibling,
        ancestor_mask=ancestor_mask,
    )


def _first_child_and_next_sibling(parents: torch.Tensor):
    """Left-child / right-sibling links (SGLang's ``retrieve_next_*``) from parents.

    Shape: parents [bs, N] with parents[:, 0] == 0 for the root and -1 for
    unreachable nodes; returns two int64 [bs, N] tensors, -1 where absent.
    Siblings are linked in index order, i.e. best draft first.
    """
    bs, n = parents.shape
    device = parents.device
    child = torch.arange(1, n, device=device).expand(bs, -1)
    child_parent = parents[:, 1:]
    is_child = child_parent >= 0

    first_child = torch.full((bs, n), n, dtype=torch.int64, device=device)
    first_child.scatter_reduce_(
        1, child_parent.clamp(min=0), torch.where(is_child, child, n), reduce="amin"
    )
    first_child = torch.where(first_child == n, -1, first_child)

    # Sort children by (parent, index); consecutive entries sharing a parent are siblings.
    key = torch.where(is_child, child_parent * n + child, n * n + child)
    sorted_key, sorted_pos = torch.sort(key, dim=1)
    sorted_child = child.gather(1, sorted_pos)
    same_parent = (sorted_key[:, 1:] < n * n) & (
        sorted_key[:, 1:] // n == sorted_key[:, :-1] // n
    )
    next_sibling = torch.full((bs, n), -1, dtype=torch.int64, device=device)
    next_sibling.scatter_(
        1, sorted_child[:, :-1], torch.where(same_parent, sorted_child[:, 1:], -1)
    )
    return first_child, next_sibling


def build_tree_custom_mask(
    ancestor_mask: torch.Tensor, seq_lens: torch.Tensor, capacity: int
) -> torch.Tensor:
    """SGLang's FULL verify mask: per request a row-major [N, seq_len + N] block.

    Prefix columns are all True (the whole committed prefix is visible); the
    last N columns are the tree's ancestor-or-self mask. Blocks are
    concatenated in batch order; ``capacity`` (>= the exact total, e.g. from
    host-side upper bounds of seq_lens) keeps this free of device syncs, and
    entries past the exact total are never read.

    Shape: ancestor_mask [bs, N, N] bool, seq_lens [bs]; returns bool [capacity].
    """
    bs, n, _ = ancestor_mask.shape
    device = ancestor_mask.device
    seq_lens = seq_lens.to(torch.int64)
    row_len = seq_lens + n
    block = n * row_len
    block_start = torch.cumsum(block, dim=0) - block
    rows = torch.arange(n, device=device).view(1, n, 1)
    cols = torch.arange(n, device=device).view(1, 1, n)
    index = (
        block_start.view(bs, 1, 1)
        + rows * row_len.view(bs, 1, 1)
        + seq_lens.view(bs, 1, 1)
        + cols
    )
    mask = torch.ones((int(capacity),), dtype=torch.bool, device=device)
    mask[index.reshape(-1)] = ancestor_mask.reshape(-1)
    return mask


def write_verify_inputs(
    tree: DDTreeDraftTree,
    root_tokens: torch.Tensor,
    prefix_lens: torch.Tensor,
    num_verify_tokens: int,
    max_depth: int,
    mask_capacity: int,
    tail_only: bool = False,
) -> tuple[DDTreeVerifyTensors, torch.Tensor]:
    """A round's verify tensors and FULL mask from its tree, in torch; with ``tail_only``
    the tail-only mask instead: the [bs, N, N] ancestor mask, flat (``ddtree_verify_attention``
    needs no prefix columns; ``mask_capacity`` is then unused).

    ``ddtree_kernels.write_verify_inputs`` does the same in one Triton launch.
    """
    buffers = tree_to_verify_buffers(
        tree,
        root_tokens=root_tokens,
        prefix_lens=prefix_lens,
        num_verify_tokens=num_verify_tokens,
        max_depth=max_depth,
    )
    if tail_only:
        return buffers, buffers.ancestor_mask.reshape(-1)
    return buffers, build_tree_custom_mask(buffers.ancestor_mask, prefix_lens, mask_capacity)


def follow_verified_tree_cpu(
    draft_token: List[int], parent_indices: List[int], target_predict: List[int]
) -> tuple[List[int], int]:
    """Reference accept walk for one request (test oracle, paper's rule).

    Start at the root; the target's choice at the current node is the next
    token; move to the child holding that token, else stop. Returns the
    accepted node indices (root first) and the bonus token.
    """
    children: List[dict] = [{} for _ in draft_token]
    for node, parent in enumerate(parent_indices):
        if node > 0 and parent >= node:
            raise ValueError(f"DDTREE tree node {node} has parent {parent}; parents must come first.")
        if node > 0 and parent >= 0:
            children[parent][draft_token[node]] = node
    path = [0]
    nxt = target_predict[0]
    while nxt in children[path[-1]]:
        path.append(children[path[-1]][nxt])
        nxt = target_predict[path[-1]]
    return path, nxt
