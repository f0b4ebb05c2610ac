"""`demo`: a scratch env with stock sglang, then status -> apply -> diff --stat -> rollback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.commands.diff import diff
from ddtree_overlay.commands.rollback import rollback
from ddtree_overlay.commands.status import status
from ddtree_overlay.engine import errors
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.ledger import state_home
from ddtree_overlay.engine.result import Result

DEMO_SGLANG_VERSION = "0.5.14"


def scratch_env_path() -> Path:
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return state_home() / "scratch" / f"sglang-{DEMO_SGLANG_VERSION}-{tag}"


def run_demo(on_step: Callable[[Result], None]) -> Result:
    env_path = scratch_env_path()
    created = ensure_scratch_env(env_path)
    on_step(Result(("demo",), "ok", {"env": str(env_path), "created": created}))
    steps: list[Callable[[], Result]] = [
        lambda: status(probe_env(env_path)),
        lambda: apply(probe_env(env_path)),
        lambda: diff(probe_env(env_path), stat=True),
        lambda: rollback(probe_env(env_path)),
    ]
    outcomes = []
    for step in steps:
        result = step()
        on_step(result)
        outcomes.append({"command": list(result.command), "status": result.status})
    return Result(("demo",), "ok", {"env": str(env_path), "steps": outcomes})


def ensure_scratch_env(env_path: Path) -> bool:
    """Reuse the scratch env if it holds the pinned sglang; otherwise build it. True if built."""
    python = env_path / "bin" / "python"
    if python.exists() and _has_pinned_sglang(python):
        return False
    shutil.rmtree(env_path, ignore_errors=True)
    env_path.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_path)], "create the scratch venv")
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--disable-pip-version-check", "--no-deps", "--no-compile",
         f"sglang=={DEMO_SGLANG_VERSION}"],
        f"install sglang=={DEMO_SGLANG_VERSION}",
    )
    return True


def _has_pinned_sglang(python: Path) -> bool:
    probe = subprocess.run(
        [str(python), "-I", "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True, text=True, check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == DEMO_SGLANG_VERSION


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise errors.pip_failed(f"{what}: {last}")
