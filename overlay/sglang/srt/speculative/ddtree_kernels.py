"""DDTREE: the round's bookkeeping as Triton kernels.

The same outputs as ``ddtree_utils``'s ``build_ddtree_tree`` ->
``tree_to_verify_buffers`` -> ``build_tree_custom_mask`` (the torch versions
stay the oracle), in two launches instead of ~150 small torch ones: a round's
tree stage is bound by CPU launch time, not by GPU work.

- ``_row_logsumexp_kernel`` (one program per draft row) takes the drafter's
  full-vocabulary normaliser in fp32 straight from its bf16 logits, for
  ``draft_topk``;
- ``_draft_block_kernel`` (one program per request) writes the draft block's
  token ids and positions and the verify block's KV slots;
- ``_best_first_tree_kernel`` (one program per request) pops the paper's
  best-first heap B times, ties broken as ``build_ddtree_tree`` orders nodes;
- ``_chain_kernel`` (one program per request) writes the drafter's top-1 path
  (``build_chain_tree``);
- ``_verify_inputs_kernel`` (one program per request and tile of verify rows)
  writes the [bs, N] verify tensors and the FULL custom mask.

Vocabulary as in ``ddtree_utils``. Shape-static and free of host syncs, so it
runs under overlap scheduling.

One module past 500 lines: the round's kernels share one tree layout (nodes in pop order,
parents first) that the tree and chain kernels write and the verify-input and accept kernels
read; a payload file is installed whole under its name in every release's manifest.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.speculative.ddtree_utils import (
    DDTreeDraftTopK,
    DDTreeDraftTree,
    DDTreeVerifyTensors,
)

# Elements of one verify kernel tile ([rows, NODE_BLOCK] ancestor bits).
_VERIFY_TILE_ELEMS = 4096
_PREFIX_BLOCK = 256
_BATCH_BLOCK = 64
_INT32_MAX = 2**31 - 1
_LSE_BLOCK = 2048  # vocabulary entries a logsumexp program reads per step


def _int64_outputs(device, *shapes) -> list:
    """Fresh int64 tensors of these shapes, carved from one allocation."""
    sizes = [math.prod(shape) for shape in shapes]
    flat = torch.empty((sum(sizes),), dtype=torch.int64, device=device)
    return [part.view(shape) for part, shape in zip(flat.split(sizes), shapes, strict=True)]


@triton.jit
def _draft_block_kernel(
    root_tokens_ptr,  # [bs]
    prefix_lens_ptr,  # [bs]
    req_pool_indices_ptr,  # [bs]
    req_to_token_ptr,  # [pool rows, context] int32
    req_to_token_stride,
    block_ids_ptr,  # [bs, L] int64 out
    positions_ptr,  # [bs, L] int64 out
    cache_loc_ptr,  # [bs, N] int64 out
    mask_token_id,
    block_size,
    num_verify_tokens,
    BLOCK: tl.constexpr,
):
    req = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    prefix = tl.load(prefix_lens_ptr + req).to(tl.int64)
    root = tl.load(root_tokens_ptr + req).to(tl.int64)
    row = tl.load(req_pool_indices_ptr + req).to(tl.int64)
    in_block = offs < block_size
    ids = tl.where(offs == 0, root, mask_token_id).to(tl.int64)
    tl.store(block_ids_ptr + req * block_size + offs, ids, mask=in_block)
    tl.store(positions_ptr + req * block_size + offs, prefix + offs, mask=in_block)
    in_verify = offs < num_verify_tokens
    slots = tl.load(req_to_token_ptr + row * req_to_token_stride + prefix + offs, mask=in_verify, other=0)
    tl.store(cache_loc_ptr + req * num_verify_tokens + offs, slots.to(tl.int64), mask=in_verify)


def prepare_draft_block(
    root_tokens: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    *,
    mask_token_id: int,
    block_size: int,
    num_verify_tokens: int,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The draft block [root, MASK x (L-1)], its positions prefix + j, and the KV slots of
    the verify block (``req_to_token[pool row, prefix + j]`` for j < N), in one launch.

    Returns block_ids [bs, L], positions [bs, L] and cache_loc [bs, N], all int64.
    """
    bs = int(prefix_lens.shape[0])
    block_ids, positions, cache_loc = _int64_outputs(
        prefix_lens.device, (bs, block_size), (bs, block_size), (bs, num_verify_tokens)
    )
    if bs > 0:
        _draft_block_kernel[(bs,)](
            root_tokens, prefix_lens, req_pool_indices, req_to_token, req_to_token.stride(0),
            block_ids, positions, cache_loc,
            int(mask_token_id), block_size, num_verify_tokens,
            BLOCK=triton.next_power_of_2(max(block_size, num_verify_tokens)),
        )
    return block_ids, positions, cache_loc


