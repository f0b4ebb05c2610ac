"""bench.engine_paths.traced_paths: the paths a DDTREE engine ran, read from the kernels its
round trace launched and how often, checked on round traces committed under docs/bench/."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from ddtree_overlay.bench.engine_paths import (
    FLAT_STATE_KERNELS,
    PATH_KERNELS,
    SPLIT_KV_KERNEL,
    traced_paths,
)
from ddtree_overlay.bench.kernel_families import DDTREE_KERNELS
from ddtree_overlay.bench.target_config import read_target_config, target_config

RUNS = Path(__file__).resolve().parents[2] / "docs" / "bench"
FIXTURES = Path(__file__).resolve().parents[2] / "ddtree_overlay" / "fixtures"


def kernel_calls(run: str) -> dict[str, dict[str, float]]:
    """Each arm's busiest kernels in a committed round trace, name -> calls per round (the
    records keep a dozen; the split-KV and flat-state kernels are among them in these)."""
    path = RUNS / run / "round_trace.json"
    text = lzma.decompress(path.with_suffix(".json.xz").read_bytes()) if not path.exists() else path.read_text()
    return {
        r["arm"]: {name: calls for name, _ms, calls in r["trace"]["gpu"]["top_kernels"]}
        for r in json.loads(text)
        if r.get("trace", {}).get("gpu")
    }


QWEN3_8B = {"target_layers": 36, "draft_layers": 5}
PLAN = "@SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1"


@pytest.mark.parametrize(
    ("run", "arm", "hybrid", "layers", "paths"),
    [
        ("2026-12-04-qwen3-8b-bs16-kernel-split-splitkv", "ddtree-b15@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv", False,
         QWEN3_8B, {"verify_attention": "splitkv"}),
        ("2026-12-04-qwen3-8b-bs16-kernel-split-splitkv", "ddtree-b15", False, QWEN3_8B, {"verify_attention": "full-mask"}),
        ("2026-12-04-qwen3-8b-bs16-b16-splitkv", "ddtree-b16@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv", False,
         QWEN3_8B, {"verify_attention": "splitkv"}),
        ("2026-12-04-fresh-engine-stall-own-kv-mover",
         "ddtree-adaptive-chain-16-32@SGLANG_DDTREE_PROFILE=/tmp/gpu-jobs/job-0/profile.jsonl@TRITON_CACHE_DIR=/tmp/gpu-jobs/job-0/triton",
         True, {"target_layers": 2, "draft_layers": 3}, {"verify_attention": "full-mask", "hybrid_state": "flat"}),
        ("2026-12-06-qwen3-8b-bs1-draft-splitkv-round-trace-h100", "ddtree-b32" + PLAN, False, QWEN3_8B,
         {"verify_attention": "splitkv"}),
        ("2026-12-06-qwen3-8b-bs1-draft-splitkv-round-trace-h100", "ddtree-b32" + PLAN + "@SGLANG_DDTREE_DRAFT_ATTENTION=splitkv",
         False, QWEN3_8B, {"verify_attention": "splitkv", "draft_attention": "splitkv"}),
        ("2026-12-05-qwen3.6-27b-b32-round-trace-h100", "ddtree-b32", True, {"target_layers": 16, "draft_layers": 5},
         {"verify_attention": "splitkv", "hybrid_state": "flat"}),
        ("2026-12-05-qwen3.6-27b-b32-round-trace-h100", "ddtree-b32@SGLANG_DDTREE_VERIFY_ATTENTION=extend", True,
         {"target_layers": 16, "draft_layers": 5}, {"verify_attention": "full-mask", "hybrid_state": "flat"}),
    ],
)
def test_the_paths_of_real_round_traces_are_what_their_engines_ran(run: str, arm: str, hybrid: bool, layers: dict, paths: dict) -> None:
    assert traced_paths(kernel_calls(run)[arm], hybrid=hybrid, **layers) == paths


def test_the_drafter_alone_on_the_split_kv_kernel_is_not_taken_for_the_verify() -> None:
    # the target's verify on SGLang's kernel, its drafter's 5 layers on the split-KV kernel
    calls = {"_fwd_kernel": 36.0, SPLIT_KV_KERNEL: 5.0}
    assert traced_paths(calls, hybrid=False, **QWEN3_8B) == {"verify_attention": "full-mask", "draft_attention": "splitkv"}
    assert traced_paths({SPLIT_KV_KERNEL: 41.0}, hybrid=False, **QWEN3_8B) == {"verify_attention": "splitkv", "draft_attention": "splitkv"}


def test_a_hybrid_trace_without_the_flat_kernels_ran_sglangs_snapshots() -> None:
    snapshot_round = {"_fwd_kernel": 21.0, "_causal_conv1d_update_kernel": 48.0, "fused_recurrent_gated_delta_rule_fwd_kernel": 48.0}
    layers = {"target_layers": 16, "draft_layers": 5}
    assert traced_paths(snapshot_round, hybrid=True, **layers) == {"verify_attention": "full-mask", "hybrid_state": "snapshot"}
    assert traced_paths(snapshot_round, hybrid=False, **layers) == {"verify_attention": "full-mask"}


def test_the_attention_layers_a_config_names() -> None:
    assert read_target_config(FIXTURES / "hybrid" / "target").attention_layers == 2
    assert read_target_config(FIXTURES / "hybrid" / "draft").attention_layers == 3
    assert target_config({"num_hidden_layers": 36}).attention_layers == 36


def test_the_path_kernels_are_the_payloads() -> None:
    assert {SPLIT_KV_KERNEL, *FLAT_STATE_KERNELS} == PATH_KERNELS and PATH_KERNELS <= DDTREE_KERNELS
