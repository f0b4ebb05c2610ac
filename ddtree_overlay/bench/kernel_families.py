"""GPU kernels of a decode step, by family: what a kernel name in a torch-profiler trace does.

The first family whose pattern a name matches wins, so the order settles names that several
patterns match: DDTREE's own Triton kernels (by exact name) before everything, the recurrent
(Gated-DeltaNet) and speculative bookkeeping kernels before attention, attention (FlashAttention
kernels are CUTLASS device kernels) before GEMM, sampling (an argmax is a torch reduce kernel)
before the elementwise family.
"""

from __future__ import annotations

import re

# The @triton.jit kernels of overlay/sglang/srt/speculative/ddtree_*.py (a test keeps this in step).
DDTREE_KERNELS = frozenset({
    "_accepted_kernel",
    "_best_first_tree_kernel",
    "_chain_kernel",
    "_commit_rows_kernel",
    "_draft_block_kernel",
    "_move_accepted_kv_kernel",
    "_replay_commit_kernel",
    "_row_logsumexp_kernel",
    "_tree_attention_merge_kernel",
    "_tree_attention_partial_kernel",
    "_tree_verify_kernel",
    "_tree_walk_kernel",
    "_verify_inputs_kernel",
})

MEMORY = "memcpy/memset"
DDTREE = "ddtree"
OTHER = "other"
_PATTERNS = (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device_reduce"),
    (
        "gdn/recurrent",
        r"delta_rule|gated_delta|gdn|causal_conv1d|solve_tril|recompute_w_u|l2norm|scaled_dot_kkt"
        r"|chunk_local_cumsum|chunk_fwd_kernel_o|selective_scan|mamba|layer_norm_gated|linear_attn",
    ),
    (
        # SGLang's speculative and KV-slot bookkeeping (srt/speculative/triton_ops, kv indices)
        "spec/KV bookkeeping",
        r"dflash|assign_|cache_loc|fill_bonus|fill_accept|speculative|kv_indices|evict_mask|_gather_rows_kernel",
    ),
    (
        # SGLang's Triton extend/decode attention (_fwd_kernel, _fwd_grouped_kernel_stage1, ...),
        # FlashInfer's and FlashAttention's kernels
        "attention",
        r"^_fwd_(grouped_)?kernel|attention|attn|FlashAttn|flash_fwd|fmha|BatchPrefill|BatchDecode|merge_?state",
    ),
    ("gemm", r"gemm|gemv|cutlass|cublas|nvjet|xmma|matmul|splitKreduce"),
    ("sampling/top-k", r"topk|top_k|radix|bitonic|sort|argmax|argmin|sampling|softmax|multinomial|logsumexp"),
    (
        "norm/act/rope/elementwise",
        r"norm|rope|rotary|silu|gelu|act_and_mul|elementwise|triton_(poi|red|per)_|CatArrayBatchedCopy"
        r"|index|gather|scatter|fill|copy|reduce_kernel|cumsum|embedding",
    ),
)
_COMPILED = tuple((family, re.compile(pattern, re.IGNORECASE)) for family, pattern in _PATTERNS)
FAMILIES = (DDTREE, *(family for family, _ in _PATTERNS), MEMORY, OTHER)


def kernel_family(name: str, category: str = "kernel") -> str:
    """The family of one GPU event (``category``: the trace's ``cat``)."""
    if category in ("gpu_memcpy", "gpu_memset"):
        return MEMORY
    if name in DDTREE_KERNELS:
        return DDTREE
    for family, pattern in _COMPILED:
        if pattern.search(name):
            return family
    return OTHER


def short_kernel_name(name: str, width: int = 72) -> str:
    """A demangled kernel name without ``void`` and its parameter list, cut to ``width``
    (a copy's ``Memcpy DtoH (Device -> Pinned)`` keeps its parenthesis)."""
    name = name.removeprefix("void ")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, 0, -1):  # the parameter list's own opening parenthesis
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                if name[i - 1] != " ":
                    name = name[:i]
                break
    return name if len(name) <= width else name[: width - 1] + "…"
