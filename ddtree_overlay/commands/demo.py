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
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.ledger import state_home
from ddtree_overlay.engine.progress import QUIET, Progress
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.venvs import make_venv, pip

DEMO_SGLANG_VERSION = "0.5.14"


def scratch_env_path() -> Path:
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return state_home() / "scratch" / f"sglang-{DEMO_SGLANG_VERSION}-{tag}"


def run_demo(on_step: Callable[[Result], None], progress: Progress = QUIET) -> Result:
    env_path = scratch_env_path()
    created = ensure_scratch_env(env_path, progress)
    on_step(Result(("demo",), "ok", {"env": str(env_path), "created": created}))
    steps: dict[str, Callable[[], Result]] = {
        "status": lambda: status(probe_env(env_path)),
        "apply": lambda: apply(probe_env(env_path)),
        "diff --stat": lambda: diff(probe_env(env_path), stat=True),
        "rollback": lambda: rollback(probe_env(env_path)),
    }
    outcomes = []
    for name, step in steps.items():
        progress.step(name)
        result = step()
        on_step(result)
        outcomes.append({"command": list(result.command), "status": result.status})
    return Result(("demo",), "ok", {"env": str(env_path), "steps": outcomes})


def ensure_scratch_env(env_path: Path, progress: Progress = QUIET) -> bool:
    """Reuse the scratch env if it holds the pinned sglang; otherwise build it. True if built."""
    python = env_path / "bin" / "python"
    if python.exists() and _has_pinned_sglang(python):
        return False
    shutil.rmtree(env_path, ignore_errors=True)
    progress.step("creating the scratch venv")
    make_venv(env_path)
    progress.step(f"installing sglang=={DEMO_SGLANG_VERSION} into it (--no-deps: its files, not its runtime)")
    pip(
        ["--python", str(python), "install", "--no-deps", "--no-compile", f"sglang=={DEMO_SGLANG_VERSION}"],
        what=f"install sglang=={DEMO_SGLANG_VERSION}",
        progress=progress,
    )
    return True


def _has_pinned_sglang(python: Path) -> bool:
    probe = subprocess.run(
        [str(python), "-I", "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True, text=True, check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == DEMO_SGLANG_VERSION
