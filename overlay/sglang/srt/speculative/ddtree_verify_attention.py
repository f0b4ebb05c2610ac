"""DDTREE's split-KV attention kernels for SGLang's triton backend: split-KV over the prefix, a
tail-only tree mask. Which forwards run them: ``ddtree_attention_choice``.

Every verify node of a request sees its whole committed prefix and, of the N tree nodes, its
ancestors and itself. SGLang's ``extend_attention_fwd`` runs this with a FULL-layout mask (an
[N, prefix + N] block per request, grown with the context) and walks the whole prefix in one
program per (request, q head, row block): at batch 1 and a long context few programs run. Here:

- ``_tree_attention_partial_kernel`` (one program per request, kv head, row block and split):
  splits 0..S-1 walk a slice of the prefix, no mask at all; split S walks the N tree keys under
  the tail-only mask ([bs, N, N] ancestors-or-self, whatever the context). A program's rows are
  every q head of one kv head times every node (GQA: a K/V tile is loaded once for the group);
- ``_tree_attention_merge_kernel`` (one program per verify token and q head) merges the S + 1
  partials by log-sum-exp.

S is picked on the host from the batch size, the head count and the GPU's SM count, bounded by a
longest prefix (``choose_num_splits``); each request cuts its own prefix into at most S slices of
at least ``MIN_SPLIT_TOKENS`` keys, and a split left without keys reports an empty partial. No
host sync and a grid fixed by shapes: CUDA-graph capturable.

The verify tokens are the backend's target-verify layout: request b's N nodes are rows
b * N .. b * N + N - 1 of q, k and v; padded requests of a graph batch read whatever mask the
buffer holds, and each node always sees itself, so their (discarded) rows stay finite. The
DFlash drafter's block is the same problem with every tail key visible (``tail_mask=None``).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

MIN_SPLIT_TOKENS = 256  # fewest prefix keys a split walks (a multiple of every BLOCK_N)
MAX_SPLITS = 64
NUM_STAGES, MAX_REGISTERS = 2, None  # the partial kernel's pipelining depth, registers per thread cap
_WAVES = 2  # programs per SM the split count aims for


def block_config(head_dim: int) -> tuple[int, int, int]:
    """(BLOCK_M rows, BLOCK_N keys, num_warps) of the partial kernel for a head dim. Above 64 and
    up to 128: 64 x 64, timed per call inside a CUDA graph on an H100 (2026-12-06, BENCHMARKS) at
    the 8B shape, 1 K prefix: 1.27-1.62x the former 64 x 32 / 128 x 16 tiles at bs 16 and N = 17
    to 129, 0.99-1.32x at bs 1. It builds for sm_86, sm_90 and sm_120 within their shared memory
    and without spills. Up to 64: 64 x 32. At 256: 32 x 32, level with or faster than SGLang's
    extend kernel at every batch, context and width timed on 2026-12-05 (1.00-7.1x)."""
    if head_dim > 128:
        return 32, 32, 8
    if head_dim > 64:
        return 64, 64, 8
    return 64, 32, 8


def row_blocks(group: int, num_verify_tokens: int, block_m: int) -> int:
    return triton.cdiv(group * num_verify_tokens, block_m)


def choose_num_splits(programs: int, max_prefix_len: int, sm_count: int) -> int:
    """Prefix splits S for ``programs`` programs per split (bs * kv heads * row blocks):
    about ``_WAVES`` programs per SM, at most one per ``MIN_SPLIT_TOKENS`` keys of the longest
    prefix, between 1 and ``MAX_SPLITS``. Shapes and host ints only, so a graph captures it."""
    wanted = triton.cdiv(_WAVES * max(1, sm_count), max(1, programs))
    useful = triton.cdiv(max(1, max_prefix_len), MIN_SPLIT_TOKENS)
    return max(1, min(wanted, useful, MAX_SPLITS))


@triton.jit
def _attend(q, k, v, visible, qk_scale, v_scale, e_max, e_sum, acc):
    """One online-softmax step over a [BLOCK_N] key tile; a row with nothing visible yet keeps
    e_max at -inf and its sums at 0 (the -1e20 floor stops exp(-inf - -inf))."""
    qk = tl.dot(q, k) * qk_scale
    qk = tl.where(visible, qk, float("-inf"))
    new_max = tl.maximum(tl.maximum(tl.max(qk, 1), -1e20), e_max)
    rescale = tl.exp(e_max - new_max)
    p = tl.exp(qk - new_max[:, None])
    e_sum = e_sum * rescale + tl.sum(p, 1)
    acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v) * v_scale
    return new_max, e_sum, acc


@triton.jit
def _tree_attention_partial_kernel(
    q_ptr,  # [bs * N, Hq, D]
    k_ptr,  # [bs * N, Hkv, D] the tree's own keys
    v_ptr,  # [bs * N, Hkv, Dv]
    k_buffer_ptr,  # [slots, Hkv, D] the KV pool
    v_buffer_ptr,  # [slots, Hkv, Dv]
    kv_indptr_ptr,  # [bs + 1] each request's prefix rows of kv_indices
    kv_indices_ptr,  # pool slot of each prefix position
    tail_mask_ptr,  # [bs, N, N] uint8, nonzero = visible; unread with TAIL_ALL_VISIBLE
    part_o_ptr,  # [bs * N, Hq, S + 1, Dv] fp32 out
    part_lse_ptr,  # [bs * N, Hq, S + 1] fp32 out
    sm_scale,
    k_scale,
    v_scale,
    stride_qt, stride_qh,
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_kbuf_s, stride_kbuf_h,
    stride_vbuf_s, stride_vbuf_h,
    N: tl.constexpr,
    GROUP: tl.constexpr,
    NUM_Q_HEADS: tl.constexpr,
    ROW_BLOCKS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_SPLIT: tl.constexpr,
    TAIL_ALL_VISIBLE: tl.constexpr,
):
    """One split's partial for BLOCK_M rows (q head, node) of one request and kv head; split
    NUM_SPLITS is the tree tail."""
    req = tl.program_id(0)
    kv_head = tl.program_id(1) // ROW_BLOCKS
    row_block = tl.program_id(1) % ROW_BLOCKS
    split = tl.program_id(2)

    rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < GROUP * N
    node = rows % N
    head = kv_head * GROUP + rows // N
    token = req * N + node
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_ok = offs_d < HEAD_DIM
    dv_ok = offs_dv < V_DIM
    q = tl.load(
        q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    cols = tl.arange(0, BLOCK_N)
    e_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    e_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)

    if split < NUM_SPLITS:
        # A slice of the committed prefix: every node sees all of it.
        kv_start = tl.load(kv_indptr_ptr + req)
        prefix_len = tl.load(kv_indptr_ptr + req + 1) - kv_start
        split_len = tl.cdiv(tl.cdiv(prefix_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
        split_len = tl.maximum(split_len, MIN_SPLIT)
        lo = split * split_len
        hi = tl.minimum(lo + split_len, prefix_len)
        q_pool = q.to(k_buffer_ptr.dtype.element_ty)
        for start in range(lo, hi, BLOCK_N):
            key = start + cols
            key_ok = key < hi
            slot = tl.load(kv_indices_ptr + kv_start + key, mask=key_ok, other=0).to(tl.int64)
            k = tl.load(
                k_buffer_ptr + slot[None, :] * stride_kbuf_s + kv_head * stride_kbuf_h + offs_d[:, None],
                mask=key_ok[None, :] & d_ok[:, None],
                other=0.0,
            )
            v = tl.load(
                v_buffer_ptr + slot[:, None] * stride_vbuf_s + kv_head * stride_vbuf_h + offs_dv[None, :],
                mask=key_ok[:, None] & dv_ok[None, :],
                other=0.0,
            )
            e_max, e_sum, acc = _attend(
                q_pool, k, v, key_ok[None, :], sm_scale * k_scale, v_scale, e_max, e_sum, acc
            )
    else:
        # The tree: ancestors-or-self under the tail-only mask.
        for start in range(0, N, BLOCK_N):
            key = start + cols
            key_ok = key < N
            key_token = req * N + key
            k = tl.load(
                k_ptr + key_token[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None],
                mask=key_ok[None, :] & d_ok[:, None],
                other=0.0,
            )
            v = tl.load(
                v_ptr + key_token[:, None] * stride_vt + kv_head * stride_vh + offs_dv[None, :],
                mask=key_ok[:, None] & dv_ok[None, :],
                other=0.0,
            )
            if TAIL_ALL_VISIBLE:
                visible = key_ok[None, :]
            else:
                bits = tl.load(
                    tail_mask_ptr + req * N * N + node[:, None] * N + key[None, :],
                    mask=row_ok[:, None] & key_ok[None, :],
                    other=0,
                )
                visible = ((bits != 0) & key_ok[None, :]) | (node[:, None] == key[None, :])
            e_max, e_sum, acc = _attend(q, k, v, visible, sm_scale, 1.0, e_max, e_sum, acc)

    seen = e_sum > 0
    lse = tl.where(seen, e_max + tl.log(tl.where(seen, e_sum, 1.0)), float("-inf"))
    out = (token * NUM_Q_HEADS + head) * (NUM_SPLITS + 1) + split
    tl.store(part_lse_ptr + out, lse, mask=row_ok)
    # A split past a short prefix saw no key: its lse alone says so, and the merge skips its o.
    tl.store(
        part_o_ptr + out[:, None] * V_DIM + offs_dv[None, :],
        acc / tl.where(seen, e_sum, 1.0)[:, None],
        mask=row_ok[:, None] & dv_ok[None, :] & seen[:, None],
    )


@triton.jit
def _tree_attention_merge_kernel(
    part_o_ptr,  # [T, Hq, S + 1, Dv] fp32
    part_lse_ptr,  # [T, Hq, S + 1] fp32
    o_ptr,  # [T, Hq, Dv]
    stride_ot,
    stride_oh,
    NUM_Q_HEADS: tl.constexpr,
    PARTS: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_PARTS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """The log-sum-exp merge of one token and q head's S + 1 partials. The tail's partial
    always sees its own node, so the maximum is finite and empty splits weigh 0; their o was
    never written, so it is not read."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    parts = tl.arange(0, BLOCK_PARTS)
    offs_dv = tl.arange(0, BLOCK_DV)
    part_ok = parts < PARTS
    dv_ok = offs_dv < V_DIM
    base = (token * NUM_Q_HEADS + head) * PARTS + parts
    lse = tl.load(part_lse_ptr + base, mask=part_ok, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, 0))
    o = tl.load(
        part_o_ptr + base[:, None] * V_DIM + offs_dv[None, :],
        mask=(part_ok & (lse > float("-inf")))[:, None] & dv_ok[None, :],
        other=0.0,
    )
    merged = tl.sum(o * weight[:, None], 0) / tl.sum(weight, 0)
    tl.store(
        o_ptr + token * stride_ot + head * stride_oh + offs_dv,
        merged.to(o_ptr.dtype.element_ty),
        mask=dv_ok,
    )


