"""The overlay's state from the files alone: pre-images rebuilt from the shipped patch sets."""

from __future__ import annotations

from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT, site_packages

from ddtree_overlay.engine.datadir import bundled_manifests
from ddtree_overlay.engine.images import FileState, overall_state, rebuild_pre_image
from ddtree_overlay.engine.patchset import load_patch_set
from ddtree_overlay.engine.planner import compute_post_images


def test_every_shipped_patch_set_gives_back_its_pre_images(pristine_sglang_env: Path) -> None:
    patch_set = load_patch_set(REPO_ROOT / "manifests" / "0.5.14.toml")
    site = site_packages(pristine_sglang_env)
    originals = {path: (site / path).read_bytes() if (site / path).exists() else None for path in patch_set.touched_paths()}
    posts = compute_post_images(patch_set, originals).images
    for entry in patch_set.files:
        if entry.pre_sha256 is not None:
            rebuilt = rebuild_pre_image(patch_set, entry.path, posts[entry.path])
            assert rebuilt == originals[entry.path], entry.path


@pytest.mark.parametrize("manifest", bundled_manifests(), ids=lambda path: path.stem)
def test_a_file_that_is_not_the_post_image_rebuilds_nothing(manifest: Path) -> None:
    patch_set = load_patch_set(manifest)
    patched = next(entry for entry in patch_set.files if entry.pre_sha256 is not None)
    assert rebuild_pre_image(patch_set, patched.path, b"an edited file\n") is None


def test_the_overall_state_names_a_reinstall_partial_and_an_edit_drifted() -> None:
    def state(current: str | None, pre: str | None, stock: str | None = None) -> FileState:
        return FileState("x.py", pre, "post", current, 0o644, stock)

    assert overall_state([state("post", "pre"), state("post", None)]) == "applied"
    assert overall_state([state("pre", "pre"), state("post", None)]) == "partial"
    assert overall_state([state("new", "pre", stock="new"), state(None, None)]) == "pristine"
    assert overall_state([state("edit", "pre"), state("post", None)]) == "drifted"
