"""The continuous-batching report of a real run, re-analysed from its records: the hybrid fixture
pair on an H200 (2026-12-02), DFLASH against DDTREE adaptive chain/16/32 at concurrency 1 to 64
(`bench --setting hybrid --budgets 32 --ddtree-adaptive chain,16,32 --concurrency 1,4,16,32,64
--temperatures 0 --warmup-s 5 --window-s 10 --only dflash,ddtree-adaptive-chain-16-32`).
docs/bench/2026-12-02-steady-state-adaptive-hybrid holds the run's bench.json and bench.md as it
wrote them and its records.jsonl, xz-packed."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

from overlay_helpers import run_cli

from ddtree_overlay.bench.markdown import markdown_report
from ddtree_overlay.bench.reanalysis import reanalysed_report
from ddtree_overlay.commands.bench import reanalyse

RUN = Path(__file__).resolve().parents[2] / "docs" / "bench" / "2026-12-02-steady-state-adaptive-hybrid"
ARM = "ddtree-adaptive-chain-16-32"


def test_the_adaptive_arms_budgets_count_the_profiled_rounds_inside_each_timed_window() -> None:
    text = markdown_report(reanalysed_report(RUN))
    # Counted by hand from the engine's profile windows: at c64 the fourteen windows that begin
    # and end inside [t_start, t_end] hold 41 rounds at B=16 and 21 at B=32; at c16 one window
    # of 64 rounds at B=32 lies inside, its neighbours straddle the window's edges.
    assert f"- {ARM}/c64/t0: B=16: 41, B=32: 21" in text
    assert f"- {ARM}/c16/t0: B=32: 64" in text
    assert f"- {ARM}/c1/t0: B=chain: 2, B=16: 28, B=32: 292" in text
    # the snapshot of the last window inside c64's (the next one, past its end, had bs 64 at
    # chain:3.73 16:3.98 32:4.61 + gap 4.63)
    assert (
        "  - policy at the window's last profiled rounds: bs 1: round ms chain:2.15 16:2.34 32:2.21 + gap 0.70 "
        "-> B=32; bs 64: round ms chain:3.50 16:3.88 32:4.47 + gap 4.49 -> B=32; Φ̄ 4.01/4.74/5.23; c 0.96"
    ) in text
    assert "- dflash/" not in text  # no policy, no profile


def steady_table_of(bench_md: str) -> list[str]:
    """The first table under bench.md's steady-state heading: tok/s per arm and concurrency."""
    section = bench_md.split("## Steady-state serving: continuous batching", 1)[1].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("| arm |"))
    end = next(i for i in range(start, len(section)) if not section[i].startswith("|"))
    return section[start:end]


def test_the_printed_summary_of_a_concurrency_only_run_is_its_steady_state_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    done = run_cli("bench", "--reanalyse", str(run))
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    table = steady_table_of((RUN / "bench.md").read_text())  # as the run itself wrote it
    assert len(table) == 4 and table[2].startswith("| DFLASH | 1176 | 3284 |")
    at = printed.index("Steady-state serving: continuous batching:")
    assert printed[at + 1 : at + 1 + len(table)] == table
    assert "| arm |  |" not in printed  # the waves table of a run without waves cells
    # DDTREE beat DFLASH at every concurrency (x1.06 to x1.97 in the run's own table)
    at = printed.index("recommendation (T = 0; launch commands in bench.md):")
    assert printed[at + 1] == (
        "  1 and more concurrent requests: serve DDTREE adaptive chain/16/32 (measured at concurrency 1, 4, 16, 32, 64)"
    )


def test_reanalysis_only_adds_to_the_runs_own_bench_md(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    reanalyse(run)
    old = (RUN / "bench.md").read_text().splitlines()
    new = (run / "bench.md").read_text().splitlines()
    ops = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    assert [op for op in ops if op[0] not in ("equal", "insert")] == []
    added = [line for tag, _, _, j1, j2 in ops if tag == "insert" for line in new[j1:j2]]
    assert any(line.startswith(f"- {ARM}/c64/t0: B=16: 41") for line in added)
    assert any(line.startswith("- note: re-analysed from records.jsonl at commit ") for line in added)
