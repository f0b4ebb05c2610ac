"""Which attention DDTREE's forwards run on SGLang's triton backend, decided when a backend is
built (``tree_verify_for``, which each release's patched ``TritonAttnBackend.__init__`` asks):

- the target's verify: SGLang's ``extend_attention_fwd`` with the FULL-layout tree mask, or the
  split-KV kernel with a tail-only mask (``ddtree_verify_attention``), as
  ``SGLANG_DDTREE_VERIFY_ATTENTION`` says (``auto``: where ``auto_keeps_extend`` finds nothing
  against it);
- the DFlash drafter's block: ``extend_attention_fwd``, or the same split-KV kernel with every
  block key visible, as ``SGLANG_DDTREE_DRAFT_ATTENTION`` says (``auto``: where
  ``draft_keeps_extend`` finds nothing against it). Each round the drafter runs one
  target-verify forward of its block (the bonus token and its mask tokens) against the
  committed context, no mask, its layers non-causal: every block token sees the whole prefix
  and the whole block. SGLang's kernel walks the prefix in one program per request and q head
  with 16 of its 128 query rows in use: for the 5 layers of the Qwen3-8B-shaped drafter at bs 1
  and a 1 K context on an H100 (2026-12-06) it took 0.376 ms per round, the split-KV kernel
  about 0.08, and the round's wall time fell from 9.63 to 9.39 ms. The drafter only proposes
  tokens, so its kernel changes which tokens are tried, never which are committed.

A patched backend's ``forward_extend`` hands a call to the object ``tree_verify_for`` gave it
where that object ``serves`` it, and returns its output.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.speculative.ddtree_envs import envs
from sglang.srt.speculative.ddtree_verify_attention import (
    block_config,
    choose_num_splits,
    row_blocks,
    tree_verify_attention,
)

# The attention head dims at which ``auto`` runs the split-KV verify: where engines measured it
# faster than the extend kernel (128: H200, Qwen3-8B shape, bs 16, 2026-12-04; 256: H100,
# Qwen3.6-27B shape, B = 15 and 32, 2026-12-05; 64: H100, the dense fixture, 2026-12-05).
AUTO_HEAD_DIMS = (64, 128, 256)
# Models whose attention hands the backend a score_mod at forward time, where no layer attribute
# shows it: Inkling's relative-position bias (sglang 0.5.16+, ``models/inkling_common``).
SCORE_MOD_MODEL_MODULES = ("sglang.srt.models.inkling",)
_CPU_SM_COUNT = 8  # stand-in SM count off the GPU (the interpreter)


def verify_attention_mode() -> str:
    """SGLANG_DDTREE_VERIFY_ATTENTION: auto, extend or splitkv."""
    return envs.SGLANG_DDTREE_VERIFY_ATTENTION.get()


def uncomputed_features(
    *, causal=True, computes_causal=True, logit_cap=0.0, sliding_window_size=-1, sinks=False,
    xai_temperature_len=-1, score_mod=False, page_major=False,
) -> list:
    """The layer features of an attention call that the split-KV kernel does not compute, where
    it runs causal layers (the target's verify) or non-causal ones (the drafter's block)."""
    return [
        name
        for name, present in (
            ("a non-causal layer", computes_causal and not causal),
            ("a causal layer", causal and not computes_causal),
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
    """The server setting under which the target's split-KV verify cannot run (None: none): a
    backend other than triton, or a ``split_kv_path_conflict``."""
    from sglang.srt.speculative.ddtree_compat import attention_backends

    prefill, decode = attention_backends(server_args)
    if (prefill, decode) != ("triton", "triton"):
        return f"the attention backends are {prefill} (prefill) and {decode} (decode)"
    return split_kv_path_conflict(server_args)


def split_kv_path_conflict(server_args) -> Optional[str]:
    """The server setting under which a triton backend runs another path before the split-KV
    hunk (deterministic inference, decode context parallelism) or addresses the pool
    page-major (unified memory); None: none. A drafter's backend is its own (0.5.19+ name it
    apart from the server args), so only these settings speak for it."""
    for flag in ("enable_deterministic_inference", "enable_unified_memory"):
        if getattr(server_args, flag, False):
            return f"--{flag.replace('_', '-')} is set"
    if (getattr(server_args, "dcp_size", 1) or 1) > 1:
        return f"--dcp-size is {server_args.dcp_size}"
    return None


def layers_not_computed(model, *, causal: bool) -> Optional[str]:
    """Why the split-KV kernel cannot run this model's attention (None: it can), running causal
    layers (the target's) or non-causal ones (the drafter's): sinks, a score_mod, a layer
    feature it does not compute, or a head dim outside ``AUTO_HEAD_DIMS``."""
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

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
            computes_causal=causal,
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
                f"measured the split-KV kernel faster at {', '.join(map(str, AUTO_HEAD_DIMS))} only"
            )
    return None


def auto_keeps_extend(server_args, model) -> Optional[str]:
    """Why ``auto`` keeps SGLang's ``extend_attention_fwd`` for this target (None: the split-KV
    verify): a ``split_kv_server_conflict`` or ``layers_not_computed``. ``splitkv`` refuses
    what the kernel does not compute instead."""
    return split_kv_server_conflict(server_args) or layers_not_computed(model, causal=True)


class TreeVerifyAttention:
    """What a patched triton backend's ``forward_extend`` calls on a DDTREE target verify
    instead of ``extend_attention_fwd``; it refuses the layer features it does not compute."""

    SWITCH = "SGLANG_DDTREE_VERIFY_ATTENTION"
    CAUSAL = True  # the layers it runs

    def __init__(self, max_prefix_len: int, sm_count: int):
        self.max_prefix_len = int(max_prefix_len)
        self.sm_count = int(sm_count) if sm_count and sm_count > 0 else _CPU_SM_COUNT

    def serves(self, forward_mode, custom_mask) -> bool:
        """Whether a ``forward_extend`` call is this one's: a target verify with DDTREE's mask."""
        return forward_mode.is_target_verify() and custom_mask is not None

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
            causal=causal, computes_causal=self.CAUSAL, logit_cap=logit_cap,
            sliding_window_size=sliding_window_size, sinks=sinks is not None,
            xai_temperature_len=xai_temperature_len, score_mod=score_mod is not None,
            # Page-major [pages, page size, heads, dim] views (--enable-unified-memory): the
            # kernel addresses a pool slot as slot * stride(0).
            page_major=k_buffer.dim() != 3 or v_buffer.dim() != 3,
        )
        if unsupported:
            raise ValueError(
                f"DDTREE's split-KV kernel ({self.SWITCH}={getattr(envs, self.SWITCH).get()}) "
                f"does not compute {', '.join(unsupported)}: set {self.SWITCH}=extend for this model."
            )
        bs = int(kv_indptr.shape[0]) - 1
        return tree_verify_attention(
            q, k, v, o, k_buffer, v_buffer, kv_indptr, kv_indices, tail_mask,
            num_verify_tokens=num_verify_tokens,
            num_splits=self.num_splits(bs, q.shape[1], k.shape[1], q.shape[2], int(num_verify_tokens)),
            sm_scale=sm_scale, k_scale=k_scale, v_scale=v_scale,
        )


class DraftBlockAttention(TreeVerifyAttention):
    """The call for DDTREE's drafter: its block's target-verify forward, which carries no mask
    (the kernel then lets every block token see every block key), through non-causal layers."""

    SWITCH = "SGLANG_DDTREE_DRAFT_ATTENTION"
    CAUSAL = False

    def serves(self, forward_mode, custom_mask) -> bool:
        return forward_mode.is_target_verify() and custom_mask is None


def draft_keeps_extend(server_args, model) -> Optional[str]:
    """Why the drafter's triton backend cannot run its block through the split-KV kernel (None:
    it can): a ``split_kv_path_conflict`` or ``layers_not_computed`` of its non-causal layers."""
    return split_kv_path_conflict(server_args) or layers_not_computed(model, causal=False)


def draft_block_attention_for(model_runner, sm_count: int) -> Optional[DraftBlockAttention]:
    """The drafter's block attention on its triton backend: under ``auto`` where
    ``draft_keeps_extend`` finds no reason against it, under ``splitkv`` always (ValueError
    naming the reason where there is one); None otherwise (extend_attention_fwd)."""
    mode = envs.SGLANG_DDTREE_DRAFT_ATTENTION.get()
    if mode == "extend":
        return None
    reason = draft_keeps_extend(model_runner.server_args, model_runner.model)
    if reason is None:
        return DraftBlockAttention(model_runner.model_config.context_len, sm_count)
    if mode == "splitkv":
        raise ValueError(f"SGLANG_DDTREE_DRAFT_ATTENTION=splitkv cannot run DDTREE's drafter: {reason}; unset it.")
    return None


def tree_verify_for(model_runner, sm_count: int) -> Optional[TreeVerifyAttention]:
    """The split-KV call a triton backend of this model runner makes: DDTREE's target under
    ``splitkv``, or under ``auto`` where ``auto_keeps_extend`` finds no reason against it; its
    drafter's as ``draft_block_attention_for`` says; None otherwise (extend_attention_fwd;
    other algorithms: SGLang's path)."""
    from sglang.srt.speculative.ddtree_compat import spec_arg  # 0.5.19+: the spec bag's

    if str(spec_arg(model_runner.server_args, "speculative_algorithm")) != "DDTREE":
        return None
    if model_runner.is_draft_worker:
        return draft_block_attention_for(model_runner, sm_count)
    mode = verify_attention_mode()
    if mode == "extend":
        return None
    if mode == "auto" and auto_keeps_extend(model_runner.server_args, model_runner.model):
        return None
    return TreeVerifyAttention(model_runner.model_config.context_len, sm_count)


def full_attention_backend(attn_backend):
    """The backend that runs a model's full-attention layers (hybrid wrappers keep it inside)."""
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


def draft_attention_in_use(draft_model_runner) -> bool:
    """Whether the drafter's backend runs its block through the split-KV kernel (under ``auto``,
    whatever it chose); ValueError where ``splitkv`` is asked for and the drafter's backend is
    not triton."""
    backend = full_attention_backend(draft_model_runner.attn_backend)
    if getattr(backend, "ddtree_tree_verify", None) is not None:
        return True
    if envs.SGLANG_DDTREE_DRAFT_ATTENTION.get() == "splitkv":
        raise ValueError(
            "SGLANG_DDTREE_DRAFT_ATTENTION=splitkv runs in the triton attention backend, not the "
            f"drafter's {type(backend).__name__}: unset it, or draft on triton."
        )
    return False
