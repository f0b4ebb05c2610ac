"""Unix manners: a reader that leaves early ends a run quietly, and columns line up."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT, run_cli

from ddtree_overlay.cli import EXIT_READER_LEFT


def run_reader_gone(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with a stdout whose reader has already left (`| head -0`), so every write to it fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "ddtree_overlay", *args],
            stdout=write_end, stderr=subprocess.PIPE, text=True, check=False, cwd=REPO_ROOT,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [("apply", "--check"), ("diff", "--stat"), ("diff",), ("status",), ("status", "--json")],
)
def test_a_closed_stdout_ends_the_command_quietly_with_its_own_code(sglang_env: Path, args: tuple[str, ...]) -> None:
    done = run_reader_gone(*args, "--env", str(sglang_env))
    assert (done.returncode, done.stderr) == (0, "")


def test_a_reader_that_leaves_does_not_stop_the_work(sglang_env: Path) -> None:
    done = run_reader_gone("apply", "--env", str(sglang_env))
    assert (done.returncode, done.stderr) == (0, "")
    assert "already applied" in run_cli("apply", "--env", str(sglang_env)).stdout


def test_help_cut_off_by_a_closed_pipe_exits_as_sigpipe_would() -> None:
    done = run_reader_gone("--help")
    assert (done.returncode, done.stderr) == (EXIT_READER_LEFT, "")


def test_diff_stat_columns_line_up(sglang_env: Path) -> None:
    lines = run_cli("diff", "--stat", "--env", str(sglang_env)).stdout.splitlines()
    rows, total = lines[:-1], lines[-1]
    assert len(rows) > 3 and "file(s) changed" in total
    assert len({row.index("|") for row in rows}) == 1
    assert len({row.index(" -") for row in rows}) == 1  # the counts end in one column


def test_starting_the_cli_imports_no_module_that_opens_an_env() -> None:
    """`--help` and argument parsing stay fast: the engine modules that probe an env, hash its
    RECORD or run its interpreter load only inside the command that uses them."""
    code = (
        "import sys, ddtree_overlay.cli; "
        "print(sorted(m for m in sys.modules if m.startswith('ddtree_overlay.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(done.stdout))
    heavy = {"ddtree_overlay.engine.fingerprint", "ddtree_overlay.engine.envprobe",
             "ddtree_overlay.engine.ledger", "ddtree_overlay.engine.site", "ddtree_overlay.engine.target"}
    assert not loaded & heavy, loaded & heavy
