"""Which DDTREE paths an engine ran, as its profile lines name them.

A DDTREE engine chooses some of its paths itself: under ``SGLANG_DDTREE_VERIFY_ATTENTION=auto``
the target verify runs the split-KV kernel or the backend's own kernel by the target's head dim
and layers, under ``SGLANG_DDTREE_DRAFT_ATTENTION=auto`` its drafter runs its block through the
split-KV kernel where its backend is triton and the kernel computes its layers, and a hybrid
target's verify keeps the flat state or SGLang's snapshots. The payload
writes what it chose into every profile window (``paths``, ``ddtree_profile.engine_paths``), the
runner keeps an engine's windows in its record, and the report names the paths beside each engine,
so a record says what ran rather than what the arm asked for. Engines that wrote no window
(non-DDTREE engines, payloads from before the lines named them) name none. A round trace runs
without the profile windows; there the kernels its torch-profiler trace shows, and how often a
round launches them, name the paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddtree_overlay.bench.table_cells import DASH

# Kernels of overlay/sglang/srt/speculative/ddtree_verify_attention.py and ddtree_gdn_tree.py
# (bench.kernel_families.DDTREE_KERNELS, which a test keeps in step with the payload, has them).
SPLIT_KV_KERNEL = "_tree_attention_partial_kernel"
FLAT_STATE_KERNELS = frozenset({"_tree_verify_kernel", "_replay_commit_kernel"})
PATH_KERNELS = FLAT_STATE_KERNELS | {SPLIT_KV_KERNEL}

TEXT = {
    "verify_attention": {"splitkv": "split-KV verify", "full-mask": "FULL-mask verify"},
    "draft_attention": {"splitkv": "split-KV draft"},
    "hybrid_state": {"flat": "flat state", "snapshot": "snapshots"},
}


def ran_paths(windows: Iterable[Mapping[str, Any]]) -> dict[str, str] | None:
    """The paths an engine's profile windows name (every window of one engine names the same)."""
    return next((dict(w["paths"]) for w in windows if w.get("paths")), None)


def traced_paths(
    kernel_calls: Mapping[str, float], *, hybrid: bool, target_layers: int, draft_layers: int
) -> dict[str, str]:
    """The paths of a DDTREE engine whose trace launched ``kernel_calls`` (kernel name -> calls
    per round; the ``PATH_KERNELS`` at least). Only the split-KV paths launch its partial
    kernel, once per attention layer of the model that runs it: ``target_layers`` calls a round
    for the target's verify, ``draft_layers`` for the drafter's block; the count nearest the
    traced one says which ran. Only the flat state launches its GDN tree verify and replay."""
    calls = kernel_calls.get(SPLIT_KV_KERNEL, 0.0)
    verify, draft = min(
        ((v, d) for v in (False, True) for d in (False, True)),
        key=lambda pair: abs(calls - pair[0] * target_layers - pair[1] * draft_layers),
    )
    paths = {"verify_attention": "splitkv" if verify else "full-mask"}
    if draft:
        paths["draft_attention"] = "splitkv"
    if hybrid:
        paths["hybrid_state"] = "flat" if set(kernel_calls) & FLAT_STATE_KERNELS else "snapshot"
    return paths


def paths_text(paths: Mapping[str, str] | None) -> str:
    """``paths`` as an engines-table cell: "split-KV verify, flat state"."""
    if not paths:
        return DASH
    return ", ".join(TEXT.get(key, {}).get(value, f"{key} {value}") for key, value in paths.items())
