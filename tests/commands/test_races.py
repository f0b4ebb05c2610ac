"""Races and signals between real CLI runs on a real sglang 0.5.14 env.

A run is held mid-transaction, lock and all, by stopping it at a write step (the fault kind
STOP sends it SIGSTOP there); the test then starts a second run, or sends the held one a signal
the way a terminal or a service manager would, and lets it go on with SIGCONT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT, finish, held_run, run_cli, site_packages, snapshot

from ddtree_overlay.engine.errors import ExitCode
from ddtree_overlay.engine.files import TEMP_SUFFIX
from ddtree_overlay.engine.settings import STATE_DIR_ENV

pytestmark = pytest.mark.slow


def assert_no_temp_files(env: Path, state: Path) -> None:
    assert not list(site_packages(env).rglob(f"*{TEMP_SUFFIX}"))
    assert not list(state.rglob(f"*{TEMP_SUFFIX}")) and not list(state.glob("envs/*/journal.json"))


def test_two_applies_one_wins_the_other_waits_then_names_the_holder(sglang_env: Path, state_dir: Path) -> None:
    first = held_run("apply", sglang_env, "file-replaced:1")
    second = run_cli("apply", "--env", str(sglang_env), env_vars={"DDTREE_OVERLAY_LOCK_TIMEOUT": "1"})
    assert second.returncode == ExitCode.LOCKED, second.stderr
    assert f"pid {first.pid} running `apply`" in second.stderr.splitlines()[0]
    assert finish(first).returncode == 0
    assert "applied" in run_cli("status", "--env", str(sglang_env)).stdout
    assert_no_temp_files(sglang_env, state_dir)


def test_apply_and_rollback_share_the_lock_whatever_their_state_dirs(sglang_env: Path, tmp_path: Path) -> None:
    pristine = snapshot(sglang_env)
    root = {STATE_DIR_ENV: str(tmp_path / "root-state")}
    user = {STATE_DIR_ENV: str(tmp_path / "user-state"), "DDTREE_OVERLAY_LOCK_TIMEOUT": "1"}
    first = held_run("apply", sglang_env, "file-replaced:2", root)
    second = run_cli("rollback", "--env", str(sglang_env), env_vars=user)
    assert second.returncode == ExitCode.LOCKED, second.stderr
    assert f"pid {first.pid}" in second.stderr.splitlines()[0]
    assert finish(first).returncode == 0
    assert run_cli("rollback", "--env", str(sglang_env), env_vars=user).returncode == 0
    assert snapshot(sglang_env) == pristine


def test_a_waiting_run_goes_on_once_the_holder_is_done(sglang_env: Path, state_dir: Path) -> None:
    first = held_run("apply", sglang_env, "file-replaced:1")
    second = subprocess.Popen(
        [sys.executable, "-m", "ddtree_overlay", "apply", "--env", str(sglang_env)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        env=os.environ | {"DDTREE_OVERLAY_LOCK_TIMEOUT": "60"},
    )
    time.sleep(3)  # the second run is waiting on the lock by now
    assert second.poll() is None
    assert finish(first).returncode == 0
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and "already applied" in out


def test_ctrl_c_mid_apply_undoes_it_and_says_so(sglang_env: Path, state_dir: Path) -> None:
    pristine = snapshot(sglang_env)
    run = held_run("apply", sglang_env, "file-replaced:2")
    done = finish(run, signal.SIGINT)
    assert done.returncode == ExitCode.INTERRUPTED, done.stderr
    assert done.stderr.splitlines()[0] == "error: SIGINT received; `apply` stopped and undid what it had written"
    assert "Traceback" not in done.stderr
    assert snapshot(sglang_env) == pristine
    assert_no_temp_files(sglang_env, state_dir)


def test_sigterm_mid_rollback_leaves_it_applied(sglang_env: Path, state_dir: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    applied = snapshot(sglang_env)
    run = held_run("rollback", sglang_env, "file-removed:3")
    done = finish(run, signal.SIGTERM)
    assert done.returncode == ExitCode.TERMINATED, done.stderr
    assert "SIGTERM received; `rollback` stopped" in done.stderr
    assert snapshot(sglang_env) == applied
    assert_no_temp_files(sglang_env, state_dir)
