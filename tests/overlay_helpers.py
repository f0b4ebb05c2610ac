"""Helpers for the overlay tests (imported by them; no fixtures here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SGLANG_VERSION = "0.5.14"
REPO_ROOT = Path(__file__).resolve().parent.parent


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
