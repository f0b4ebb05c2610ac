"""Reinstalls and upgrades over an applied env, done by pip for real: sglang 0.5.14, then
`pip install --force-reinstall` of the same wheel, or sglang 0.5.15 installed over it.

pip puts back the files RECORD lists and leaves the overlay's added files; the verbs must say
so, and bring the env to a clean applied or pristine state of the installed release, never
writing one release's files into another's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from overlay_helpers import (
    NEW_FILES,
    NEXT_SGLANG_VERSION,
    PATCHED_PATHS,
    REPO_ROOT,
    ddtree_files,
    install_wheel,
    run_cli,
    site_packages,
    snapshot,
)

from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.files import sha256_of
from ddtree_overlay.engine.patchset import load_patch_set
from ddtree_overlay.engine.settings import FAULT_AT_ENV

pytestmark = pytest.mark.slow

OVERLAY_FILES = NEW_FILES


def overlay_status(env: Path) -> dict:
    done = run_cli("status", "--env", str(env), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["data"]["overlay"]


def package_files(env: Path) -> dict[str, bytes]:
    """The sglang package tree (pip rewrites RECORD on a reinstall: the script paths differ)."""
    return {path: data for path, data in snapshot(env).items() if path.startswith("sglang/")}


def assert_stock(env: Path, version: str) -> None:
    """Every file is the installed release's as RECORD lists it, and no overlay file is left."""
    sglang = probe_env(env).sglang
    assert sglang.version == version
    assert (sglang.record.modified, sglang.record.missing) == ((), ())
    assert ddtree_files(env) == []


def test_after_a_reinstall_status_says_so_and_apply_and_rollback_finish_the_job(
    sglang_env: Path, sglang_wheel: Path
) -> None:
    pristine = package_files(sglang_env)
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    applied = package_files(sglang_env)
    install_wheel(sglang_env, sglang_wheel, "--force-reinstall")
    overlay = overlay_status(sglang_env)
    assert overlay["state"] == "partial"
    assert (
        f"sglang 0.5.14 was reinstalled: its {len(PATCHED_PATHS)} patched files are stock again, the {OVERLAY_FILES} files the "
        "overlay added are left behind"
    ) in overlay["notes"][0]
    done = run_cli("apply", "--env", str(sglang_env))
    assert done.returncode == 0, done.stderr
    assert package_files(sglang_env) == applied
    install_wheel(sglang_env, sglang_wheel, "--force-reinstall")
    assert run_cli("rollback", "--env", str(sglang_env)).returncode == 0
    assert package_files(sglang_env) == pristine
    assert_stock(sglang_env, "0.5.14")


def test_forced_rollback_after_an_upgrade_keeps_the_new_release_whole(sglang_env: Path, next_sglang_wheel: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    install_wheel(sglang_env, next_sglang_wheel)
    overlay = overlay_status(sglang_env)
    assert f"sglang 0.5.14 was replaced by {NEXT_SGLANG_VERSION} since the overlay was applied" in overlay["notes"][0]
    done = run_cli("rollback", "--env", str(sglang_env), "--force")
    assert done.returncode == 0, done.stderr
    assert "removing the overlay's files, keeping the release's" in done.stderr
    assert_stock(sglang_env, NEXT_SGLANG_VERSION)


def test_apply_after_an_upgrade_applies_the_installed_release(sglang_env: Path, next_sglang_wheel: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    install_wheel(sglang_env, next_sglang_wheel)
    done = run_cli("apply", "--env", str(sglang_env))
    assert done.returncode == 0, done.stderr
    assert f"replaced by {NEXT_SGLANG_VERSION}" in done.stderr and f"sglang-{NEXT_SGLANG_VERSION}-ddtree" in done.stderr
    patch_set = load_patch_set(REPO_ROOT / "manifests" / f"{NEXT_SGLANG_VERSION}.toml")
    site = site_packages(sglang_env)
    assert {e.path: sha256_of(site / e.path) for e in patch_set.files} == {e.path: e.post_sha256 for e in patch_set.files}
    assert overlay_status(sglang_env)["state"] == "applied"
    assert run_cli("rollback", "--env", str(sglang_env)).returncode == 0
    assert_stock(sglang_env, NEXT_SGLANG_VERSION)


def test_recover_after_an_upgrade_removes_only_the_overlay_files(sglang_env: Path, next_sglang_wheel: Path) -> None:
    crashed = run_cli("apply", "--env", str(sglang_env), env_vars={FAULT_AT_ENV: "file-replaced:6:KILL"})
    assert crashed.returncode == -9
    install_wheel(sglang_env, next_sglang_wheel)
    done = run_cli("recover", "--env", str(sglang_env))
    assert done.returncode == 0, done.stderr
    assert "removing the overlay's added files" in done.stderr
    assert_stock(sglang_env, NEXT_SGLANG_VERSION)
