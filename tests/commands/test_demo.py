"""The README's main job: a scratch env with stock sglang, status -> apply -> diff --stat -> rollback."""

from __future__ import annotations

from pathlib import Path

from overlay_helpers import REPO_ROOT, run_cli

from ddtree_overlay.engine.patchset import load_patch_set


def test_demo_runs_every_step_and_leaves_the_scratch_env_pristine(sglang_wheel: Path, state_dir: Path) -> None:
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(sglang_wheel.parent)}
    first = run_cli("demo", env_vars=offline)
    assert first.returncode == 0, first.stderr
    for heading in ("== ddtree-overlay status ==", "== ddtree-overlay apply ==",
                    "== ddtree-overlay diff ==", "== ddtree-overlay rollback =="):
        assert heading in first.stdout
    touched = len(load_patch_set(REPO_ROOT / "manifests" / "0.5.14.toml").touched_paths())
    assert "(created)" in first.stdout and f"{touched} file(s) changed" in first.stdout
    # stderr is piped here: the install's progress comes as plain lines, pip's own among them
    assert "installing sglang==0.5.14" in first.stderr and "Successfully installed sglang-0.5.14" in first.stderr
    second = run_cli("demo", env_vars=offline)
    assert second.returncode == 0 and "(reused)" in second.stdout
