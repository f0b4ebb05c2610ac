"""The untimed primer engine (bench.plan.primer_run): first in the plan, of the first DDTREE run's
config, paying the first start's compiles, counted by the time box, and out of every table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import analysis, plan_json, records, settings
from ddtree_overlay.bench import markdown as md
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.commands.bench import without_algorithm


def fixture_plan(tmp_path: Path, **config: Any) -> bp.SweepPlan:
    setting = settings.make_setting("fixture", scratch=tmp_path)
    # every arm on one attention backend: tables without an attention column
    defaults = {"budgets": (8, 32), "batch_sizes": (2, 1), "temperatures": (1.0, 0.0), "baseline_attention_backend": "triton"}
    return bp.plan_sweep(setting, bp.BenchConfig(**(defaults | config)))


def test_the_plan_starts_with_an_untimed_engine_of_the_first_ddtree_run(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    primer = plan.runs[0]
    assert primer is plan.primer and primer.primer and primer.name == bp.PRIMER
    assert plan.timed_runs == plan.runs[1:] and not any(r.primer for r in plan.runs[1:])
    first_ddtree = next(r for r in plan.timed_runs if r.group.arm.algorithm == bp.DDTREE)
    assert primer.group is first_ddtree.group and primer.group.name == "ddtree-b32"  # B = 32 runs first
    # one wave at the group's first cell: batch 1 at T = 0, the plan's full length
    (cell,) = primer.cells
    assert (cell.name, cell.batch_size, cell.temperature, cell.prompts) == ("primer/bs1/t0", 1, 0.0, 1)
    assert not {c.name for c in plan.cells} & {cell.name}
    # it pays the kernel compiles; no timed engine does
    cost = plan.setting.cost
    assert primer.est_start_s == cost.engine_start_s + cost.first_start_extra_s
    assert {r.est_start_s for r in plan.timed_runs} == {cost.engine_start_s}
    without = fixture_plan(tmp_path, primer=False)
    assert without.primer is None and without.runs == tuple(
        bp.EngineRun(r.group, r.repeat, r.cells, r.est_start_s) for r in without.runs
    )
    assert without.runs[0].est_start_s == cost.engine_start_s + cost.first_start_extra_s
    assert [(r.name, r.repeat) for r in plan.timed_runs] == [(r.name, r.repeat) for r in without.runs]
    assert plan.est_s == pytest.approx(without.est_s + primer.est_s - cost.first_start_extra_s)


def test_without_ddtree_the_primer_is_the_first_speculative_run_and_target_only_gets_none(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, only=("target-only", "dflash-no-overlap", "dflash"))
    assert plan.primer is not None and plan.primer.group.name == "dflash"
    assert fixture_plan(tmp_path, only=("target-only",)).primer is None
    # shuffled rounds: the first DDTREE engine to run, whichever that is
    shuffled = fixture_plan(tmp_path, budgets=(4, 8, 16, 32), engine_order="shuffle", order_seed=5)
    first = next(r for r in shuffled.timed_runs if r.group.arm.algorithm == bp.DDTREE)
    assert shuffled.primer is not None and shuffled.primer.group is first.group


def test_with_the_ddtree_arms_left_out_the_primer_moves_to_dflash(tmp_path: Path) -> None:
    """The overlay is not applied: `bench` drops the DDTREE groups, and the primer of one."""
    plan = without_algorithm(fixture_plan(tmp_path), bp.DDTREE)
    assert plan.primer is not None and plan.primer.group.name == "dflash"
    assert [r.name for r in plan.runs] == ["primer", "target-only", "dflash", "dflash-no-overlap"]
    assert len(plan.expected_to_fit) == len(plan.runs)


def test_the_runner_plan_and_the_dry_run_list_it_first_and_tagged(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, repeats=2)
    arms = plan_json.runner_plan(plan, deadline=None, profile_path=None)["arms"]
    primer, timed = arms[0], arms[1:]
    assert (primer["name"], primer["repeat"], primer["family"], primer["primer"]) == ("primer", 1, "primer", True)
    assert primer["engine"] == next(a["engine"] for a in timed if a["name"] == "ddtree-b32")
    assert [c["name"] for c in primer["cells"]] == ["primer/bs1/t0"] and primer["profile"]
    assert not any("primer" in a for a in timed)
    summary = plan_json.describe_plan(plan)
    assert summary["engines"][0] == {
        "group": "ddtree-b32", "repeat": 1, "cells": 1, "estimated_s": round(plan.primer.est_s),
        "expected_to_fit": True, "primer": True,
    }
    groups = {g["name"]: g for g in summary["groups"]}
    assert groups["ddtree-b32"]["expected_repeats"] == 2  # the primer is not one of its engines
    assert summary["estimated_minutes"] == round(plan.est_s / 60, 1)


def test_the_time_box_holds_the_primer_and_one_timed_engine_or_no_primer(tmp_path: Path) -> None:
    full = fixture_plan(tmp_path)
    primer, first = full.runs[0], full.runs[1]
    held = fixture_plan(tmp_path, max_minutes=(primer.est_s + first.est_s) / 60 + 0.01)
    assert held.primer is not None and held.expected_to_fit[:2] == (True, True) and not any(held.expected_to_fit[2:])
    assert "leaves out: dflash," in held.notes[0] and "primer" not in held.notes[0]
    # a box one timed engine fits in, but not with the primer before it: no primer, and the first
    # timed engine pays the compiles again
    tight = fixture_plan(tmp_path, max_minutes=(primer.est_s + first.est_s) / 60 - 0.01)
    assert tight.primer is None and tight.runs[0].group.name == "target-only"
    cost = tight.setting.cost
    assert tight.runs[0].est_start_s == cost.engine_start_s + cost.first_start_extra_s
    assert tight.notes[0].startswith(f"--max-minutes {tight.config.max_minutes:g} cannot hold the untimed primer")
    assert "the first DDTREE engine may run slow" in tight.notes[0]


def synthetic_records(plan: bp.SweepPlan, rate: dict[str, float]) -> list[dict]:
    """Every timed run's cells at ``rate[group]`` tok/s, and the primer's records as the runner
    writes them, but last, where a shared key would win (`read_records`): with numbers that
    would move every ratio, and outputs that are all wrong."""
    lines = []
    for run in (*plan.timed_runs, plan.primer):
        assert run is not None
        for cell in run.cells:
            n = cell.prompts
            tok_per_s = 1e6 if run.primer else rate[run.group.name]
            meta = {"completion_tokens": 9} | ({} if run.group.arm.algorithm == bp.TARGET_ONLY else {
                "spec_verify_ct": 3, "spec_correct_drafts_histogram": [0, 0, 3]})
            record = {
                "kind": "cell", "arm": cell.name, "group": run.name, "repeat": run.repeat, "ok": True,
                "batch_size": cell.batch_size, "tok_per_s": tok_per_s, "decode_s": 9 * n / tok_per_s,
                "tokens": 9 * n, "outputs": [[7 if run.primer else i] * 9 for i in range(n)], "meta": [meta] * n,
                "t_start": 0.0, "t_end": 1.0,
            }
            if cell.top2:
                record["top2_margins"] = [[0.01] * 9] * n
            lines.append(record | ({"primer": True} if run.primer else {}))
        lines.append({"kind": "engine", "arm": run.name, "repeat": run.repeat, "ok": True,
                      "start_s": 131.0 if run.primer else 40.0, "health": "ok"} | ({"primer": True} if run.primer else {}))
    return lines


def read(tmp_path: Path, lines: list[dict]) -> tuple[dict, dict]:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return records.read_records(path)


def test_the_primers_records_reach_no_table_ratio_or_check(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, batch_sizes=(1,), temperatures=(0.0,))
    rate = {"target-only": 100.0, "dflash": 200.0, "dflash-no-overlap": 150.0, "ddtree-b32": 400.0, "ddtree-b8": 300.0}
    lines = synthetic_records(plan, rate)
    cells, engines = read(tmp_path, lines)
    assert ("primer/bs1/t0", 1) in cells and ("primer", 1) in engines
    report = analysis.analyse(plan, cells, engines)
    rows = {r["name"]: r for r in report["cells"]}
    assert set(rows) == {f"{g}/bs1/t0" for g in rate}
    assert rows["ddtree-b32/bs1/t0"]["tok_per_s"] == 400.0
    assert rows["ddtree-b32/bs1/t0"]["speedup_vs_dflash"] == pytest.approx(2.0)  # the primer's 1e6 would move it
    assert rows["ddtree-b32/bs1/t0"]["speedup_vs_target"] == pytest.approx(4.0)
    (column,) = report["fastest_modes"]
    assert column["best"]["group"] == "ddtree-b32" and column["best"]["speedup_vs_dflash"] == pytest.approx(2.0)
    assert report["recommended_schedule"]["schedule"] == "1:32"
    assert report["issues"] == []  # its outputs differ from target-only's everywhere
    assert [g["name"] for g in report["groups"]] == list(rate)
    # the same report as from the timed records alone, but for the primer's own entry and note
    alone = analysis.analyse(plan, *read(tmp_path, [line for line in lines if not line.get("primer")]))
    for key in ("cells", "groups", "fastest_modes", "recommended_schedule", "issues", "parity"):
        assert report[key] == alone[key], key
    assert report["primer"] == {"name": "primer", "group": "ddtree-b32", "status": "ok", "reason": None,
                                "start_s": 131.0, "warm_up_s": None, "requests_at_once": None, "health": "ok",
                                "attention_backend": "triton", "paths": None}
    assert alone["primer"]["status"] == "not run"
    note = next(n for n in report["notes"] if "primer" in n)
    assert note.startswith("an untimed primer engine (ddtree-b32's config, started in 131 s) ran before the timed ones")
    assert "docs/bench.md#the-primer-engine" in note
    assert next(n for n in alone["notes"] if "primer" in n).startswith(
        "the untimed primer engine (ddtree-b32's config) did not run (not run)"
    )
    text = md.markdown_report(report)
    assert "| primer (untimed): ddtree-b32 | ok | 131.0 | ok |" in text
    assert "primer" not in md.throughput_table(report)


def test_reports_from_before_the_primer_plan_none(tmp_path: Path) -> None:
    from ddtree_overlay.bench.reanalysis import config_from_report

    plan = fixture_plan(tmp_path)
    recorded = analysis.analyse(plan, {}, {})["config"]
    assert recorded["primer"] is True and config_from_report(recorded).primer
    del recorded["primer"]
    assert not config_from_report(recorded).primer


def test_with_repeats_the_engines_table_lists_the_primer_first_without_a_repeat(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, batch_sizes=(1,), temperatures=(0.0,), repeats=2, only=("dflash", "ddtree-b8"))
    report = analysis.analyse(plan, *read(tmp_path, synthetic_records(plan, {"dflash": 200.0, "ddtree-b8": 300.0})))
    table = md.markdown_report(report).split("## Engines")[1].splitlines()
    assert table[2:5] == ["| engine | repeat | status | start s | health |", "|---|---|---|---|---|",
                          f"| primer (untimed): ddtree-b8 | {md.DASH} | ok | 131.0 | ok |"]
    assert [g["measured_repeats"] for g in report["cells"]] == [2, 2]
