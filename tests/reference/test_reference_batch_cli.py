"""`python -m ddtree_overlay.reference.batch`: bad arguments stop it before any reference run
starts or anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_overlay.reference import batch


def run_batch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddtree_overlay.reference.batch", *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budgets", "8,0"], "argument --budgets: expected a number >= 1, got 0"),
        (["--budgets", ","], "argument --budgets: expected at least one budget"),
        (["--prompts", "0"], "argument --prompts: expected a number >= 1, got 0"),
        (["--max-new-tokens", "many"], "argument --max-new-tokens: expected a whole number, got 'many'"),
    ],
)
def test_a_bad_argument_is_one_usage_line_and_nothing_is_written(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "refs"
    done = run_batch(str(out), *args)
    assert done.returncode == 2 and done.stderr.splitlines()[-1].endswith(message), done.stderr
    assert not out.exists()


def test_an_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    taken = tmp_path / "refs"
    taken.write_text("mine")
    done = run_batch(str(taken), "--budgets", "8")
    assert done.returncode == 2 and "exists and is not a directory" in done.stderr
    assert taken.read_text() == "mine"


def test_the_budgets_become_one_job_each_beside_dflash() -> None:
    assert list(batch.jobs(batch.budget_list("8,32"))) == ["dflash", "ddtree-b8", "ddtree-b32"]
