from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest
from overlay_helpers import run_cli

from ddtree_overlay.bench.markdown import markdown_report
from ddtree_overlay.bench.reanalysis import reanalysed_report
from ddtree_overlay.engine.errors import ExitCode

RUN = Path(__file__).resolve().parents[2] / "docs/bench/2026-11-29-stage-graphs-tp2-allgather/bench-fixture-bs1"


def test_without_references_the_runs_own_parity_and_its_issues_stay(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    old = json.loads((run / "bench.json").read_text())
    old["parity"][0] |= {"status": "off", "ratio": 0.5, "sglang_tokens_per_round": 3.0, "reference_tokens_per_round": 6.0}
    (run / "bench.json").write_text(json.dumps(old))
    report = reanalysed_report(run)
    assert report["parity"] == old["parity"]
    group = old["parity"][0]["group"]
    assert f"{group}: tokens per round 3.000 against the offline reference's 6.000 (x0.500, tolerance +-10%)" in report["issues"]
    assert "acceptance parity as the run itself judged it (no --reference-dir)" in report["notes"]
    assert [r["status"] for r in report["cells"]] == [r["status"] for r in old["cells"]]


def test_a_runs_own_reference_folder_judges_its_parity_on_the_cell_that_decoded_most(tmp_path: Path) -> None:
    # both cells planned 16 prompts; the bs 1 cell decoded 8 before its time box
    run = tmp_path / "run"
    shutil.copytree(RUN.parents[1] / "2026-12-06-fixture-eagle3-h100", run)
    report = reanalysed_report(run)
    judged = {row["group"]: row for row in report["parity"]}
    assert {group: row["cell"] for group, row in judged.items()} == {
        "eagle3": "eagle3/bs16/t0", "ddtree-b32": "ddtree-b32/bs16/t0"}
    assert all(row["status"] == "ok" for row in judged.values())
    assert not any("as the run itself judged it" in note for note in report["notes"])
    shutil.rmtree(run / "reference")
    assert [row["group"] for row in reanalysed_report(run)["parity"]] == ["ddtree-b32"]  # the run's own rows


def test_the_requests_each_engine_served_at_once_reach_the_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    lines = [json.loads(line) for line in lzma.decompress((run / "records.jsonl.xz").read_bytes()).splitlines()]
    for line in lines:
        if line.get("kind") == "engine":
            line["requests_at_once"] = 11 if line["arm"] == "dflash" else 48
    (run / "records.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))  # read before the .xz
    report = reanalysed_report(run)
    assert {g["name"]: g["requests_at_once"] for g in report["groups"]}["dflash"] == 11
    assert "| dflash | ok | 26.8 | 11 | ok |" in markdown_report(report)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda run: (run / "bench.json").unlink(), "it has no bench.json"),
        (lambda run: (run / "bench.json").write_text("{"), "its bench.json cannot be read (JSONDecodeError"),
        (lambda run: (run / "bench.json").write_text("[1]"), "its bench.json is not a bench report"),
        (lambda run: _edit_report(run, setting={"name": "nosuch"}), "its bench.json's setting is 'nosuch'"),
        (lambda run: _edit_report(run, setting={"name": "custom", "target": "/t"}), "custom setting has no draft"),
        (lambda run: _edit_report(run, config=[]), "its bench.json's config cannot be read (AttributeError"),
        (lambda run: _edit_report(run, config={"budgets": "abc"}), "its bench.json's config cannot be planned"),
        (lambda run: (run / "records.jsonl.xz").unlink(), "it has neither records.jsonl nor records.jsonl.xz"),
        (lambda run: (run / "records.jsonl").write_text("garbage\n"), "its records cannot be read (JSONDecodeError"),
    ],
)
def test_a_directory_that_is_no_bench_run_is_refused_in_one_line_and_left_as_it_was(tmp_path: Path, damage, why) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    damage(run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    done = run_cli("bench", "--reanalyse", str(run))
    assert done.returncode == ExitCode.BAD_RUN_FILE, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"error: `{run}` is not a bench run to re-analyse: ") and why in first, first
    assert "Traceback" not in done.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def _edit_report(run: Path, **fields) -> None:
    report = json.loads((run / "bench.json").read_text())
    (run / "bench.json").write_text(json.dumps(report | fields))


def test_a_run_from_before_nextns_scheduling_was_per_backend_keeps_its_no_overlap_arm() -> None:
    run = RUN.parents[1] / "2026-12-02-hybrid-bench-primer-nextn-no-overlap"
    recorded = json.loads((run / "bench.json").read_text())["setting"]["nextn_without_overlap"]
    assert isinstance(recorded, str)  # one reason, for the one baseline backend that run had
    report = reanalysed_report(run)
    assert "nextn-no-overlap" in [g["name"] for g in report["groups"]]
    assert report["setting"]["nextn_without_overlap"] == {"triton": recorded}
