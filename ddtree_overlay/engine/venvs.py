"""The scratch venvs this tool makes itself (the demo's, the matrix's): `python -m venv` and pip,
with pip's own lines turned into progress while it downloads and installs."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.progress import QUIET, Progress

# pip's lines that say what it is doing; the rest (resolver notes, this host's index warnings)
# is kept for an error's tail only.
_PIP_PROGRESS = ("Collecting", "Downloading", "Installing", "Successfully", "Saved", "Processing")
_TAIL_LINES = 6


def make_venv(root: Path) -> None:
    """A venv without pip (pip is run from this interpreter with `--python`)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise errors.venv_failed(root, _tail(done.stderr.splitlines()))


def pip(args: list[str], *, what: str, progress: Progress = QUIET, timeout: float = 600) -> None:
    """`python -m pip ARGS`, each line that says what pip does passed to ``progress.detail``."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    lines: deque[str] = deque(maxlen=40)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as child:
        timed_out = threading.Event()
        timer = threading.Timer(timeout, lambda: (timed_out.set(), child.kill()))
        timer.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                line = line.strip()
                lines.append(line)
                if line.startswith(_PIP_PROGRESS):
                    progress.detail(line)
            code = child.wait()
        finally:
            timer.cancel()
    if timed_out.is_set():
        raise errors.pip_failed(f"{what}: pip ran past {timeout:g} s")
    if code != 0:
        raise errors.pip_failed(what, _tail([line for line in lines if not line.startswith("WARNING")]))


def _tail(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip()][-_TAIL_LINES:] or ["no output"]
