"""Whether stock SGLang can run NEXTN (its EAGLE worker over the target's MTP head) with overlap
scheduling on this target, and the one line that says why not.

In stock SGLang 0.5.14 to 0.5.16 the overlap EAGLE worker (`eagle_worker_v2`; from 0.5.16 its
draft step in `eagle_worker_common`) asks the target's attention backend for the CUDA-graph
buffer to write the tree mask into (`get_verify_buffers_to_fill_after_draft`).
`HybridLinearAttnBackend` does not forward that call to its full-attention backend, so a hybrid
target answers with the base class's ``[None, None]``; the worker then sizes the mask as batch x
context length, and the triton backend's `_update_target_verify_buffers` copies it into its graph
buffer (max tokens x context length), which it overflows at the largest captured batch size:
``RuntimeError: The expanded size of the tensor (131072) must match the existing size (131328)``
(the hybrid fixture pair at batch 16, sglang 0.5.14, H200, 2026-12-02). The worker without
overlap scheduling (v1) sizes the mask from the batch's real sequence lengths. From 0.5.17 the
hybrid backend forwards the full-attention backend's `verify_mask` (read in the stock sources of
0.5.14 to 0.5.23). flashinfer has no such buffer to hand out on any target, so a hybrid target
changes nothing there, and neither have fa3 and trtllm_mha: SGLang's own default for a NEXTN
engine (the bench's `auto` baseline backend, `bench.attention`) on Hopper and Blackwell.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

FIXED_IN = Version("0.5.17")
AFFECTED_BACKENDS = ("triton",)


def crash_reason(*, hybrid: bool, attention_backend: str, sglang_version: str | None) -> str | None:
    """Why NEXTN must run without overlap scheduling here; None where overlap works. An unknown
    version (a dry run in an env without sglang) counts as affected."""
    if not hybrid or attention_backend not in AFFECTED_BACKENDS:
        return None
    try:
        if sglang_version is not None and Version(sglang_version) >= FIXED_IN:
            return None
    except InvalidVersion:
        pass
    which = f"sglang {sglang_version}" if sglang_version else f"sglang releases before {FIXED_IN}"
    return (
        f"in stock {which} the EAGLE worker with overlap scheduling overflows the {attention_backend} "
        f"backend's tree-mask graph buffer on a hybrid target (HybridLinearAttnBackend does not forward "
        f"get_verify_buffers_to_fill_after_draft; fixed in {FIXED_IN})"
    )


def only_refusal(only: tuple[str, ...], reasons: Mapping[str, str], first_backend: str) -> str | None:
    """The error for ``--only`` asking for NEXTN with overlap scheduling (`nextn` on the first
    baseline backend, `nextn@<backend>` on another) where ``reasons`` (backend -> `crash_reason`)
    says it crashes; None where it does not, or none is asked for."""
    for name in only:
        algorithm, _, backend = name.partition("@")
        reason = reasons.get(backend or first_backend)
        if algorithm == "nextn" and reason:
            return f"--only {name}: {reason}; ask for {name.replace('nextn', 'nextn-no-overlap', 1)}"
    return None