def tree_verify_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    tail_mask: Optional[torch.Tensor],
    *,
    num_verify_tokens: int,
    num_splits: int,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Tree-verify attention of bs requests of N nodes each, written into ``o``.

    Args:
        q / k / v: the verify tokens' queries and their own keys and values, request-major.
            Shape: [bs * N, Hq, D], [bs * N, Hkv, D], [bs * N, Hkv, Dv]; Hq a multiple of Hkv.
        o: output. Shape: [bs * N, Hq, Dv].
        k_buffer / v_buffer: the KV pool. Shape: [slots, Hkv, D] / [slots, Hkv, Dv].
        kv_indptr / kv_indices: request b's prefix sits in pool slots
            ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]``. Shape: [bs + 1], [>= total].
        tail_mask: row-major [bs, N, N] ancestor-or-self bits (bool or uint8, True = visible),
            possibly the head of a longer buffer; None: every node sees every tail key.
        num_splits: prefix splits S (``choose_num_splits``).
        k_scale / v_scale: dequant multipliers of the pool's keys and values (prefix only,
            as ``extend_attention_fwd`` applies them).
    """
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads, v_dim = int(k.shape[1]), int(v.shape[2])
    n = int(num_verify_tokens)
    bs = int(kv_indptr.shape[0]) - 1
    if tokens != bs * n:
        raise ValueError(f"DDTREE tree verify expects bs * N = {bs} * {n} query rows, got {tokens}.")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"DDTREE tree verify needs q heads ({num_q_heads}) a multiple of kv heads ({num_kv_heads}).")
    if tail_mask is not None and tail_mask.numel() < bs * n * n:
        raise ValueError(f"DDTREE tail mask holds {tail_mask.numel()} entries, fewer than bs * N * N = {bs * n * n}.")
    if tail_mask is not None and tail_mask.dtype == torch.bool:
        tail_mask = tail_mask.view(torch.uint8)
    group = num_q_heads // num_kv_heads
    block_m, block_n, num_warps = block_config(head_dim)
    blocks = row_blocks(group, n, block_m)
    parts = int(num_splits) + 1
    part_o = torch.empty((tokens, num_q_heads, parts, v_dim), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((tokens, num_q_heads, parts), dtype=torch.float32, device=q.device)
    if bs == 0:
        return o
    _tree_attention_partial_kernel[(bs, num_kv_heads * blocks, parts)](
        q, k, v, k_buffer, v_buffer, kv_indptr, kv_indices, q if tail_mask is None else tail_mask, part_o, part_lse,
        float(sm_scale), float(k_scale), float(v_scale),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        N=n, GROUP=group, NUM_Q_HEADS=num_q_heads, ROW_BLOCKS=blocks, NUM_SPLITS=parts - 1,
        HEAD_DIM=head_dim, V_DIM=v_dim,
        BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_DV=triton.next_power_of_2(v_dim),
        BLOCK_M=block_m, BLOCK_N=block_n, MIN_SPLIT=MIN_SPLIT_TOKENS, TAIL_ALL_VISIBLE=tail_mask is None,
        num_warps=num_warps, num_stages=NUM_STAGES, maxnreg=MAX_REGISTERS,
    )
    _tree_attention_merge_kernel[(tokens, num_q_heads)](
        part_o, part_lse, o, o.stride(0), o.stride(1),
        NUM_Q_HEADS=num_q_heads, PARTS=parts, V_DIM=v_dim,
        BLOCK_PARTS=triton.next_power_of_2(parts), BLOCK_DV=triton.next_power_of_2(v_dim),
        num_warps=2,
    )
    return o
