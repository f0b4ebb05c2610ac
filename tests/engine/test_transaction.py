"""Crash safety: SIGKILL (and Ctrl-C) at every write step, then recovery to an exact state."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from overlay_helpers import run_cli, site_packages, snapshot

from ddtree_overlay.engine.faults import CRASH_AT_ENV

APPLY_STEPS = [
    ("blob-written", 1), ("blob-written", 3), ("journal-written", 1),
    ("temp-written", 1), ("file-replaced", 1), ("temp-written", 2), ("file-replaced", 2),
    ("journal-committed", 1), ("ledger-written", 1),
]
ROLLBACK_STEPS = [
    ("journal-written", 1), ("file-removed", 1), ("temp-written", 1), ("file-replaced", 1),
    ("journal-committed", 1), ("ledger-written", 1),
]


@pytest.fixture(scope="module")
def applied_image(pristine_sglang_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The exact bytes of an env with the overlay applied, made once."""
    copy = tmp_path_factory.mktemp("applied") / "venv"
    subprocess.run(["cp", "-a", str(pristine_sglang_env), str(copy)], check=True)
    state = tmp_path_factory.mktemp("applied-state")
    done = run_cli("apply", "--env", str(copy), env_vars={"DDTREE_OVERLAY_STATE_DIR": str(state)})
    assert done.returncode == 0, done.stderr
    return snapshot(copy)


def assert_no_stray_temp_files(env: Path) -> None:
    assert not list(site_packages(env).rglob("*.ddtree-*.tmp"))


@pytest.mark.parametrize(("step", "nth"), APPLY_STEPS)
def test_killed_apply_recovers_to_exactly_pristine_or_applied(
    sglang_env: Path, applied_image: dict[str, bytes], step: str, nth: int
) -> None:
    pristine = snapshot(sglang_env)
    crashed = run_cli("apply", "--env", str(sglang_env), env_vars={CRASH_AT_ENV: f"{step}:{nth}"})
    assert crashed.returncode == -9, crashed.stderr
    recovered = run_cli("recover", "--env", str(sglang_env))
    assert recovered.returncode == 0, recovered.stderr
    assert snapshot(sglang_env) in (pristine, applied_image)
    assert_no_stray_temp_files(sglang_env)
    final = run_cli("apply", "--env", str(sglang_env))
    assert final.returncode == 0, final.stderr
    assert snapshot(sglang_env) == applied_image


@pytest.mark.parametrize(("step", "nth"), ROLLBACK_STEPS)
def test_killed_rollback_is_finished_by_the_next_command(
    sglang_env: Path, applied_image: dict[str, bytes], step: str, nth: int
) -> None:
    pristine = snapshot(sglang_env)
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    crashed = run_cli("rollback", "--env", str(sglang_env), env_vars={CRASH_AT_ENV: f"{step}:{nth}"})
    assert crashed.returncode == -9, crashed.stderr
    status = run_cli("status", "--env", str(sglang_env))
    assert "needs-recovery" in status.stdout or step == "ledger-written"
    # No explicit `recover`: rollback recovers first, then rolls back what is left.
    again = run_cli("rollback", "--env", str(sglang_env))
    assert again.returncode == 0, again.stderr
    assert snapshot(sglang_env) == pristine
    assert_no_stray_temp_files(sglang_env)


def test_ctrl_c_mid_apply_rolls_back_before_exiting(sglang_env: Path) -> None:
    pristine = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), env_vars={CRASH_AT_ENV: "file-replaced:1:INT"})
    assert done.returncode != 0
    assert snapshot(sglang_env) == pristine
    assert "pristine" in run_cli("status", "--env", str(sglang_env)).stdout
