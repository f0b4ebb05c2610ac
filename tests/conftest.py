"""Shared fixtures: a real sglang 0.5.14 wheel, installed by pip into scratch venvs.

The wheel is downloaded once (cached under ~/.cache/ddtree-overlay/test-wheels), installed once
per session into a pristine venv, and each test that writes gets its own `cp -a` copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock
from overlay_helpers import NEXT_SGLANG_VERSION, SGLANG_VERSION, install_wheel, pip

WHEEL_CACHE = Path.home() / ".cache" / "ddtree-overlay" / "test-wheels"


def _cached_wheel(version: str) -> Path | None:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*{tag}*.whl"))
    return found[-1] if found else None


def _wheel(version: str) -> Path:
    """The sglang wheel of ``version`` matching this interpreter, downloaded from PyPI once (by
    one of the `pytest -n` workers while the others wait)."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(WHEEL_CACHE / ".download.lock"):
        if _cached_wheel(version) is None:
            pip("download", "--no-deps", "-d", str(WHEEL_CACHE), f"sglang=={version}")
    wheel = _cached_wheel(version)
    assert wheel is not None, f"pip download left no sglang {version} wheel in {WHEEL_CACHE}"
    return wheel


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    return _wheel(SGLANG_VERSION)


@pytest.fixture(scope="session")
def next_sglang_wheel() -> Path:
    """What an upgrade over the test release installs."""
    return _wheel(NEXT_SGLANG_VERSION)


def make_sglang_venv(root: Path, wheel: Path) -> Path:
    """A venv holding the wheel, installed the way users do: by pip, --no-deps."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    install_wheel(root, wheel)
    return root


@pytest.fixture(scope="session")
def pristine_sglang_env(tmp_path_factory: pytest.TempPathFactory, sglang_wheel: Path) -> Path:
    """Read-only by convention: copy it (`sglang_env`) before writing."""
    return make_sglang_venv(tmp_path_factory.mktemp("pristine") / "venv", sglang_wheel)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hermetic ddtree-overlay state (ledger, backups, scratch envs) for one test."""
    state = tmp_path / "state"
    monkeypatch.setenv("DDTREE_OVERLAY_STATE_DIR", str(state))
    monkeypatch.setenv("DDTREE_OVERLAY_LOCK_TIMEOUT", "0.5")
    return state


@pytest.fixture
def sglang_env(pristine_sglang_env: Path, tmp_path: Path, state_dir: Path) -> Path:
    """A private copy of the pristine env, plus hermetic state."""
    copy = tmp_path / "venv"
    subprocess.run(["cp", "-a", str(pristine_sglang_env), str(copy)], check=True)
    return copy


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch limited to one intra-op thread for a module's tests, then restored."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, int], Path]]:
    """``tmpfs(name, size)`` mounts a tmpfs of ``size`` bytes at ``tmp_path / name``: a file
    system that fills up for real. Mounting needs root; elsewhere (CI runners without it) the
    test is skipped, and it runs on the project's machines, which are root."""
    mounted: list[Path] = []

    def mount(name: str, size: int) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root")
        point = tmp_path / name
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)
