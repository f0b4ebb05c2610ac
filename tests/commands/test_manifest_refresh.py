"""manifest-refresh: one command regenerates the [[file]] hashes, or says which hunk fails."""

from __future__ import annotations

import re
from pathlib import Path

from overlay_helpers import REPO_ROOT, copy_repo_data, run_cli

from ddtree_overlay.commands.manifest_refresh import GENERATED_MARKER
from ddtree_overlay.engine.patchset import load_patch_set


def test_refresh_regenerates_the_shipped_manifest_byte_for_byte(sglang_env: Path, tmp_path: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    text = manifest.read_text()
    manifest.write_text(text[: text.index("\n[[file]]")].replace(GENERATED_MARKER, ""))
    done = run_cli("manifest-refresh", str(manifest), "--env", str(sglang_env))
    assert done.returncode == 0, done.stderr
    assert manifest.read_text() == (REPO_ROOT / "manifests" / "0.5.14.toml").read_text()


def test_refresh_after_a_payload_change_makes_the_set_apply(sglang_env: Path, tmp_path: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    overlay_file = tmp_path / "data/overlay/sglang/srt/speculative/ddtree_utils.py"
    overlay_file.write_text(overlay_file.read_text() + "\nVERSION = 2\n")
    stale = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest), "--check")
    assert stale.returncode == 7 and "manifest-refresh" in stale.stderr
    assert run_cli("manifest-refresh", str(manifest), "--env", str(sglang_env)).returncode == 0
    load_patch_set(manifest)
    assert run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest)).returncode == 0


def test_refresh_names_the_hunk_that_does_not_apply(sglang_env: Path, tmp_path: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    patch = next((tmp_path / "data/patches/0.5.14").glob("*.patch"))
    lines = patch.read_text().splitlines(keepends=True)
    header = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    context = next(i for i in range(header + 1, len(lines)) if lines[i].startswith(" ") and lines[i].strip())
    lines[context] = lines[context].rstrip("\n") + "  # not in the release\n"
    patch.write_text("".join(lines))
    start = re.match(r"@@ -(\d+)", lines[header])[1]
    before = manifest.read_text()
    done = run_cli("manifest-refresh", str(manifest), "--env", str(sglang_env))
    assert done.returncode == 8
    assert f"hunk #1 does not match near line {start}" in done.stderr
    assert manifest.read_text() == before
