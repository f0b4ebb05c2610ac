"""The file systems real envs live on, with a real sglang 0.5.14: full disks (tmpfs mounts that
fill up for real), a read-only mount, the state dir on another file system, symlinks anywhere on
the way, and paths with spaces and non-ASCII characters. Each works exactly, or fails up front
with one line, its own exit code and nothing written.

The tmpfs cases need root to mount; CI runners without it skip them, this machine kind runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from overlay_helpers import (
    NEW_FILES,
    ddtree_files,
    finish,
    held_run,
    run_cli,
    run_cli_read_only,
    site_packages,
    snapshot,
)

from ddtree_overlay.engine.errors import ExitCode
from ddtree_overlay.engine.files import TEMP_SUFFIX
from ddtree_overlay.engine.settings import STATE_DIR_ENV

pytestmark = pytest.mark.slow

SPECULATIVE = "sglang/srt/speculative"


def env_on(mount: Path, pristine: Path) -> Path:
    env = mount / "venv"
    subprocess.run(["cp", "-a", str(pristine), str(env)], check=True)
    return env


def leave_free(mount: Path, free: int) -> Path:
    """Fill ``mount`` with one file, then give back about ``free`` bytes (0: full to the byte)."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - free))
    finally:
        os.close(fd)
    return filler


def assert_refused(done: subprocess.CompletedProcess[str], code: ExitCode, fragment: str) -> None:
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith("error: ") and fragment in done.stderr.splitlines()[0], done.stderr
    assert "Traceback" not in done.stderr


def assert_untouched(env: Path, before: dict[str, bytes], state: Path) -> None:
    assert snapshot(env) == before
    assert not list(site_packages(env).rglob(f"*{TEMP_SUFFIX}"))
    assert not list(state.glob("envs/*/ledger.json")) and not list(state.glob("envs/*/journal.json"))
    assert not list(state.rglob(f"*{TEMP_SUFFIX}"))


def test_a_full_site_packages_is_refused_up_front(tmpfs, pristine_sglang_env: Path, state_dir: Path) -> None:
    mount = tmpfs("site", 160 * 2**20)
    env = env_on(mount, pristine_sglang_env)
    before = snapshot(env)
    leave_free(mount, 64 * 2**10)
    assert_refused(run_cli("apply", "--env", str(env)), ExitCode.READ_ONLY, "not enough space")
    assert_untouched(env, before, state_dir)


def test_a_disk_that_fills_up_mid_apply_is_undone_without_needing_space(
    tmpfs, pristine_sglang_env: Path, state_dir: Path
) -> None:
    mount = tmpfs("site", 160 * 2**20)
    env = env_on(mount, pristine_sglang_env)
    before = snapshot(env)
    run = held_run("apply", env, "file-replaced:2")
    filler = leave_free(mount, 0)  # another writer takes the rest of the disk meanwhile
    done = finish(run)
    assert_refused(done, ExitCode.READ_ONLY, "No space left on device; the apply was undone")
    filler.unlink()
    assert_untouched(env, before, state_dir)


def test_a_full_state_dir_is_refused_up_front(tmpfs, sglang_env: Path) -> None:
    state = tmpfs("state", 256 * 2**10)
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), env_vars={STATE_DIR_ENV: str(state)})
    assert_refused(done, ExitCode.READ_ONLY, "not enough space")
    assert_untouched(sglang_env, before, state)


def test_a_state_dir_that_fills_up_mid_apply_changes_nothing(tmpfs, sglang_env: Path) -> None:
    state = tmpfs("state", 8 * 2**20)
    before = snapshot(sglang_env)
    run = held_run("apply", sglang_env, "blob-written:1", {STATE_DIR_ENV: str(state)})
    leave_free(state, 0)
    done = finish(run)
    assert_refused(done, ExitCode.READ_ONLY, "nothing in the env was changed")
    assert_untouched(sglang_env, before, state)


def test_the_state_dir_on_another_file_system(tmpfs, sglang_env: Path) -> None:
    state = tmpfs("state", 64 * 2**20)
    assert os.stat(state).st_dev != os.stat(site_packages(sglang_env)).st_dev
    pristine = snapshot(sglang_env)
    on_tmpfs = {STATE_DIR_ENV: str(state)}
    assert run_cli("apply", "--env", str(sglang_env), env_vars=on_tmpfs).returncode == 0
    assert run_cli("rollback", "--env", str(sglang_env), env_vars=on_tmpfs).returncode == 0
    assert snapshot(sglang_env) == pristine


def test_rollback_on_a_read_only_mount_is_refused_up_front(sglang_env: Path, state_dir: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    applied = snapshot(sglang_env)
    done = run_cli_read_only(site_packages(sglang_env) / SPECULATIVE, "rollback", "--env", str(sglang_env))
    assert_refused(done, ExitCode.READ_ONLY, "read-only")
    assert snapshot(sglang_env) == applied
    assert list(state_dir.glob("envs/*/ledger.json")) and not list(state_dir.glob("envs/*/journal.json"))


def test_a_symlinked_env_path_works_exactly(sglang_env: Path, tmp_path: Path) -> None:
    link = tmp_path / "current-env"
    link.symlink_to(sglang_env)
    pristine = snapshot(sglang_env)
    assert run_cli("apply", "--env", str(link)).returncode == 0
    # the same env reached by its real path: one state, one lock
    shown = json.loads(run_cli("status", "--env", str(sglang_env), "--json").stdout)["data"]["overlay"]
    assert (shown["state"], shown["ledger"]) == ("applied", "present")
    assert run_cli("rollback", "--env", str(link / "bin" / "python")).returncode == 0
    assert snapshot(sglang_env) == pristine


def test_a_symlinked_package_dir_is_never_written_through(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    site = site_packages(sglang_env)
    elsewhere = tmp_path / "elsewhere" / "sglang"
    elsewhere.parent.mkdir()
    shutil.move(site / "sglang", elsewhere)
    (site / "sglang").symlink_to(elsewhere)
    outside = {str(p): p.read_bytes() for p in elsewhere.rglob("*.py")}
    for verb in ("apply", "rollback"):
        done = run_cli(verb, "--env", str(sglang_env))
        assert done.returncode in (ExitCode.EDITABLE_INSTALL, ExitCode.CONFLICT), (verb, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.split("\n\n")[0].splitlines()) == 1
    assert {str(p): p.read_bytes() for p in elsewhere.rglob("*.py")} == outside


def test_a_symlinked_pycache_is_never_followed(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    cache = site_packages(sglang_env) / SPECULATIVE / "__pycache__"
    shutil.rmtree(cache, ignore_errors=True)
    outside = tmp_path / "somebody-elses-cache"
    outside.mkdir()
    (outside / "spec_info.cpython-311.pyc").write_bytes(b"not ours")
    cache.symlink_to(outside)
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env))
    assert_refused(done, ExitCode.CONFLICT, "through a symlink")
    assert (outside / "spec_info.cpython-311.pyc").read_bytes() == b"not ours"
    assert_untouched(sglang_env, before, state_dir)


def test_an_env_path_with_spaces_and_non_ascii(pristine_sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    env = tmp_path / "my envs ü 模型" / "venv 1"
    env.parent.mkdir()
    subprocess.run(["cp", "-a", str(pristine_sglang_env), str(env)], check=True)
    pristine = snapshot(env)
    assert run_cli("apply", "--env", str(env)).returncode == 0
    assert len(ddtree_files(env)) == NEW_FILES
    assert "applied" in run_cli("status", "--env", str(env)).stdout
    assert run_cli("rollback", "--env", str(env)).returncode == 0
    assert snapshot(env) == pristine
