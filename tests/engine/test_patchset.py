"""Manifest loading and validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT, copy_repo_data

from ddtree_overlay.engine.errors import BadPatchSet, UnsafePath
from ddtree_overlay.engine.patchset import load_patch_set, safe_relative_path


def test_the_shipped_manifest_loads_with_a_consistent_file_table() -> None:
    patch_set = load_patch_set(REPO_ROOT / "manifests" / "0.5.14.toml")
    assert patch_set.touched_paths() == (
        "sglang/srt/speculative/spec_info.py",
        "sglang/srt/server_args.py",
        "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
        "sglang/srt/layers/attention/linear/gdn_backend.py",
        "sglang/srt/mem_cache/memory_pool.py",
        "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
        "sglang/srt/layers/attention/triton_backend.py",
        "sglang/srt/speculative/ddtree_spec.py",
        "sglang/srt/speculative/ddtree_utils.py",
        "sglang/srt/speculative/ddtree_tree_stage.py",
        "sglang/srt/speculative/ddtree_kernels.py",
        "sglang/srt/speculative/ddtree_info.py",
        "sglang/srt/speculative/ddtree_worker_v2.py",
        "sglang/srt/speculative/ddtree_contract.py",
        "sglang/srt/speculative/ddtree_compat_base.py",
        "sglang/srt/speculative/ddtree_compat.py",
        "sglang/srt/speculative/ddtree_profile.py",
        "sglang/srt/speculative/ddtree_tp.py",
        "sglang/srt/speculative/ddtree_hybrid.py",
        "sglang/srt/speculative/ddtree_gdn_tree.py",
        "sglang/srt/speculative/ddtree_budget.py",
        "sglang/srt/speculative/ddtree_envs.py",
        "sglang/srt/speculative/ddtree_adaptive.py",
        "sglang/srt/speculative/ddtree_adaptive_tp.py",
        "sglang/srt/speculative/ddtree_cuda_graph_runner.py",
        "sglang/srt/speculative/ddtree_attention_choice.py",
        "sglang/srt/speculative/ddtree_verify_attention.py",
        "sglang/srt/speculative/ddtree_warmup.py",
        "sglang/srt/speculative/ddtree_kv_move.py",
        "sglang/srt/speculative/ddtree_grammar_path.py",
        "sglang/srt/speculative/ddtree_sampling.py",
    )
    assert patch_set.expectation("sglang/srt/speculative/ddtree_utils.py").pre_sha256 is None


def test_every_payload_module_is_installed_by_every_manifest_and_every_shim_by_one() -> None:
    """A module added under overlay/ without its [[new_file]] entry applies cleanly and then
    fails at import on the GPU host."""
    sources = {m: {f.source for f in load_patch_set(m).new_files} for m in sorted((REPO_ROOT / "manifests").glob("*.toml"))}
    payload = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "overlay" / "sglang").rglob("*.py")}
    shims = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "overlay" / "shims").rglob("*.py")}
    assert payload and shims
    for manifest, installed in sources.items():
        assert payload <= installed, (manifest.name, sorted(payload - installed))
    assert shims <= set().union(*sources.values())


@pytest.mark.parametrize("raw", ["../x", "/abs", "a/../../b", '"quoted"', "a\\b"])
def test_unsafe_paths_are_refused(raw: str) -> None:
    with pytest.raises(UnsafePath):
        safe_relative_path(raw, what="test")


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    manifest = copy_repo_data(tmp_path)
    manifest.write_text(manifest.read_text().replace("[patchset]\n", "[patchset]\nfuzz = 2\n"))
    with pytest.raises(BadPatchSet, match="unknown keys"):
        load_patch_set(manifest)


def test_a_stale_file_table_points_at_manifest_refresh(tmp_path: Path) -> None:
    manifest = copy_repo_data(tmp_path)
    text = manifest.read_text()
    manifest.write_text(text[: text.index("\n[[file]]")])
    with pytest.raises(BadPatchSet, match="out of date") as raised:
        load_patch_set(manifest)
    assert "manifest-refresh" in (raised.value.hint or "")
    assert load_patch_set(manifest, require_file_table=False).files == ()


def test_patches_may_not_create_files(tmp_path: Path) -> None:
    manifest = copy_repo_data(tmp_path)
    patch = next((tmp_path / "patches" / "0.5.14").glob("*.patch"))
    patch.write_text("--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1 @@\n+x = 1\n")
    with pytest.raises(BadPatchSet, match="adds, removes") as raised:
        load_patch_set(manifest)
    assert "[[new_file]]" in (raised.value.hint or "")
