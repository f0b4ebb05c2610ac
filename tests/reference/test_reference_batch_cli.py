"""`python -m ddtree_overlay.reference.batch`: bad arguments stop it before any reference run
starts or anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_overlay.bench.arms import reference_cli_args
from ddtree_overlay.fixture_paths import EAGLE3_DRAFT, PAIRS
from ddtree_overlay.reference import batch
from ddtree_overlay.reference.cli import parse_args


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
        (["--pair", "hybrid", "--eagle3"], "--eagle3: only the dense pair has an EAGLE-3 drafter"),
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
    pair = PAIRS["dense"]
    todo = batch.jobs(pair, batch.budget_list("8,32"), eagle3=False)
    assert todo == {
        "dflash": ["--draft", str(pair / "draft"), "--algo", "dflash"],
        "ddtree-b8": ["--draft", str(pair / "draft"), "--algo", "ddtree", "--budget", "8"],
        "ddtree-b32": ["--draft", str(pair / "draft"), "--algo", "ddtree", "--budget", "32"],
    }


def test_eagle3_is_the_bench_arms_chain_with_its_own_drafter() -> None:
    todo = batch.jobs(PAIRS["dense"], [16], eagle3=True)
    assert list(todo) == ["dflash", "ddtree-b16", "eagle3"]
    # the reference CLI's default chain, as the bench asks for it beside a sweep
    bench_job = reference_cli_args("eagle3", draft=PAIRS["dense"] / "draft", eagle3_draft=EAGLE3_DRAFT)
    steps = bench_job[bench_job.index("--num-steps") + 1]
    assert parse_args([*todo["eagle3"], "--target", "t", "--prompts", "p", "--json", "j"]).num_steps == int(steps)
    assert todo["eagle3"] == [arg for arg in bench_job if arg not in ("--num-steps", steps)]
