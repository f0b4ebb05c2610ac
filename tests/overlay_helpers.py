"""Helpers for the overlay tests (imported by them; no fixtures here)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtree_overlay.engine.patchset import load_patch_set
from ddtree_overlay.engine.settings import FAULT_AT_ENV

SGLANG_VERSION = "0.5.14"
NEXT_SGLANG_VERSION = "0.5.15"
REPO_ROOT = Path(__file__).resolve().parent.parent
# the 0.5.14 patch set the command tests apply: how many stock files it patches and adds
_PATCH_SET = load_patch_set(REPO_ROOT / "manifests" / f"{SGLANG_VERSION}.toml")
NEW_FILES = len(_PATCH_SET.new_files)
TOUCHED_FILES = len(_PATCH_SET.touched_paths())
PATCHED_PATHS = tuple(sorted(set(_PATCH_SET.touched_paths()) - {f.target for f in _PATCH_SET.new_files}))


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def run_cli(*args: str, env_vars: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter, as a user (or a crash) would see it."""
    return subprocess.run(
        [sys.executable, "-m", "ddtree_overlay", *args],
        capture_output=True, text=True, check=False,
        env=os.environ | (env_vars or {}),
        cwd=REPO_ROOT,
    )


def snapshot(env: Path) -> dict[str, bytes]:
    """Every file of the sglang package tree and its dist-info, by relative path."""
    root = site_packages(env)
    return {
        str(path.relative_to(root)): path.read_bytes()
        for top in ("sglang", f"sglang-{SGLANG_VERSION}.dist-info")
        for path in (root / top).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def copy_repo_data(destination: Path) -> Path:
    """A writable copy of manifests/, patches/ and overlay/, for tests that edit a patch set."""
    for name in ("manifests", "patches", "overlay"):
        shutil.copytree(REPO_ROOT / name, destination / name)
    return destination / "manifests" / f"{SGLANG_VERSION}.toml"


def pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=True, capture_output=True,
    )


def install_wheel(env: Path, wheel: Path, *flags: str) -> None:
    """`pip install --no-deps` into ``env``, as users install sglang (``flags``: --force-reinstall)."""
    pip("--python", str(env / "bin" / "python"), "install", "--no-deps", "--no-compile", *flags, str(wheel))


def ddtree_files(env: Path) -> list[str]:
    """The overlay's modules present in the env's sglang."""
    return sorted(p.name for p in (site_packages(env) / "sglang/srt/speculative").glob("ddtree_*"))


def held_run(verb: str, env: Path, step: str, env_vars: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`ddtree-overlay VERB --env ENV`, stopped at ``step`` (returned once it is stopped there)."""
    run = subprocess.Popen(
        [sys.executable, "-m", "ddtree_overlay", verb, "--env", str(env)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        env=os.environ | (env_vars or {}) | {FAULT_AT_ENV: f"{step}:STOP"},
    )
    deadline = time.monotonic() + 120
    while _state(run.pid) != "T":
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    return run


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def finish(run: subprocess.Popen[str], *signals: int) -> subprocess.CompletedProcess[str]:
    for signum in (*signals, signal.SIGCONT):
        os.kill(run.pid, signum)
    out, err = run.communicate(timeout=120)
    return subprocess.CompletedProcess(run.args, run.returncode, out, err)


def run_cli_read_only(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with ``directory`` read-only. Root writes through any mode bit, so as root the
    directory becomes a read-only bind mount in a private mount namespace (`unshare`)."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            return run_cli(*args)
        finally:
            directory.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a read-only mount as root")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    command = [sys.executable, "-m", "ddtree_overlay", *args]
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", str(directory), *command],
        capture_output=True, text=True, check=False, cwd=REPO_ROOT,
    )
    if "mount:" in done.stderr or "unshare:" in done.stderr:
        pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()}")
    return done
