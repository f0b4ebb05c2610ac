"""DDTREE target-verify attention for SGLang's triton backend: split-KV over the prefix, a
tail-only tree mask (``SGLANG_DDTREE_VERIFY_ATTENTION=splitkv``, or ``auto`` where
``auto_keeps_extend`` finds nothing against it).

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
buffer holds, and each node always sees itself, so their (discarded) rows stay finite.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from sglang.srt.speculative.ddtree_envs import envs

MIN_SPLIT_TOKENS = 256  # fewest prefix keys a split walks (a multiple of every BLOCK_N)
MAX_SPLITS = 64
NUM_STAGES, MAX_REGISTERS = 2, None  # the partial kernel's pipelining depth, registers per thread cap
_WAVES = 2  # programs per SM the split count aims for
_CPU_SM_COUNT = 8  # stand-in SM count off the GPU (the interpreter)


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
    tail_mask_ptr,  # [bs, N, N] uint8, nonzero = visible
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
    tl.store(
        part_o_ptr + out[:, None] * V_DIM + offs_dv[None, :],
        acc / tl.where(seen, e_sum, 1.0)[:, None],
        mask=row_ok[:, None] & dv_ok[None, :],
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
    always sees its own node, so the maximum is finite and empty splits weigh 0."""
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
        mask=part_ok[:, None] & dv_ok[None, :],
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
    tail_mask: torch.Tensor,
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
            possibly the head of a longer buffer.
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
    if tail_mask.numel() < bs * n * n:
        raise ValueError(f"DDTREE tail mask holds {tail_mask.numel()} entries, fewer than bs * N * N = {bs * n * n}.")
    if tail_mask.dtype == torch.bool:
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
        q, k, v, k_buffer, v_buffer, kv_indptr, kv_indices, tail_mask, part_o, part_lse,
        float(sm_scale), float(k_scale), float(v_scale),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        N=n, GROUP=group, NUM_Q_HEADS=num_q_heads, ROW_BLOCKS=blocks, NUM_SPLITS=parts - 1,
        HEAD_DIM=head_dim, V_DIM=v_dim,
        BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_DV=triton.next_power_of_2(v_dim),
        BLOCK_M=block_m, BLOCK_N=block_n, MIN_SPLIT=MIN_SPLIT_TOKENS,
        num_warps=num_warps, num_stages=NUM_STAGES, maxnreg=MAX_REGISTERS,
    )
    _tree_attention_merge_kernel[(tokens, num_q_heads)](
        part_o, part_lse, o, o.stride(0), o.stride(1),
        NUM_Q_HEADS=num_q_heads, PARTS=parts, V_DIM=v_dim,
        BLOCK_PARTS=triton.next_power_of_2(parts), BLOCK_DV=triton.next_power_of_2(v_dim),
        num_warps=2,
    )
    return o


# The attention head dims at which ``auto`` runs the split-KV verify: where engines measured it
# faster than the extend kernel (128: H200, Qwen3-8B shape, bs 16, 2026-12-04; 256: H100,
# Qwen3.6-27B shape, B = 15 and 32, 2026-12-05; 64: H100, the dense fixture, 2026-12-05).
AUTO_HEAD_DIMS = (64, 128, 256)
# Models whose attention hands the backend a score_mod at forward time, where no layer attribute
# shows it: Inkling's relative-position bias (sglang 0.5.16+, ``models/inkling_common``).
SCORE_MOD_MODEL_MODULES = ("sglang.srt.models.inkling",)


def verify_attention_mode() -> str:
    """SGLANG_DDTREE_VERIFY_ATTENTION: auto, extend or splitkv."""
    return envs.SGLANG_DDTREE_VERIFY_ATTENTION.get()


