"""The continuous-batching section of the bench report (bench.steady, steady_markdown), from
synthetic runner records of several engines per arm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import analysis, settings
from ddtree_overlay.bench import markdown as md
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench.steady_markdown import steady_table
from ddtree_overlay.bench.supervision import write_report
from ddtree_overlay.commands.bench import reanalyse

# tok/s per engine (repeat 1, 2, 3) at every concurrency
RATES = {
    "target-only": [100.0, 110.0, 90.0],
    "dflash": [200.0, 260.0, 180.0],
    "dflash-no-overlap": [150.0, 150.0, 150.0],
    "ddtree-b32": [300.0, 240.0, 330.0],
    "ddtree-b15-chain": [190.0, 190.0, 190.0],
    "dflash@flashinfer": [250.0, 280.0, 230.0],
    "dflash-no-overlap@flashinfer": [140.0, 140.0, 140.0],
}


def steady_plan(tmp_path: Path, **config: Any) -> bp.SweepPlan:
    setting = settings.make_setting("qwen3-8b-random", scratch=tmp_path, write=False)
    # every arm on one attention backend: tables without an attention column
    defaults = {"budgets": (32,), "batch_sizes": (), "concurrencies": (1, 16), "temperatures": (0.0,),
                "repeats": 3, "engine_order": "shuffle", "chain_control": True, "warmup_s": 5.0, "window_s": 20.0,
                "baseline_attention_backend": "triton"}
    return bp.plan_sweep(setting, bp.BenchConfig(**(defaults | config)))


def stream_record(cell: bp.Cell, group: bp.EngineGroup, repeat: int, rate: float, t: float,
                  running: float | None = None) -> dict[str, Any]:
    metas = [{"completion_tokens": 128, "spec_verify_ct": 32 if group.arm.algorithm != "target-only" else None}] * 10
    return {
        "kind": "cell", "arm": cell.name, "group": group.name, "repeat": repeat, "batch_size": cell.batch_size,
        "ok": True, "t_start": t, "t_end": t + 20.0, "decode_s": 20.0, "wall_s": 27.0, "tokens": rate * 20,
        "tok_per_s": rate, "concurrency": cell.batch_size, "mean_running": running or cell.batch_size * 0.99,
        "requests_in_window": 10, "requests_total": 14, "requests": [], "meta": metas,
        "host": {"busy_cores": 3.5, "cpus": 16, "load1": [1.0, 1.2], "others": [],
                 "processes": [{"pid": 7, "comm": "scheduler", "cpu_per_wall": 0.97, "cpus": "0-15", "last_cpu": 3}]},
    }


def synthetic(plan: bp.SweepPlan, **override: dict[str, Any]) -> tuple[dict, dict]:
    cells, engines, t = {}, {}, 1000.0
    for run in plan.runs:
        windows = []
        for cell in run.cells:
            rate = RATES[run.group.name][run.repeat - 1] * (1 if cell.batch_size == 1 else 8)
            record = stream_record(cell, run.group, run.repeat, rate, t)
            cells[cell.name, run.repeat] = record | override.get(f"{cell.name}#{run.repeat}", {})
            windows.append({"t_first": t + 1, "t_last": t + 19, "rounds": 10, "requests": 10 * cell.batch_size,
                            "ms_sum": {"draft": 20.0, "verify": 50.0, "round": 100.0}})
            t += 30.0
        engines[run.group.name, run.repeat] = {"kind": "engine", "arm": run.group.name, "repeat": run.repeat,
                                               "ok": True, "start_s": 60.0, "health": "ok", "profile": windows}
    return cells, engines


def rows_by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in report["steady"]["rows"]}


def test_a_cell_is_the_median_over_its_engines_with_the_spread(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    report = analysis.analyse(plan, *synthetic(plan))
    assert report["cells"] == []  # no waves cells
    row = rows_by_name(report)["ddtree-b32/c16/t0"]
    assert row["status"] == "ok" and row["measured_engines"] == 3
    assert (row["tok_per_s"], row["tok_per_s_min"], row["tok_per_s_max"]) == (2400.0, 1920.0, 2640.0)
    assert row["median_engine"] == 1
    assert [e["tok_per_s"] for e in row["engines"]] == [2400.0, 1920.0, 2640.0]
    assert row["tokens_per_round"] == pytest.approx(4.0)
    assert row["profile"]["ms_per_round"]["verify"] == 5.0  # the median engine's windows
    assert rows_by_name(report)["target-only/c1/t0"]["measured_engines"] == 3  # every round
    assert rows_by_name(report)["target-only/c1/t0"]["tokens_per_round"] is None


def test_the_cost_per_request_and_round_is_each_engines_own_then_the_median(tmp_path: Path) -> None:
    # two engines: the median tok/s is their mean, while "the median engine" is one of them, so
    # pairing it with the median tok/s would mix two engines' numbers
    plan = steady_plan(tmp_path, repeats=2)
    slow_rounds = [{"completion_tokens": 128, "spec_verify_ct": 64}] * 10  # 2 tokens per round
    cells, engines = synthetic(plan, **{"ddtree-b32/c16/t0#2": {"meta": slow_rounds}})
    row = rows_by_name(analysis.analyse(plan, cells, engines))["ddtree-b32/c16/t0"]
    rates = [2400.0, 1920.0]  # engine 1: 4 tokens per round, engine 2: 2
    costs = [4 / rates[0], 2 / rates[1]]
    assert row["tok_per_s"] == pytest.approx(sum(rates) / 2)
    assert row["request_round_s"] == pytest.approx(sum(costs) / 2)
    assert (row["request_round_s_min"], row["request_round_s_max"]) == (pytest.approx(min(costs)), pytest.approx(max(costs)))
    target = rows_by_name(analysis.analyse(plan, cells, engines))["target-only/c16/t0"]
    assert target["request_round_s"] is None  # no rounds to count


def test_ratios_are_of_medians_against_dflashs_faster_mode_and_the_worst_case(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    rows = rows_by_name(analysis.analyse(plan, *synthetic(plan)))
    b32 = rows["ddtree-b32/c1/t0"]
    assert b32["vs_dflash"]["ratio"] == pytest.approx(300 / 200)
    assert b32["vs_dflash"]["base_group"] == "dflash"  # faster than no overlap by median
    assert b32["vs_dflash"]["worst"] == pytest.approx(240 / 260)  # slowest DDTREE ÷ fastest DFLASH
    assert b32["vs_target"]["ratio"] == pytest.approx(300 / 100)
    chain = rows["ddtree-b15-chain/c1/t0"]
    assert chain["chain"] and chain["vs_dflash"]["ratio"] == pytest.approx(190 / 200)
    assert "vs_dflash" not in rows["dflash-no-overlap/c1/t0"]


def test_a_failed_engine_fails_its_cell_and_a_thin_batch_is_named(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    failed = {"ok": False, "error": "RuntimeError: CUDA out of memory"}
    report = analysis.analyse(plan, *synthetic(plan, **{
        "ddtree-b32/c16/t0#2": failed, "dflash/c16/t0#1": {"mean_running": 9.5}}))
    row = rows_by_name(report)["ddtree-b32/c16/t0"]
    assert row["status"] == "failed" and "engine 2: RuntimeError: CUDA out of memory" in row["reason"]
    assert any("ddtree-b32/c16/t0 (repeat 2)" in issue for issue in report["issues"])
    assert any("dflash/c16/t0 (repeat 1): 9.5 requests running on average against 16" in n for n in report["notes"])


def test_a_capped_engine_runs_its_cap_whatever_the_stream_keeps_in_flight(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    cells, engines = synthetic(plan)
    for repeat in (1, 2, 3):
        engines["dflash", repeat]["requests_at_once"] = 11  # the stream still keeps 16 in flight
    report = analysis.analyse(plan, cells, engines)
    rows = rows_by_name(report)
    assert rows["dflash/c16/t0"]["mean_running"] == 11
    assert rows["dflash/c1/t0"]["mean_running"] == pytest.approx(0.99)  # below its cap: what was in flight
    assert rows["ddtree-b32/c16/t0"]["mean_running"] == pytest.approx(15.84)
    assert any("dflash/c16/t0 (repeat 2): 11.0 requests running on average against 16" in n for n in report["notes"])


def test_cells_the_time_box_cut_are_named(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    cells, engines = synthetic(plan)
    for name in ("ddtree-b32/c1/t0", "ddtree-b32/c16/t0"):
        cells[name, 3] = {"kind": "cell", "arm": name, "repeat": 3, "ok": False, "skipped": "time box"}
    del cells["dflash/c16/t0", 3]
    report = analysis.analyse(plan, cells, engines)
    row = rows_by_name(report)["ddtree-b32/c1/t0"]
    assert row["status"] == "ok" and row["measured_engines"] == 2 and row["tok_per_s"] == 270.0
    assert row["engines"][2] == {"repeat": 3, "status": "skipped", "reason": "time box"}
    assert any(n.startswith("3 continuous-batching cell(s) measured by fewer engines than planned") and
               "ddtree-b32/c16/t0 (2 of 3)" in n and "dflash/c16/t0 (2 of 3)" in n for n in report["notes"])


def test_the_markdown_shows_medians_spreads_ratios_and_the_chain_control(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    text = md.markdown_report(analysis.analyse(plan, *synthetic(plan)))
    assert "## Steady-state serving: continuous batching" in text
    assert "3 engines per arm, in rounds (shuffled per round (seed 0))" in text
    assert "| arm | T=0 c=1 | T=0 c=16 |" in text
    assert "| DDTREE B=32 | 300 (240\u2013330); x1.50 DFLASH (worst x0.92), x3.00 target (worst x2.18) |" in text
    assert "| DDTREE B=15 chain control | 190 (190\u2013190); x0.95 DFLASH" in text
    assert "| DDTREE B=32 | 16 | 0 | 2400 | 2400, 1920, 2640 | 15.8 | 10 | 4.00 | 2.00 / 5.00 / 3.00 | 3.5 of 16; " \
        "scheduler 0.97 |" in text
    assert "## Output tokens/s" not in text  # no waves cells: no waves tables
    assert "captured for batch sizes [1, 2, 4, 8, 16]" in text


def test_arms_that_ran_different_attention_backends_name_them_in_the_steady_table(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path, baseline_attention_backend="auto", chain_control=False)
    cells, engines = synthetic(plan)
    for (name, _), engine in engines.items():
        engine["attention_backend"] = "triton" if name.startswith("ddtree") else "fa3"  # SGLang's default on an H200
    report = analysis.analyse(plan, cells, engines)
    table = md.summary_tables(report).removeprefix("Steady-state serving: continuous batching:\n")
    assert table.splitlines()[:2] == ["| arm | attention | T=0 c=1 | T=0 c=16 |", "|---|---|---|---|"]
    assert "| DFLASH | fa3 | 200 (180\u2013260);" in table and "| DDTREE B=32 | triton | 300 (240\u2013330);" in table
    assert table in md.markdown_report(report)


def test_waves_and_streams_report_side_by_side(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path, batch_sizes=(1,), repeats=1, chain_control=False)
    cells, engines = synthetic(plan)
    for group in plan.groups:
        wave = next(c for c in group.cells if not c.stream)
        metas = [{"completion_tokens": 128, "spec_verify_ct": 32}] * wave.prompts
        cells[wave.name, 1] = {"kind": "cell", "arm": wave.name, "ok": True, "batch_size": 1, "tok_per_s": 50.0,
                               "decode_s": 1.0, "tokens": 50, "meta": metas, "outputs": [[1] * 128] * wave.prompts,
                               "t_start": 0.0, "t_end": 1.0}
    report = analysis.analyse(plan, cells, engines)
    assert {r["name"] for r in report["cells"]} == {f"{g.name}/bs1/t0" for g in plan.groups}
    assert len(report["steady"]["rows"]) == 2 * len(plan.groups)
    text = md.markdown_report(report)
    assert "## Output tokens/s" in text and "## Steady-state serving" in text
    assert "One engine per arm" in text
    summary = md.summary_tables(report).split("\n\n")
    assert summary == [
        f"Output tokens/s (x target-only; DDTREE also x DFLASH):\n{md.throughput_table(report)}",
        f"Steady-state serving: continuous batching:\n{steady_table(report['steady'])}",
    ]
    assert "| T=0 bs=1 |" in summary[0] and "| T=0 c=1 | T=0 c=16 |" in summary[1]


def test_reanalyse_rebuilds_the_steady_section_from_the_records(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path, prompt_tokens=1024)
    cells, engines = synthetic(plan)
    run = tmp_path / "run"
    report = analysis.analyse(plan, cells, engines, context={"started": "2026-12-02"})
    write_report(report, run)
    with (run / "records.jsonl").open("w") as f:
        for record in [*cells.values(), *engines.values()]:
            f.write(json.dumps(record) + "\n")
    again = reanalyse(run).data["report"]
    assert again["config"]["prompt_lengths"] == [1024]
    assert rows_by_name(again)["ddtree-b32/c16/t0"]["tok_per_s"] == 2400.0
    assert again["config"]["engine_order"] == "shuffle" and again["config"]["concurrencies"] == [1, 16]


def test_ddtree_against_the_fastest_dflash_of_every_backend_named_where_it_is_a_further_one(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path, baseline_attention_backend="triton,flashinfer", chain_control=False)
    rows = rows_by_name(analysis.analyse(plan, *synthetic(plan)))
    b32 = rows["ddtree-b32/c1/t0"]
    assert b32["vs_dflash"]["base_group"] == "dflash@flashinfer" and b32["vs_dflash"]["ratio"] == pytest.approx(300 / 250)
    table = steady_table(analysis.analyse(plan, *synthetic(plan))["steady"], {g.name: "x" for g in plan.groups})
    assert "| DFLASH on flashinfer | x | 250 (230\u2013280); x2.50 target" in table
    assert "300 (240\u2013330); x1.20 DFLASH on flashinfer (worst x0.86)" in table

