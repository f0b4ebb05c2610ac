"""Helpers for the overlay tests (imported by them; no fixtures here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SGLANG_VERSION = "0.5.14"
NEXT_SGLANG_VERSION = "0.5.15"
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