def uncomputed_features(
    *, causal=True, logit_cap=0.0, sliding_window_size=-1, sinks=False, xai_temperature_len=-1,
    score_mod=False, page_major=False,
) -> list:
    """The layer features of an attention call that the split-KV kernel does not compute."""
    return [
        name
        for name, present in (
            ("a non-causal layer", not causal),
            ("a logit cap", logit_cap and logit_cap > 0),
            ("a sliding window", sliding_window_size is not None and sliding_window_size > 0),
            ("attention sinks", sinks),
            ("xai temperature", xai_temperature_len is not None and xai_temperature_len > 0),
            ("a score_mod", score_mod),
            ("a page-major KV pool", page_major),
        )
        if present
    ]


def split_kv_server_conflict(server_args) -> Optional[str]:
    """The server setting under which the split-KV verify cannot run (None: none): a backend
    other than triton, or a triton path that runs before the split-KV hunk (deterministic
    inference, decode context parallelism) or addresses the pool page-major (unified memory)."""
    from sglang.srt.speculative.ddtree_compat import attention_backends

    prefill, decode = attention_backends(server_args)
    if (prefill, decode) != ("triton", "triton"):
        return f"the attention backends are {prefill} (prefill) and {decode} (decode)"
    for flag in ("enable_deterministic_inference", "enable_unified_memory"):
        if getattr(server_args, flag, False):
            return f"--{flag.replace('_', '-')} is set"
    if (getattr(server_args, "dcp_size", 1) or 1) > 1:
        return f"--dcp-size is {server_args.dcp_size}"
    return None


def auto_keeps_extend(server_args, model) -> Optional[str]:
    """Why ``auto`` keeps SGLang's ``extend_attention_fwd`` for this target (None: the split-KV
    verify): a ``split_kv_server_conflict``, an attention layer the kernel does not compute, or
    a head dim outside ``AUTO_HEAD_DIMS``. ``splitkv`` refuses the first two instead."""
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    if conflict := split_kv_server_conflict(server_args):
        return conflict
    # Sinks reach the backend as a forward argument (gpt-oss): the layer's parameter shows them.
    if any(name.rsplit(".", 1)[-1] == "sinks" for name, _ in model.named_parameters()):
        return "the model's attention has sinks"
    if any(type(module).__module__.startswith(SCORE_MOD_MODEL_MODULES) for module in model.modules()):
        return "the model's attention passes a score_mod"
    layers = [module for module in model.modules() if isinstance(module, RadixAttention)]
    if not layers:
        return "the model has no RadixAttention layer to check"
    for layer in layers:
        features = uncomputed_features(
            causal=not layer.is_cross_attention and layer.attn_type == AttentionType.DECODER,
            logit_cap=layer.logit_cap,
            sliding_window_size=layer.sliding_window_size,
            xai_temperature_len=getattr(layer, "xai_temperature_len", -1),
        )
        if features:
            return f"layer {layer.layer_id} has {', '.join(features)}"
        head_dims = {layer.qk_head_dim, layer.v_head_dim}
        if not head_dims <= set(AUTO_HEAD_DIMS):
            return (
                f"its attention head dim is {'/'.join(map(str, sorted(head_dims)))}; engines "
                f"measured the split-KV verify faster at {', '.join(map(str, AUTO_HEAD_DIMS))} only"
            )
    return None