@triton.jit
def _order_key(score, key):
    """One int64 whose max is the best candidate: score desc, then key asc.

    The fp32 score's bits are mapped to an int32 of the same order (negative
    floats flip their magnitude bits; ``+ 0.0`` folds -0.0 into +0.0) and put
    above the complement of the tie key, so a single max reduction pops.
    """
    bits = (score + 0.0).to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - key).to(tl.int64)


@triton.jit
def _split_order_key(best):
    """Inverse of ``_order_key``: (score, key)."""
    ordered = (best >> 32).to(tl.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    key = 0x7FFFFFFF - (best - ((best >> 32) << 32)).to(tl.int32)
    return bits.to(tl.float32, bitcast=True), key


@triton.jit
def _best_first_tree_kernel(
    log_probs_ptr,  # [bs, L, K] fp32, contiguous, sorted desc along K
    token_ids_ptr,  # [bs, L, K] int64, contiguous
    tokens_ptr,  # [bs, B] int64 out
    parents_ptr,  # [bs, B] int64 out
    depths_ptr,  # [bs, B] int64 out
    scores_ptr,  # [bs, B] fp32 out
    depth_limit,
    topk_width,
    budget,
    BUDGET_BLOCK: tl.constexpr,
):
    """Pop the best-first heap B times for one request (paper Alg. 1).

    A candidate is a prefix (depth d, rank r under parent p) whose parent has
    been popped. Popping it adds its next sibling (d, r + 1) and its first
    child (d + 1, 0); both scores are parent score + one log-prob, summed in
    the order ``build_ddtree_tree`` sums them, so scores are bit-identical.
    Pops go by (score desc, depth asc, parent node asc, rank asc): the tie
    key is ``(d - 1, p, r)`` packed as an int. Each candidate lives in a slot;
    a sibling replaces its elder in place and the child of pop i takes slot
    i + 1, so B slots are enough (a child pushed by the last pop is never
    popped).
    """
    req = tl.program_id(0).to(tl.int64)
    log_probs = log_probs_ptr + req * depth_limit * topk_width
    parent_span = budget + 1
    depth_stride = parent_span * topk_width  # key units per depth

    slot = tl.arange(0, BUDGET_BLOCK)
    score = tl.where(slot == 0, tl.load(log_probs), float("-inf"))  # (depth 1, rank 0)
    parent_score = tl.zeros([BUDGET_BLOCK], tl.float32)
    key = tl.zeros([BUDGET_BLOCK], tl.int32)
    popped_key = tl.zeros([BUDGET_BLOCK], tl.int32)
    popped_score = tl.full([BUDGET_BLOCK], float("-inf"), tl.float32)

    for node in range(budget):
        order = _order_key(score, key)
        best = tl.max(order, axis=0)
        best_score, best_key = _split_order_key(best)
        # Every finite prefix pops before any -inf one; after that, nothing changes.
        live = best_score > float("-inf")
        popped_key = tl.where(slot == node, best_key, popped_key)
        popped_score = tl.where(slot == node, best_score, popped_score)

        rank = best_key % topk_width
        depth0 = best_key // depth_stride
        sibling_lp = tl.load(
            log_probs + depth0 * topk_width + rank + 1,
            mask=live & (rank + 1 < topk_width),
            other=float("-inf"),
        )
        # Per slot rather than `& live` (same thing): Triton's CPU interpreter
        # broadcasts a scalar bool to a float block, which `&` then rejects.
        is_popped = (order == best) & (score > float("-inf"))
        score = tl.where(is_popped, parent_score + sibling_lp, score)
        key = tl.where(is_popped, key + 1, key)

        child_lp = tl.load(
            log_probs + (depth0 + 1) * topk_width,
            mask=live & (depth0 + 1 < depth_limit),
            other=float("-inf"),
        )
        is_child_slot = slot == tl.where(live, node + 1, BUDGET_BLOCK)
        score = tl.where(is_child_slot, best_score + child_lp, score)
        parent_score = tl.where(is_child_slot, best_score, parent_score)
        key = tl.where(is_child_slot, (depth0 + 1) * depth_stride + (node + 1) * topk_width, key)

    rank = popped_key % topk_width
    parent = (popped_key // topk_width) % parent_span
    depth0 = popped_key // depth_stride
    reachable = popped_score > float("-inf")
    in_budget = slot < budget
    out = req * budget + slot
    token = tl.load(
        token_ids_ptr + req * depth_limit * topk_width + depth0 * topk_width + rank,
        mask=in_budget & reachable,
        other=0,
    )
    tl.store(tokens_ptr + out, token, mask=in_budget)
    tl.store(parents_ptr + out, tl.where(reachable, parent, -1).to(tl.int64), mask=in_budget)
    tl.store(depths_ptr + out, tl.where(reachable, depth0 + 1, 0).to(tl.int64), mask=in_budget)
    tl.store(scores_ptr + out, popped_score, mask=in_budget)


@triton.jit
def _parent_of(tree_parents, node, budget):
    """Parent of verify node ``node`` (root, padding and unreachable: -1)."""
    in_tree = (node >= 1) & (node <= budget)
    return tl.load(tree_parents + node - 1, mask=in_tree, other=-1).to(tl.int32)


@triton.jit
def _prefix_len_sums(prefix_lens_ptr, req, batch_size, BATCH_BLOCK: tl.constexpr):
    """(sum of prefix_lens before request ``req``, sum over the batch), int64."""
    before = tl.zeros([], tl.int64)
    total = tl.zeros([], tl.int64)
    for start in range(0, batch_size, BATCH_BLOCK):
        idx = start + tl.arange(0, BATCH_BLOCK)
        lens = tl.load(prefix_lens_ptr + idx, mask=idx < batch_size, other=0).to(tl.int64)
        before += tl.sum(tl.where(idx < req, lens, 0), axis=0)
        total += tl.sum(lens, axis=0)
    return before, total


@triton.jit
def _fill_true(mask_ptr, start, stop, BLOCK: tl.constexpr):
    for offset in range(start, stop, BLOCK):
        idx = offset + tl.arange(0, BLOCK)
        tl.store(mask_ptr + idx, tl.full([BLOCK], 1, tl.int1), mask=idx < stop)


# batch_size and mask_capacity change every round: no value specialisation (== 1,
# divisible by 16), so they never trigger a recompile mid-serving.
@triton.jit(do_not_specialize=["batch_size", "mask_capacity"])
def _verify_inputs_kernel(
    tree_tokens_ptr,  # [bs, B] int64
    tree_parents_ptr,  # [bs, B] int64
    tree_depths_ptr,  # [bs, B] int64
    root_tokens_ptr,  # [bs]
    prefix_lens_ptr,  # [bs]
    draft_token_ptr,  # [bs, N] int64 out, and the four below
    positions_ptr,
    retrieve_index_ptr,
    next_token_ptr,
    next_sibling_ptr,
    mask_ptr,  # [capacity] bool out
    batch_size,
    budget,
    num_verify_tokens,
    num_hops,
    mask_capacity,
    NODE_BLOCK: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    PREFIX_BLOCK: tl.constexpr,
    BATCH_BLOCK: tl.constexpr,
    TAIL_ONLY: tl.constexpr,
):
    """Verify rows [tile * ROW_BLOCK, ...) of one request: root, nodes 1..B, padding.

    Besides its rows' entries of the [bs, N] tensors, a program writes its
    rows of the request's FULL mask block (prefix columns True, tree columns
    ancestor-or-self, found by ``num_hops`` parent hops) and an even share of
    the tail past the exact mask length (True, as ``build_tree_custom_mask``
    leaves it; CUDA-graph padding may read it). Every mask store is bounded
    by ``mask_capacity``. ``TAIL_ONLY``: the mask has no prefix columns (an
    [N, N] block per request, ``ddtree_verify_attention``'s layout).
    """
    req = tl.program_id(0)
    tile = tl.program_id(1)
    n = num_verify_tokens
    rows = tile * ROW_BLOCK + tl.arange(0, ROW_BLOCK)
    cols = tl.arange(0, NODE_BLOCK)
    row_ok = rows < n
    col_ok = cols < n
    tree = req.to(tl.int64) * budget
    row_parent = _parent_of(tree_parents_ptr + tree, rows, budget)
    col_parent = _parent_of(tree_parents_ptr + tree, cols, budget)

    # Left-child / right-sibling links; children are in index order, best draft first.
    is_child = col_parent[None, :] == rows[:, None]
    first_child = tl.min(tl.where(is_child, cols[None, :], NODE_BLOCK), axis=1)
    is_younger_sibling = (
        (col_parent[None, :] == row_parent[:, None])
        & (row_parent[:, None] >= 0)
        & (cols[None, :] > rows[:, None])
    )
    next_sibling = tl.min(tl.where(is_younger_sibling, cols[None, :], NODE_BLOCK), axis=1)

    in_tree = (rows >= 1) & (rows <= budget)
    token = tl.load(tree_tokens_ptr + tree + rows - 1, mask=in_tree, other=0).to(tl.int64)
    root_token = tl.load(root_tokens_ptr + req).to(tl.int64)
    token = tl.where(rows == 0, root_token, token)
    depth = tl.load(tree_depths_ptr + tree + rows - 1, mask=in_tree, other=0).to(tl.int64)
    prefix_len = tl.load(prefix_lens_ptr + req).to(tl.int64)

    out = req.to(tl.int64) * n + rows
    tl.store(draft_token_ptr + out, token, mask=row_ok)
    tl.store(positions_ptr + out, prefix_len + depth, mask=row_ok)
    tl.store(retrieve_index_ptr + out, out, mask=row_ok)
    tl.store(
        next_token_ptr + out,
        tl.where(first_child < NODE_BLOCK, first_child, -1).to(tl.int64),
        mask=row_ok,
    )
    tl.store(
        next_sibling_ptr + out,
        tl.where(next_sibling < NODE_BLOCK, next_sibling, -1).to(tl.int64),
        mask=row_ok,
    )

    # Ancestor-or-self: hop up from each row; the root, padding and unreachable
    # nodes have no parent and stay put.
    hop = rows
    visible = cols[None, :] == hop[:, None]
    for _ in range(num_hops):
        up = _parent_of(tree_parents_ptr + tree, hop, budget)
        hop = tl.where(up >= 0, up, hop)
        visible = visible | (cols[None, :] == hop[:, None])

    if TAIL_ONLY:
        mask_prefix = tl.zeros([], tl.int64)
        prefix_before = tl.zeros([], tl.int64)
        prefix_total = tl.zeros([], tl.int64)
    else:
        mask_prefix = prefix_len
        prefix_before, prefix_total = _prefix_len_sums(prefix_lens_ptr, req, batch_size, BATCH_BLOCK)
    row_len = mask_prefix + n
    row_start = n * prefix_before + req.to(tl.int64) * n * n + rows.to(tl.int64) * row_len
    tree_at = row_start[:, None] + mask_prefix + cols[None, :]
    tl.store(
        mask_ptr + tree_at,
        visible,
        mask=row_ok[:, None] & col_ok[None, :] & (tree_at < mask_capacity),
    )
    for offset in range(0, mask_prefix, PREFIX_BLOCK):
        col = offset + tl.arange(0, PREFIX_BLOCK)
        prefix_at = row_start[:, None] + col[None, :]
        tl.store(
            mask_ptr + prefix_at,
            tl.full([ROW_BLOCK, PREFIX_BLOCK], 1, tl.int1),
            mask=row_ok[:, None] & (col[None, :] < mask_prefix) & (prefix_at < mask_capacity),
        )

    exact_len = (prefix_total + batch_size * n) * n
    tail = tl.maximum(mask_capacity - exact_len, 0)
    programs = batch_size * tl.num_programs(1)
    share = (tail + programs - 1) // programs
    start = exact_len + (req * tl.num_programs(1) + tile) * share
    _fill_true(mask_ptr, start, tl.minimum(start + share, mask_capacity), PREFIX_BLOCK)


@triton.jit
def _row_logsumexp_kernel(logits_ptr, out_ptr, vocab, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        cols = start + lanes
        x = tl.load(logits_ptr + row * row_stride + cols, mask=cols < vocab, other=float("-inf"))
        x = x.to(tl.float32)
        new_max = tl.maximum(run_max, x)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # an all -inf lane stays 0
        run_sum = run_sum * tl.exp(run_max - shift) + tl.exp(x - shift)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.sum(run_sum * tl.exp(run_max - shift), axis=0)
    # A row of only -inf has no mass: log Z = 0 + log 1 keeps its log-probs -inf (not NaN).
    total = tl.where(row_max == float("-inf"), 1.0, total)
    tl.store(out_ptr + row, shift + tl.log(total))


def draft_topk(logits: torch.Tensor, k: int) -> DDTreeDraftTopK:
    """``compute_draft_topk`` without an fp32 copy of the logits: the normaliser in one Triton
    pass over them, the top-K over their own dtype (bf16 -> fp32 is exact, so the same values
    come out; ids may differ only between equal values). A row of only -inf logits gets -inf
    log-probs, as there."""
    if logits.ndim != 3:
        raise ValueError(f"DDTREE draft logits must be [bs, L, V], got {tuple(logits.shape)}.")
    bs, depth, vocab = logits.shape
    k = min(int(k), int(vocab))
    rows = logits.reshape(bs * depth, vocab)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    log_z = torch.empty((bs * depth,), dtype=torch.float32, device=logits.device)
    if rows.shape[0] > 0:
        _row_logsumexp_kernel[(rows.shape[0],)](
            rows, log_z, vocab, rows.stride(0), BLOCK=_LSE_BLOCK, num_warps=8
        )
    top_logits, top_ids = torch.topk(logits, k, dim=-1, sorted=True)
    return DDTreeDraftTopK(
        log_probs=top_logits.float() - log_z.view(bs, depth, 1), token_ids=top_ids
    )


def build_tree(topk: DDTreeDraftTopK, budget: int) -> DDTreeDraftTree:
    """``build_ddtree_tree`` as one Triton launch (one program per request).

    Same nodes, parents, depths and scores; on exact score ties the order is
    (score desc, depth asc, parent node asc, rank asc), which is what
    ``build_ddtree_tree`` gives when its per-depth ``topk`` keeps tied
    candidates in index order. A node is popped only after its parent, so a
    child whose log-prob is 0.0 (tying its parent) still follows it. Fewer
    reachable prefixes than B: the padding of ``DDTreeDraftTree`` (token 0,
    parent -1, depth 0, score -inf).
    """
    log_probs = topk.log_probs.float().contiguous()
    token_ids = topk.token_ids.contiguous()
    bs, depth_limit, topk_width = log_probs.shape
    budget = int(budget)
    device = log_probs.device
    if budget > 0 and depth_limit == 0:
        raise ValueError("DDTREE needs at least one draft position (block_size >= 2).")
    if depth_limit * (budget + 1) * topk_width > _INT32_MAX:
        raise ValueError(
            f"DDTREE tree too large for the kernel's int32 node key: L={depth_limit}, "
            f"B={budget}, K={topk_width}."
        )
    columns = torch.empty((3, bs, budget), dtype=torch.int64, device=device)
    tokens, parents, depths = columns.unbind(0)
    scores = torch.empty((bs, budget), dtype=torch.float32, device=device)
    if budget > 0 and bs > 0:
        block = triton.next_power_of_2(budget)
        _best_first_tree_kernel[(bs,)](
            log_probs, token_ids, tokens, parents, depths, scores,
            depth_limit, topk_width, budget,
            BUDGET_BLOCK=block,
            num_warps=1 if block <= 256 else 4,  # the pop loop is latency-bound: one warp, no barriers
        )
    return DDTreeDraftTree(tokens=tokens, parent_indices=parents, depths=depths, log_scores=scores)


@triton.jit
def _chain_kernel(
    log_probs_ptr,  # [bs, L, K] fp32, contiguous, sorted desc along K
    token_ids_ptr,  # [bs, L, K] int64, contiguous
    tokens_ptr,  # [bs, L] int64 out
    parents_ptr,  # [bs, L] int64 out
    depths_ptr,  # [bs, L] int64 out
    scores_ptr,  # [bs, L] fp32 out
    depth_limit,
    topk_width,
):
    """The top-1 path of one request, summed one position after another as the best-first
    kernel sums a path, so the chain's scores are bit-identical to that tree's nodes'."""
    req = tl.program_id(0).to(tl.int64)
    entry = req * depth_limit * topk_width
    score = tl.zeros([], tl.float32)
    for d in range(depth_limit):
        score += tl.load(log_probs_ptr + entry + d * topk_width)
        reachable = score > float("-inf")
        token = tl.load(token_ids_ptr + entry + d * topk_width)
        out = req * depth_limit + d
        tl.store(tokens_ptr + out, tl.where(reachable, token, 0).to(tl.int64))
        tl.store(parents_ptr + out, tl.where(reachable, d, -1).to(tl.int64))
        tl.store(depths_ptr + out, tl.where(reachable, d + 1, 0).to(tl.int64))
        tl.store(scores_ptr + out, score)


def build_chain(topk: DDTreeDraftTopK) -> DDTreeDraftTree:
    """``build_chain_tree`` as one Triton launch (one program per request): the drafter's
    top-1 path through the block, padding from the first position without mass."""
    log_probs = topk.log_probs.float().contiguous()
    token_ids = topk.token_ids.contiguous()
    bs, depth_limit, topk_width = log_probs.shape
    device = log_probs.device
    columns = torch.empty((3, bs, depth_limit), dtype=torch.int64, device=device)
    tokens, parents, depths = columns.unbind(0)
    scores = torch.empty((bs, depth_limit), dtype=torch.float32, device=device)
    if bs > 0 and depth_limit > 0:
        _chain_kernel[(bs,)](
            log_probs, token_ids, tokens, parents, depths, scores, depth_limit, topk_width,
            num_warps=1,
        )
    return DDTreeDraftTree(tokens=tokens, parent_indices=parents, depths=depths, log_scores=scores)


def write_verify_inputs(
    tree: DDTreeDraftTree,
    root_tokens: torch.Tensor,
    prefix_lens: torch.Tensor,
    num_verify_tokens: int,
    max_depth: int,
    mask_capacity: int,
    tail_only: bool = False,
) -> Tuple[DDTreeVerifyTensors, torch.Tensor]:
    """``tree_to_verify_buffers`` + ``build_tree_custom_mask`` as one Triton launch (with
    ``tail_only``: + the flat [bs, N, N] ancestor mask, as ``ddtree_utils.write_verify_inputs``)

    Args:
        tree: [bs, B] trees, parents before children.
        root_tokens: the bonus token of the last verify. Shape: [bs].
        prefix_lens: committed length (the seq_lens of the mask). Shape: [bs].
        num_verify_tokens: N >= B + 1.
        max_depth: a bound on node depth; min(max_depth, B) parent hops.
        mask_capacity: length of the returned mask, >= the exact total
            sum(N * (prefix_len + N)); entries past the total are True. Unused
            with ``tail_only`` (the mask is bs * N * N long).

    Returns the [bs, N] int64 verify tensors and the bool [mask_capacity] mask.
    """
    bs, budget = tree.tokens.shape
    n = int(num_verify_tokens)
    if n < budget + 1:
        raise ValueError(f"DDTREE num_verify_tokens must be >= budget + 1, got {n} < {budget + 1}.")
    device = tree.tokens.device
    outputs = torch.empty((5, bs, n), dtype=torch.int64, device=device)
    if tail_only:
        mask_capacity = bs * n * n
    mask = torch.empty((int(mask_capacity),), dtype=torch.bool, device=device)
    if bs > 0:
        node_block = triton.next_power_of_2(n)
        row_block = max(1, min(node_block, _VERIFY_TILE_ELEMS // node_block))
        tree_tokens, tree_parents, tree_depths = (
            t.contiguous() for t in (tree.tokens, tree.parent_indices, tree.depths)
        )
        _verify_inputs_kernel[(bs, triton.cdiv(n, row_block))](
            tree_tokens, tree_parents, tree_depths,
            root_tokens.reshape(bs).contiguous(), prefix_lens.reshape(bs).contiguous(),
            *outputs.unbind(0), mask,
            bs, budget, n, min(int(max_depth), budget), int(mask_capacity),
            NODE_BLOCK=node_block,
            ROW_BLOCK=row_block,
            PREFIX_BLOCK=_PREFIX_BLOCK,
            BATCH_BLOCK=_BATCH_BLOCK,
            TAIL_ONLY=bool(tail_only),
            num_warps=4,
        )
    draft_token, positions, retrieve_index, next_token, next_sibling = outputs.unbind(0)
    tensors = DDTreeVerifyTensors(
        draft_token=draft_token,
        positions=positions,
        retrieve_index=retrieve_index,
        retrieve_next_token=next_token,
        retrieve_next_sibling=next_sibling,
    )
    return tensors, mask


class DDTreeAccepted(NamedTuple):
    """What a round keeps of its verify, per request b and accepted depth r < W."""

    node_index: torch.Tensor  # [bs, W] int64: flat verify row of the accepted node (0 past the path)
    tokens: torch.Tensor  # [bs, W] int64: accepted tokens, bonus last (0 past the path)
    bonus: torch.Tensor  # [bs] int64: the next round's root
    new_seq_lens: torch.Tensor  # [bs]: prefix + accept_len
    kv_target: torch.Tensor  # [bs * W] int64: KV slot of committed position prefix + r
    kv_source: torch.Tensor  # [bs * W] int64: KV slot the accepted node was verified in


@triton.jit
def _accepted_kernel(
    predict_ptr,  # [bs * N] target token per verify row
    accept_index_ptr,  # [bs, W] flat verify row or -1
    accept_lens_ptr,  # [bs] incl. bonus
    prefix_lens_ptr,  # [bs]
    cache_loc_ptr,  # [bs, N] int64
    node_index_ptr,  # [bs, W] int64 out
    tokens_ptr,  # [bs, W] int64 out
    bonus_ptr,  # [bs] int64 out
    new_seq_lens_ptr,  # [bs] out
    kv_target_ptr,  # [bs, W] int64 out
    kv_source_ptr,  # [bs, W] int64 out
    width,
    num_verify_tokens,
    BLOCK: tl.constexpr,
):
    req = tl.program_id(0)
    r = tl.arange(0, BLOCK)
    in_width = r < width
    accept_len = tl.load(accept_lens_ptr + req).to(tl.int64)
    index = tl.load(accept_index_ptr + req * width + r, mask=in_width, other=-1).to(tl.int64)
    on_path = r < accept_len
    node = tl.where(on_path & (index >= 0), index, 0)
    token = tl.load(predict_ptr + node, mask=in_width & on_path, other=0).to(tl.int64)
    tl.store(node_index_ptr + req * width + r, node, mask=in_width)
    tl.store(tokens_ptr + req * width + r, token, mask=in_width)
    tl.store(bonus_ptr + req, tl.sum(tl.where(r == accept_len - 1, token, 0), axis=0))
    prefix = tl.load(prefix_lens_ptr + req)
    tl.store(new_seq_lens_ptr + req, prefix + accept_len.to(prefix.dtype))
    # Past the path a slot moves onto itself: the mover's launch stays fixed-size.
    own_slot = tl.load(cache_loc_ptr + req * num_verify_tokens + r, mask=in_width, other=0)
    verified_slot = tl.load(cache_loc_ptr + node, mask=in_width & on_path, other=0)
    tl.store(kv_target_ptr + req * width + r, own_slot, mask=in_width)
    tl.store(kv_source_ptr + req * width + r, tl.where(on_path, verified_slot, own_slot), mask=in_width)


def accepted_paths(
    predict: torch.Tensor,
    accept_index: torch.Tensor,
    accept_lens: torch.Tensor,
    prefix_lens: torch.Tensor,
    cache_loc_2d: torch.Tensor,
) -> DDTreeAccepted:
    """A round's accept bookkeeping in one launch, from ``eagle_sample``'s outputs.

    ``accept_index`` [bs, W] holds flat verify rows (b * N + node) along each accepted path,
    -1 after it; ``cache_loc_2d`` [bs, N] the verify block's KV slots, so the accepted node at
    depth r moves from ``cache_loc_2d.flat[accept_index[b, r]]`` to ``cache_loc_2d[b, r]``.
    """
    bs, width = accept_index.shape
    n = int(cache_loc_2d.shape[1])
    node_index, tokens, kv_target, kv_source, bonus = _int64_outputs(
        accept_index.device, *[(bs, width)] * 4, (bs,)
    )
    new_seq_lens = torch.empty_like(prefix_lens)
    if bs > 0:
        _accepted_kernel[(bs,)](
            predict, accept_index, accept_lens, prefix_lens, cache_loc_2d.contiguous(),
            node_index, tokens, bonus, new_seq_lens, kv_target, kv_source,
            width, n,
            BLOCK=triton.next_power_of_2(width),
        )
    return DDTreeAccepted(
        node_index=node_index,
        tokens=tokens,
        bonus=bonus,
        new_seq_lens=new_seq_lens,
        kv_target=kv_target.view(-1),
        kv_source=kv_source.view(-1),
    )
