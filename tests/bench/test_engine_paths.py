"""bench.engine_paths.traced_paths: the paths a DDTREE engine ran, read from the kernels its
round trace launched, checked on the round traces of 2026-12-04 committed under docs/bench/."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from ddtree_overlay.bench.engine_paths import FLAT_STATE_KERNELS, SPLIT_KV_KERNEL, traced_paths
from ddtree_overlay.bench.kernel_families import DDTREE_KERNELS

RUNS = Path(__file__).resolve().parents[2] / "docs" / "bench"


def top_kernels(run: str) -> dict[str, list[str]]:
    """Each arm's busiest kernels in a committed round trace (the records keep a dozen)."""
    records = json.loads(lzma.decompress((RUNS / run / "round_trace.json.xz").read_bytes()))
    return {r["arm"]: [name for name, _ms, _calls in r["trace"]["gpu"]["top_kernels"]] for r in records}


@pytest.mark.parametrize(
    ("run", "arm", "hybrid", "paths"),
    [
        ("2026-12-04-qwen3-8b-bs16-kernel-split-splitkv", "ddtree-b15@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv", False,
         {"verify_attention": "splitkv"}),
        ("2026-12-04-qwen3-8b-bs16-kernel-split-splitkv", "ddtree-b15", False, {"verify_attention": "full-mask"}),
        ("2026-12-04-qwen3-8b-bs16-b16-splitkv", "ddtree-b16@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv", False,
         {"verify_attention": "splitkv"}),
        ("2026-12-04-fresh-engine-stall-own-kv-mover",
         "ddtree-adaptive-chain-16-32@SGLANG_DDTREE_PROFILE=/tmp/gpu-jobs/job-0/profile.jsonl@TRITON_CACHE_DIR=/tmp/gpu-jobs/job-0/triton",
         True, {"verify_attention": "full-mask", "hybrid_state": "flat"}),
    ],
)
def test_the_paths_of_real_round_traces_are_what_their_engines_ran(run: str, arm: str, hybrid: bool, paths: dict) -> None:
    assert traced_paths(top_kernels(run)[arm], hybrid=hybrid) == paths


def test_a_hybrid_trace_without_the_flat_kernels_ran_sglangs_snapshots() -> None:
    snapshot_round = ["_fwd_kernel", "_causal_conv1d_update_kernel", "fused_recurrent_gated_delta_rule_fwd_kernel"]
    assert traced_paths(snapshot_round, hybrid=True) == {"verify_attention": "full-mask", "hybrid_state": "snapshot"}
    assert traced_paths(snapshot_round, hybrid=False) == {"verify_attention": "full-mask"}


def test_the_path_kernels_are_the_payloads() -> None:
    assert {SPLIT_KV_KERNEL, *FLAT_STATE_KERNELS} <= DDTREE_KERNELS