class TreeVerifyAttention:
    """What a patched triton backend's ``forward_extend`` calls on a DDTREE target verify
    instead of ``extend_attention_fwd``; it refuses the layer features it does not compute."""

    def __init__(self, max_prefix_len: int, sm_count: int):
        self.max_prefix_len = int(max_prefix_len)
        self.sm_count = int(sm_count) if sm_count and sm_count > 0 else _CPU_SM_COUNT

    def num_splits(self, batch_size: int, num_q_heads: int, num_kv_heads: int, head_dim: int, n: int) -> int:
        group = num_q_heads // num_kv_heads
        block_m, _, _ = block_config(head_dim)
        programs = batch_size * num_kv_heads * row_blocks(group, n, block_m)
        return choose_num_splits(programs, self.max_prefix_len, self.sm_count)

    def __call__(
        self, q, k, v, o, k_buffer, v_buffer, kv_indptr, kv_indices, tail_mask, *,
        num_verify_tokens, sm_scale, k_scale, v_scale,
        causal=True, logit_cap=0.0, sliding_window_size=-1, sinks=None, xai_temperature_len=-1,
        score_mod=None,
    ):
        unsupported = uncomputed_features(
            causal=causal, logit_cap=logit_cap, sliding_window_size=sliding_window_size,
            sinks=sinks is not None, xai_temperature_len=xai_temperature_len,
            score_mod=score_mod is not None,
            # Page-major [pages, page size, heads, dim] views (--enable-unified-memory): the
            # kernel addresses a pool slot as slot * stride(0).
            page_major=k_buffer.dim() != 3 or v_buffer.dim() != 3,
        )
        if unsupported:
            raise ValueError(
                f"DDTREE's split-KV verify (SGLANG_DDTREE_VERIFY_ATTENTION={verify_attention_mode()}) "
                f"does not compute {', '.join(unsupported)}: set SGLANG_DDTREE_VERIFY_ATTENTION=extend "
                "for this model."
            )
        bs = int(kv_indptr.shape[0]) - 1
        return tree_verify_attention(
            q, k, v, o, k_buffer, v_buffer, kv_indptr, kv_indices, tail_mask,
            num_verify_tokens=num_verify_tokens,
            num_splits=self.num_splits(bs, q.shape[1], k.shape[1], q.shape[2], int(num_verify_tokens)),
            sm_scale=sm_scale, k_scale=k_scale, v_scale=v_scale,
        )


def tree_verify_for(model_runner, sm_count: int) -> Optional[TreeVerifyAttention]:
    """The tree verify a triton backend of this model runner calls: DDTREE's target under
    ``splitkv``, or under ``auto`` where ``auto_keeps_extend`` finds no reason against it;
    None otherwise (extend_attention_fwd; the draft and other algorithms: SGLang's path)."""
    from sglang.srt.speculative.ddtree_compat import spec_arg  # 0.5.19+: the spec bag's

    algorithm = spec_arg(model_runner.server_args, "speculative_algorithm")
    if model_runner.is_draft_worker or str(algorithm) != "DDTREE":
        return None
    mode = verify_attention_mode()
    if mode == "extend":
        return None
    if mode == "auto" and auto_keeps_extend(model_runner.server_args, model_runner.model):
        return None
    return TreeVerifyAttention(model_runner.model_config.context_len, sm_count)


def full_attention_backend(attn_backend):
    """The backend that runs a target's full-attention layers (hybrid wrappers keep it inside)."""
    backend = attn_backend
    for _ in range(4):
        inner = getattr(backend, "full_attn_backend", None)
        if inner is None:
            break
        backend = inner
    return backend


def verify_attention_in_use(model_runner) -> tuple:
    """(whether the target verifies through the split-KV kernel, the log line that says which
    and why); ValueError where ``splitkv`` is asked for and the backend does not run it."""
    mode = verify_attention_mode()
    switch = f"SGLANG_DDTREE_VERIFY_ATTENTION={mode}"
    backend = full_attention_backend(model_runner.attn_backend)
    if getattr(backend, "ddtree_tree_verify", None) is not None:
        return True, f"DDTREE target verify: the split-KV kernel, a tail-only tree mask ({switch})"
    if mode == "splitkv":
        import sglang

        raise ValueError(
            "SGLANG_DDTREE_VERIFY_ATTENTION=splitkv runs in the triton attention backend as DDTREE's "
            f"patch set wires it (sglang 0.5.14 - 0.5.23), not {type(backend).__name__} on "
            f"{getattr(sglang, '__version__', 'this release')}: unset it."
        )
    reason = auto_keeps_extend(model_runner.server_args, model_runner.model) if mode == "auto" else None
    why = f": {reason}" if reason else ""
    return False, f"DDTREE target verify: the backend's kernel, the FULL-layout tree mask ({switch}{why})"
