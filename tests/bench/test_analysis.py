"""The bench report (bench.records, analysis, correctness, markdown, plots): per-cell metrics,
speedups, round split, correctness, markdown and plots, from synthetic runner records."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import analysis, plots, records, settings
from ddtree_overlay.bench import markdown as md
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench.arms import policy_label
from ddtree_overlay.bench.engine_paths import paths_text

PROMPTS = 4
NEW = 9


def small_plan(tmp_path: Path, **config: Any) -> bp.SweepPlan:
    setting = settings.make_setting("fixture", scratch=tmp_path)
    # every arm on one attention backend: tables without an attention column
    defaults = {"budgets": (8, 32), "batch_sizes": (1, 2), "temperatures": (0.0, 1.0),
                "max_new_tokens": NEW, "prompts_per_cell": PROMPTS, "baseline_attention_backend": "triton"}
    return bp.plan_sweep(setting, bp.BenchConfig(**(defaults | config)))


def outputs(shift_at: dict[int, int] | None = None) -> list[list[int]]:
    outs = [[(p * 10 + i) % 272 for i in range(NEW)] for p in range(PROMPTS)]
    for prompt, index in (shift_at or {}).items():
        outs[prompt][index] += 1
    return outs


def cell_record(cell: bp.Cell, group: bp.EngineGroup, *, tok_per_s: float, rounds: int = 0,
                t: float = 100.0, **extra: Any) -> dict[str, Any]:
    meta = []
    for _ in range(PROMPTS):
        m: dict[str, Any] = {"completion_tokens": NEW}
        if group.arm.algorithm != bp.TARGET_ONLY:
            m |= {"spec_verify_ct": rounds, "spec_correct_drafts_histogram": [0, rounds]}
        meta.append(m)
    record = {
        "kind": "cell", "arm": cell.name, "group": group.name, "batch_size": cell.batch_size, "ok": True,
        "outputs": outputs(), "meta": meta, "tok_per_s": tok_per_s, "decode_s": PROMPTS * NEW / tok_per_s,
        "tokens": PROMPTS * NEW, "t_start": t, "t_end": t + 1.0,
    }
    if cell.top2:
        record["top2_margins"] = [[5.0] * NEW for _ in range(PROMPTS)]
        record["top2_margins"][1][2] = 0.1
    return record | extra


def synthetic(plan: bp.SweepPlan) -> tuple[dict[tuple[str, int], dict], dict[tuple[str, int], dict]]:
    """target-only 100 tok/s, DFLASH 200, DDTREE B 300 + B, no overlap 150, in every repeat;
    every arm 4 rounds per prompt. Keyed as `read_records` keys them: (name, repeat)."""
    cells, engines, t = {}, {}, 100.0
    speed = {bp.TARGET_ONLY: 100.0, bp.DFLASH: 200.0}
    for run in plan.runs:
        group, windows = run.group, []
        for cell in run.cells:
            rate = speed.get(group.arm.algorithm, 300.0 + (group.arm.row()["budget"] or 0))
            if not group.arm.overlap:
                rate = 150.0
            record = cell_record(cell, group, tok_per_s=rate, rounds=4, t=t)
            cells[cell.name, run.repeat] = record | {"repeat": run.repeat}
            if group.arm.algorithm == bp.DDTREE:
                ms = {"draft": 8.0, "topk": 1.0, "tree": 2.0, "verify": 12.0, "accept": 1.0, "commit": 2.0,
                      "round": 30.0}
                windows.append({"t_first": t + 0.1, "t_last": t + 0.9, "rounds": 4, "requests": 4 * cell.batch_size,
                                "cuda_graph_rounds": 3, "ms_sum": ms})
            t += 2.0
        windows.append({"t_first": t - 0.5, "t_last": t - 0.4, "rounds": 1, "requests": 1, "ms_sum": {"round": 99.0}})
        engines[run.name, run.repeat] = {"kind": "engine", "arm": run.name, "repeat": run.repeat, "ok": True,
                                         "start_s": 40.0, "health": "ok", "profile": windows}
    return cells, engines


def reference_for(tokens_per_round: float, tokens: list[list[int]] | None = None) -> dict[str, Any]:
    rows = [{"tokens": out, "tokens_per_round": tokens_per_round} for out in (tokens or outputs())]
    return {"aggregate": {"tokens_per_round": tokens_per_round, "accept_len_mean": tokens_per_round - 0.1},
            "prompts": rows}


def references(value: float = NEW / 4) -> dict[str, dict[str, Any]]:
    return {"dflash": reference_for(value), "ddtree-b8": reference_for(value), "ddtree-b32": reference_for(value)}


def test_cells_get_throughput_speedups_and_acceptance(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    assert "target-only/margins" not in rows  # not a timed cell
    b32 = rows["ddtree-b32/bs2/t0"]
    assert b32["tok_per_s"] == 332.0
    assert b32["speedup_vs_target"] == pytest.approx(3.32) and b32["speedup_vs_dflash"] == pytest.approx(1.66)
    assert rows["dflash-no-overlap/bs1/t1"]["speedup_vs_dflash"] == pytest.approx(0.75)
    assert rows["dflash/bs1/t0"].get("speedup_vs_dflash") is None
    assert rows["target-only/bs1/t0"].get("speedup_vs_target") is None
    assert b32["acceptance_length"] == pytest.approx((NEW - 1) / 4)
    assert b32["tokens_per_round"] == pytest.approx(NEW / 4) and b32["rounds"] == 16
    assert b32["acceptance_histogram"] == [0, 16]  # SGLang counts correct drafts: index 1 = length 2
    assert b32["steps"] == 4 * 2 and b32["step_ms"] == pytest.approx(1000 * b32["decode_s"] / 8)
    assert rows["target-only/bs2/t0"]["steps"] == 2 * NEW
    assert report["issues"] == [] and report["setting"]["real_weights"]


def test_round_split_comes_from_the_profile_windows_inside_the_cell(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines, references=references())
    profile = {r["name"]: r for r in report["cells"]}["ddtree-b8/bs2/t1"]["profile"]
    assert profile["rounds"] == 4 and profile["mean_batch"] == 2 and profile["cuda_graph_fraction"] == 0.75
    split = profile["ms_per_round"]
    assert split["verify"] == 3.0 and split["round"] == 7.5
    assert split["other"] == pytest.approx(7.5 - (8 + 1 + 2 + 12 + 1 + 2) / 4)
    assert all(r.get("profile") is None for r in report["cells"] if r["algorithm"] != bp.DDTREE)


def test_missing_profile_windows_leave_a_hint(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    for engine in engines.values():
        engine["profile"] = []
    report = analysis.analyse(plan, cells, engines, references=references())
    assert analysis.PROFILE_HINT in report["notes"] and report["issues"] == []


def test_greedy_divergence_beyond_noise_is_an_issue_within_noise_is_not(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    cells["ddtree-b8/bs1/t0", 1]["outputs"] = outputs({1: 2})  # margin there 0.1: bf16 noise
    cells["ddtree-b32/bs2/t0", 1]["outputs"] = outputs({3: 5})  # margin 5.0: a bug
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    explained = rows["ddtree-b8/bs1/t0"]["lossless"]
    assert explained["passed"] and explained["identical"] == 3 and explained["first_divergence"]["margin"] == 0.1
    wrong = rows["ddtree-b32/bs2/t0"]["lossless"]
    assert not wrong["passed"] and wrong["worst_divergence"]["index"] == 5
    assert report["issues"] == [
        "ddtree-b32/bs2/t0: 1 of 4 prompts leave target-only greedy output beyond bf16 noise "
        "(largest top1-top2 margin 5.000 at token 5)"
    ]
    assert "lossless" not in rows["ddtree-b32/bs2/t1"]  # sampled: no token-equality check
    assert rows["dflash/bs1/t0"]["lossless"]["reference"] == "target-only/margins"


def test_greedy_outputs_are_judged_on_the_trajectory_their_margins_belong_to(tmp_path: Path) -> None:
    """Target-only at bs 1 leaves the margins run at an exact tie (token 2 of prompt 1); a DDTREE
    cell that stays on the margins run's trajectory is lossless, though it differs from bs 1."""
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    cells["target-only/bs1/t0", 1]["outputs"] = outputs({1: 2})
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["ddtree-b8/bs1/t0"]
    assert row["lossless"]["passed"] and row["lossless"]["identical"] == PROMPTS
    assert report["issues"] == []


def test_without_margins_greedy_outputs_are_judged_against_the_same_batch_size(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    margins = next(name for name, _ in cells if name.endswith("/margins"))
    cells[margins, 1]["ok"] = False
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["dflash/bs1/t0"]
    assert row["lossless"]["reference"] == "target-only/bs1/t0" and row["lossless"]["passed"]


def test_divergence_with_random_weights_is_reported_but_not_an_issue(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3-8b-random", scratch=tmp_path)
    plan = bp.plan_sweep(setting, bp.BenchConfig(budgets=(8,), batch_sizes=(4,), temperatures=(0.0,),
                                                 prompts_per_cell=PROMPTS, max_new_tokens=NEW))
    cells, engines = synthetic(plan)
    cells["ddtree-b8/bs4/t0", 1]["outputs"] = outputs({0: 1})
    report = analysis.analyse(plan, cells, engines)
    row = {r["name"]: r for r in report["cells"]}["ddtree-b8/bs4/t0"]
    assert not row["lossless"]["passed"] and report["issues"] == [] and report["parity"] == []
    assert setting.note in report["notes"]


def test_parity_with_the_reference_gates_on_the_aggregate_and_reports_per_prompt(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    refs = references()
    refs["ddtree-b32"] = reference_for(NEW / 4 * 1.5)
    refs["dflash"] = reference_for(NEW / 4 * 1.02, tokens=outputs({0: 1}))
    del refs["ddtree-b8"]
    report = analysis.analyse(plan, cells, engines, references=refs)
    parity = {row["group"]: row for row in report["parity"]}
    assert parity["dflash"]["status"] == "ok" and parity["dflash"]["cell"] == "dflash/bs1/t0"
    assert parity["dflash"]["per_prompt_within"] == "4/4" and parity["dflash"]["same_sequence_prompts"] == "3/4"
    assert parity["dflash-no-overlap"]["status"] == "ok"  # judged against DFLASH's reference too
    assert parity["ddtree-b32"]["status"] == "off" and parity["ddtree-b32"]["ratio"] == pytest.approx(1 / 1.5)
    assert parity["ddtree-b8"]["status"] == "missing"
    assert any(i.startswith("ddtree-b32: tokens per round 2.250") for i in report["issues"])
    assert any(i.startswith("ddtree-b8: no offline reference") for i in report["issues"])


def test_failed_and_skipped_cells_and_engines(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    engines["ddtree-b32", 1] = {"kind": "engine", "arm": "ddtree-b32", "ok": False, "error": "RuntimeError: boom"}
    for cell in plan.group("ddtree-b32").cells:
        cells[cell.name, 1] = {"kind": "cell", "arm": cell.name, "ok": False, "skipped": "engine failed to start"}
    cells["ddtree-b8/bs2/t1", 1] = {"kind": "cell", "arm": "ddtree-b8/bs2/t1", "ok": False, "skipped": "time box"}
    del cells["dflash/bs2/t1", 1]
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    assert rows["ddtree-b8/bs2/t1"]["status"] == "skipped" and rows["dflash/bs2/t1"]["status"] == "not run"
    assert "ddtree-b32: the engine failed: RuntimeError: boom" in report["issues"]
    assert any("time box" in note or "skipped" in note for note in report["notes"])
    assert {g["name"]: g["status"] for g in report["groups"]}["ddtree-b32"] == "failed"
    markdown = md.markdown_report(report)
    assert "| DDTREE B=32 | skipped | skipped |" in markdown
    assert "| ddtree-b32 | failed: RuntimeError: boom |" in markdown


def test_report_states_the_tensor_parallel_size(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, tp_size=2)
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines, references=references())
    assert report["config"]["tp_size"] == 2
    assert "attention backend `triton` and tensor-parallel size 2 for every arm" in md.markdown_report(report)


def test_markdown_has_the_tables_the_docs_need(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines, references=references(),
                        context={"started": "2026-11-29T10:00:00+00:00", "gpu": "NVIDIA H200"})
    markdown = md.markdown_report(report)
    assert markdown.startswith("# DDTREE bench: fixture")
    assert "2026-11-29T10:00:00+00:00; NVIDIA H200" in markdown
    assert "| arm | T=0 bs=1 | T=0 bs=2 | T=1 bs=1 | T=1 bs=2 |" in markdown
    assert "| DDTREE B=32 | 332 (x3.32, x1.66 DFLASH) |" in markdown
    assert "| target-only | 100 | 100 | 100 | 100 |" in markdown
    assert "| DDTREE B=8 | 2 | 0 | 308 | 3.08 | 1.54 | 2.00 | 2.25 | 16 |" in markdown
    assert "| ddtree-b8/bs1/t0 | 0, 16 |" in markdown
    assert "## Acceptance parity with the offline reference decoder" in markdown
    throughput = md.throughput_table(report)
    assert throughput.splitlines()[0] == "| arm | T=0 bs=1 | T=0 bs=2 | T=1 bs=1 | T=1 bs=2 |"


def test_read_records_splits_cells_from_engines(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(
        json.dumps({"kind": "cell", "arm": "a/bs1/t0", "ok": False}) + "\n\n"
        + json.dumps({"kind": "engine", "arm": "a", "ok": True}) + "\n"
        + json.dumps({"kind": "cell", "arm": "a/bs1/t0", "ok": True}) + "\n"
    )
    cells, engines = records.read_records(path)
    assert cells == {("a/bs1/t0", 1): {"kind": "cell", "arm": "a/bs1/t0", "ok": True}}  # no repeat: repeat 1
    assert list(engines) == [("a", 1)]
    assert records.read_records(tmp_path / "missing.jsonl") == ({}, {})


def test_read_records_leaves_out_a_last_line_still_being_written(tmp_path: Path) -> None:
    """The supervisor reads records after each engine while the runner appends the next ones;
    on the H200 (2026-12-04) it once read a line cut at 176 characters and the bench died with a
    JSONDecodeError. A record without its newline is not there yet."""
    path = tmp_path / "records.jsonl"
    engine = json.dumps({"kind": "engine", "arm": "dflash", "ok": True}) + "\n"
    skipped = json.dumps({"kind": "cell", "arm": "ddtree-b32/bs16/t0", "ok": False, "skipped": "time box"})
    path.write_text(engine + skipped[:30])
    cells, engines = records.read_records(path)
    assert (cells, list(engines)) == ({}, [("dflash", 1)])
    path.write_text(engine + skipped + "\n")
    assert list(records.read_records(path)[0]) == [("ddtree-b32/bs16/t0", 1)]


def test_read_records_reads_an_xz_packed_run_as_the_plain_one(tmp_path: Path) -> None:
    plain = tmp_path / "plain" / "records.jsonl"
    packed = tmp_path / "packed" / "records.jsonl"
    plain.parent.mkdir()
    packed.parent.mkdir()
    lines = [{"arm": "ddtree-b32", "repeat": 2, "tok_per_s": 9.0}, {"arm": "dflash", "kind": "engine"}]
    plain.write_text("".join(json.dumps(line) + "\n" for line in lines))
    packed.with_name("records.jsonl.xz").write_bytes(lzma.compress(plain.read_bytes()))
    assert records.read_records(packed) == records.read_records(plain) != ({}, {})


def test_plots_are_written_as_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines, references=references())
    files, why_not = plots.write_plots(report, tmp_path)
    assert why_not is None
    assert sorted(p.name for p in files) == ["acceptance.png", "round_time.png", "speedup.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in files)


def test_plots_degrade_with_a_message_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    plan = small_plan(tmp_path)
    report = analysis.analyse(plan, *synthetic(plan))
    assert plots.write_plots(report, tmp_path) == ([], plots.MATPLOTLIB_MISSING)
    assert "pip install 'ddtree-overlay[bench]'" in plots.MATPLOTLIB_MISSING


def test_parity_counts_the_reference_over_the_cells_own_prompts(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    rows = [{"tokens": out, "tokens_per_round": NEW / 4, "new_tokens": NEW, "rounds": 4} for out in outputs()]
    rows += [{"tokens": [], "tokens_per_round": 1.0, "new_tokens": NEW, "rounds": NEW}] * 4  # not in the cell
    refs = references()
    refs["ddtree-b8"] = {"aggregate": {"tokens_per_round": 1.5}, "prompts": rows}
    report = analysis.analyse(plan, cells, engines, references=refs)
    row = {r["group"]: r for r in report["parity"]}["ddtree-b8"]
    assert row["reference_tokens_per_round"] == pytest.approx(NEW / 4) and row["status"] == "ok"


# --- DDTREE without overlap scheduling (--ddtree-no-overlap) -------------------------------


def no_overlap_run(tmp_path: Path) -> tuple[bp.SweepPlan, dict[str, dict], dict[str, dict]]:
    """Overlap on: DFLASH 200, DDTREE 308 / 332; off: 150 everywhere, except DDTREE B=8 at 400
    (T=0 bs=1) and DFLASH at 250 (T=0 bs=2), where the no-overlap mode wins."""
    plan = small_plan(tmp_path, ddtree_no_overlap=True)
    cells, engines = synthetic(plan)
    for name, rate in (("ddtree-b8-no-overlap/bs1/t0", 400.0), ("dflash-no-overlap/bs2/t0", 250.0)):
        cells[name, 1] |= {"tok_per_s": rate, "decode_s": PROMPTS * NEW / rate}
    return plan, cells, engines


def test_no_overlap_ddtree_arms_are_rows_of_their_own(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    arm = rows["ddtree-b8-no-overlap/bs1/t0"]
    assert (arm["group"], arm["budget"], arm["overlap"]) == ("ddtree-b8-no-overlap", 8, False)
    assert arm["algorithm"] == bp.DDTREE
    assert arm["speedup_vs_target"] == pytest.approx(4.0)
    assert arm["speedup_vs_dflash"] == pytest.approx(2.0)  # x DFLASH with overlap, as every row
    assert arm["profile"]["rounds"] == 4 and arm["lossless"]["passed"]
    assert rows["ddtree-b8/bs1/t0"]["tok_per_s"] == 308.0  # the twin keeps its own numbers
    assert report["config"]["ddtree_no_overlap"] is True and report["issues"] == []
    markdown = md.markdown_report(report)
    assert "| DDTREE B=8 (no overlap) | 400 (x4.00, x2.00 DFLASH) | 150 (x1.50, x0.75 DFLASH) |" in markdown
    assert "| DDTREE B=8 | 308 (x3.08, x1.54 DFLASH) |" in markdown
    assert "| DDTREE B=32 (no overlap) | 2 | 0 | 150 |" in markdown
    assert "DDTREE and DFLASH with and without overlap scheduling." in markdown


def test_speedup_summary_sets_each_algorithms_faster_mode_against_the_other(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    report = analysis.analyse(plan, cells, engines, references=references())
    columns = {(c["temperature"], c["batch_size"]): c for c in report["fastest_modes"]}
    assert sorted(columns) == [(0.0, 1), (0.0, 2), (1.0, 1), (1.0, 2)]
    bs1 = columns[(0.0, 1)]
    assert {k: bs1["dflash"][k] for k in ("group", "overlap", "tok_per_s")} == {"group": "dflash", "overlap": True, "tok_per_s": 200.0}
    per_budget = [(b["group"], b["tok_per_s"]) for b in bs1["budgets"]]
    assert per_budget == [("ddtree-b8-no-overlap", 400.0), ("ddtree-b32", 332.0)]
    assert bs1["best"]["group"] == "ddtree-b8-no-overlap" and bs1["best"]["speedup_vs_dflash"] == pytest.approx(2.0)
    bs2 = columns[(0.0, 2)]
    assert {k: bs2["dflash"][k] for k in ("group", "overlap", "tok_per_s")} == {
        "group": "dflash-no-overlap", "overlap": False, "tok_per_s": 250.0,
    }
    assert bs2["best"]["group"] == "ddtree-b32" and bs2["best"]["speedup_vs_dflash"] == pytest.approx(332 / 250)
    markdown = md.markdown_report(report)
    assert "## DDTREE against DFLASH, each in its faster scheduling mode" in markdown
    assert "| DFLASH | 200 | 250 no overlap | 200 | 200 |" in markdown
    assert "| DDTREE B=8 | 400 no overlap (x2.00) | 308 (x1.23) | 308 (x1.54) | 308 (x1.54) |" in markdown
    assert "| fastest DDTREE | B=8: 400 no overlap (x2.00) | B=32: 332 (x1.33) | B=32: 332 (x1.66) |" in markdown


def test_the_fastest_budget_per_batch_size_becomes_a_budget_schedule(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)  # T=0: bs 1 best B=8, bs 2 best B=32
    report = analysis.analyse(plan, cells, engines, references=references())
    assert report["recommended_schedule"] == {
        "schedule": "1:8,2:32", "measured_batch_sizes": [1, 2], "below_dflash": [],
    }
    markdown = md.markdown_report(report)
    assert "`--speculative-ddtree-budget-schedule 1:8,2:32`." in markdown
    assert "Nothing below batch size" not in markdown
    assert "worst case" not in markdown and not any("worst_case" in c for c in report["fastest_modes"])
    only_bs2 = analysis.analyse(small_plan(tmp_path, batch_sizes=(2,)), *synthetic(small_plan(tmp_path, batch_sizes=(2,))))
    assert only_bs2["recommended_schedule"]["schedule"] == "1:32"
    assert "Nothing below batch size 2 was measured: its budget is carried down to 1." in md.markdown_report(only_bs2)


def test_a_budget_whose_greedy_output_left_target_only_takes_no_schedule_step(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)  # T=0: bs 1 best B=8, bs 2 best B=32
    cells["ddtree-b32/bs2/t0", 1]["outputs"] = outputs({3: 5})  # margin 5.0: not bf16 noise
    report = analysis.analyse(plan, cells, engines, references=references())
    assert not next(r for r in report["cells"] if r["name"] == "ddtree-b32/bs2/t0")["lossless"]["passed"]
    assert report["recommended_schedule"]["schedule"] == "1:8"  # bs 2: B=8, the fastest left


def test_a_batch_size_where_even_the_fastest_budget_loses_to_dflash_is_named(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    for group in ("ddtree-b8", "ddtree-b8-no-overlap", "ddtree-b32", "ddtree-b32-no-overlap"):
        cells[f"{group}/bs2/t0", 1] |= {"tok_per_s": 100.0, "decode_s": PROMPTS * NEW / 100.0}
    report = analysis.analyse(plan, cells, engines, references=references())
    recommended = report["recommended_schedule"]
    assert recommended["below_dflash"] == [2]
    assert recommended["schedule"].startswith("1:8")
    assert "At batch size 2 even the fastest budget stays below DFLASH." in md.markdown_report(report)


def test_random_weights_recommend_no_schedule(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3-8b-random", scratch=tmp_path)
    plan = bp.plan_sweep(setting, bp.BenchConfig(
        budgets=(8, 32), batch_sizes=(1,), temperatures=(0.0,), max_new_tokens=NEW, prompts_per_cell=PROMPTS,
    ))
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines)
    assert report["fastest_modes"] and report["recommended_schedule"] is None
    assert "--speculative-ddtree-budget-schedule" not in md.markdown_report(report)


def test_speedup_summary_without_the_no_overlap_arms_says_ddtree_ran_one_mode(tmp_path: Path) -> None:
    plan = small_plan(tmp_path)
    cells, engines = synthetic(plan)
    report = analysis.analyse(plan, cells, engines, references=references())
    assert all(b["overlap"] for c in report["fastest_modes"] for b in c["budgets"])
    assert report["config"]["ddtree_no_overlap"] is False
    markdown = md.markdown_report(report)
    assert "DDTREE ran with overlap scheduling only (`--ddtree-no-overlap` adds the other mode)." in markdown
    assert "| fastest DDTREE | B=32: 332 (x1.66) |" in markdown


def test_speedup_summary_leaves_out_columns_without_both_algorithms(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    for name in ("dflash/bs1/t1", "dflash-no-overlap/bs1/t1"):
        cells[name, 1] = {"kind": "cell", "arm": name, "ok": False, "skipped": "time box"}
    for group in ("ddtree-b8", "ddtree-b8-no-overlap", "ddtree-b32", "ddtree-b32-no-overlap"):
        cells[f"{group}/bs2/t1", 1] = {"kind": "cell", "arm": f"{group}/bs2/t1", "ok": False, "skipped": "time box"}
    report = analysis.analyse(plan, cells, engines, references=references())
    assert [(c["temperature"], c["batch_size"]) for c in report["fastest_modes"]] == [(0.0, 1), (0.0, 2)]
    table = md.fastest_modes_table(report)
    fastest = f"| fastest DDTREE | B=8: 400 no overlap (x2.00) | B=32: 332 (x1.33) | {md.DASH} | {md.DASH} |"
    assert fastest in table.splitlines()
    assert all(line.endswith(f"| {md.DASH} | {md.DASH} |") for line in table.splitlines()[-2:])


def test_speedup_summary_says_how_much_of_the_acceptance_advantage_the_speedup_keeps(tmp_path: Path) -> None:
    """DDTREE B=8 without overlap: 400 tok/s at 2 rounds per prompt against DFLASH's 200 tok/s at
    4, i.e. x2.00 throughput for x2.00 acceptance (100 %); B=32: x1.66 for x2.00 (83 %)."""
    plan, cells, engines = no_overlap_run(tmp_path)
    for (name, _repeat), record in cells.items():
        if name.startswith("ddtree-") and name.endswith("/bs1/t0"):
            for meta in record["meta"]:
                meta["spec_verify_ct"] = 2
    report = analysis.analyse(plan, cells, engines, references=references())
    bs1 = next(c for c in report["fastest_modes"] if (c["temperature"], c["batch_size"]) == (0.0, 1))
    by_group = {b["group"]: b for b in bs1["budgets"]}
    assert by_group["ddtree-b8-no-overlap"]["acceptance_ratio"] == pytest.approx(2.0)
    assert by_group["ddtree-b8-no-overlap"]["speedup_per_acceptance"] == pytest.approx(1.0)
    assert by_group["ddtree-b32"]["speedup_per_acceptance"] == pytest.approx(332 / 200 / 2)
    row = next(line for line in md.fastest_modes_table(report).splitlines() if "speedup ÷ acceptance" in line)
    assert row.startswith("| fastest DDTREE: speedup ÷ acceptance ratio | 100% (x2.00 ÷ x2.00) |")
    # At bs 1 every wave is one request: the per-round ratio (what continuous batching sees) is
    # the tok/s ratio.
    for entry in bs1["budgets"]:
        assert entry["per_round_speedup"] == pytest.approx(entry["speedup_vs_dflash"])
    row = next(line for line in md.fastest_modes_table(report).splitlines() if "continuous batching" in line)
    assert row.startswith("| fastest DDTREE per round: acceptance ratio ÷ step ratio (continuous batching) | x2.00 (x2.00 ÷ x1.00) |")


def test_no_overlap_ddtree_arms_are_judged_against_their_budgets_reference(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    assert plan.group("ddtree-b8-no-overlap").arm.reference_key == "ddtree-b8"
    refs = references()
    refs["ddtree-b32"] = reference_for(NEW / 4 * 1.5)
    del refs["ddtree-b8"]
    report = analysis.analyse(plan, cells, engines, references=refs)
    parity = {row["group"]: row for row in report["parity"]}
    assert list(parity) == [g.name for g in plan.groups if g.arm.algorithm != bp.TARGET_ONLY]
    off = parity["ddtree-b32-no-overlap"]
    assert off["status"] == "off" and off["budget"] == 32 and off["cell"] == "ddtree-b32-no-overlap/bs1/t0"
    assert off["reference_tokens_per_round"] == parity["ddtree-b32"]["reference_tokens_per_round"] == NEW / 4 * 1.5
    assert parity["ddtree-b8-no-overlap"]["status"] == "missing"
    assert any(i.startswith("ddtree-b32-no-overlap: tokens per round 2.250") for i in report["issues"])
    assert any(i.startswith("ddtree-b8-no-overlap: no offline reference") for i in report["issues"])


def test_a_wrong_greedy_output_of_a_no_overlap_ddtree_arm_is_an_issue(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    cells["ddtree-b32-no-overlap/bs1/t0", 1]["outputs"] = outputs({0: 4})
    report = analysis.analyse(plan, cells, engines, references=references())
    assert [i.split(":")[0] for i in report["issues"]] == ["ddtree-b32-no-overlap/bs1/t0"]
    assert {r["name"]: r for r in report["cells"]}["ddtree-b32/bs1/t0"]["lossless"]["passed"]


def test_plots_draw_the_no_overlap_ddtree_arms_as_their_own_series(tmp_path: Path) -> None:
    plan, cells, engines = no_overlap_run(tmp_path)
    report = analysis.analyse(plan, cells, engines, references=references())
    assert plots._series(report["cells"], "tok_per_s", overlap=False)[(0.0, 1)] == [(8, 400.0), (32, 150.0)]
    assert plots._series(report["cells"], "tok_per_s")[(0.0, 1)] == [(8, 308.0), (32, 332.0)]
    assert plots._flat(report["cells"], bp.DFLASH, "tok_per_s", overlap=False)[(0.0, 2)] == 250.0
    pytest.importorskip("matplotlib")
    files, why_not = plots.write_plots(report, tmp_path)
    assert why_not is None
    assert sorted(p.name for p in files) == ["acceptance.png", "round_time.png", "speedup.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in files)


def analysed_with_policy_arm(
    plan: bp.SweepPlan, cell: str, rate: float, budgets: dict[str, int], policy_views=None
) -> dict:
    """`synthetic`, with ``cell`` (of an adaptive or schedule arm) at ``rate`` tok/s and its
    engine's profile windows counting ``budgets`` rounds per budget (and holding the adaptive
    policy's ``policy_views``, one per window, when given)."""
    cells, engines = synthetic(plan)
    set_rate(cells, cell, 1, rate)
    for i, window in enumerate(engines[cell.split("/")[0], 1]["profile"]):
        window["budgets"] = budgets
        if policy_views:
            window["adaptive"] = policy_views[min(i, len(policy_views) - 1)]
    return analysis.analyse(plan, cells, engines, references=references())


def test_an_adaptive_budget_arm_is_compared_like_a_budget_but_recommends_no_schedule_step(tmp_path: Path) -> None:
    """Adaptive 8/32 at 300 tok/s, except 500 at T=0 bs=2: the fastest DDTREE arm there; the
    schedule still comes from the fixed budgets (B=32 at 332 in both T=0 columns)."""
    plan = small_plan(tmp_path, adaptive_budgets=(8, 32))
    early = {"round_ms": {"2": {"8": 1.0}}, "gap_ms": {}, "choice": {}, "phi": None, "scale": 1.0}
    late = {
        "round_ms": {"2": {"8": 1.0, "32": 1.25}},
        "gap_ms": {"2": 0.5},
        "choice": {"2": 32},
        "phi": [3.0, 5.5],
        "scale": 0.8,
    }
    report = analysed_with_policy_arm(
        plan, "ddtree-adaptive-8-32/bs2/t0", 500.0, {"32": 3, "8": 1}, policy_views=[early, late]
    )
    rows = {r["name"]: r for r in report["cells"]}
    assert rows["ddtree-adaptive-8-32/bs2/t0"]["adaptive"] == [8, 32]
    assert rows["ddtree-adaptive-8-32/bs2/t0"]["speedup_vs_dflash"] == pytest.approx(2.5)
    bs2 = next(c for c in report["fastest_modes"] if (c["temperature"], c["batch_size"]) == (0.0, 2))
    assert [b["group"] for b in bs2["budgets"]] == ["ddtree-b8", "ddtree-b32", "ddtree-adaptive-8-32"]
    assert bs2["best"]["group"] == "ddtree-adaptive-8-32"
    assert report["recommended_schedule"]["schedule"] == "1:32"
    assert "ddtree-adaptive-8-32" not in {row["group"] for row in report["parity"]}  # no offline reference
    assert report["issues"] == []
    markdown = md.markdown_report(report)
    assert "| DDTREE adaptive 8/32 | 300 (x3.00, x1.50 DFLASH) | 500 (x5.00, x2.50 DFLASH) |" in markdown
    assert "| DDTREE adaptive 8/32 | 300 (x1.50) | 500 (x2.50) |" in markdown
    assert "| fastest DDTREE | B=32: 332 (x1.66) | adaptive 8/32: 500 (x2.50) |" in markdown
    assert rows["ddtree-adaptive-8-32/bs2/t0"]["profile"]["budgets"] == {"8": 1, "32": 3}
    assert "- ddtree-adaptive-8-32/bs2/t0: B=8: 1, B=32: 3" in markdown
    assert (  # the view of the last window in the cell
        "  - policy at the cell's end: bs 2: round ms 8:1.00 32:1.25 + gap 0.50 -> B=32; "
        "Φ̄ 3.00/5.50; c 0.80" in markdown
    )
    assert plots._series(report["cells"], "tok_per_s")[(0.0, 2)] == [(8, 308.0), (32, 332.0)]
    assert plots._flat(report["cells"], bp.DDTREE, "tok_per_s", policy="adaptive 8/32")[(0.0, 2)] == 500.0
    pytest.importorskip("matplotlib")
    files, why_not = plots.write_plots(report, tmp_path)
    assert why_not is None and len(files) == 3


def test_a_schedule_arm_is_compared_like_a_budget_after_the_adaptive_one(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, adaptive_budgets=(8, 32), budget_schedule=((1, 32), (2, 8)))
    assert plan.groups[-1].engine["speculative_ddtree_budget_schedule"] == "1:32,2:8"
    report = analysed_with_policy_arm(plan, "ddtree-schedule-1x32-2x8/bs1/t0", 450.0, {"32": 2, "8": 2})
    rows = {r["name"]: r for r in report["cells"]}
    assert rows["ddtree-schedule-1x32-2x8/bs1/t0"]["schedule"] == "1:32,2:8"
    assert policy_label(rows["ddtree-schedule-1x32-2x8/bs1/t0"]) == "schedule 1:32,2:8"
    bs1 = next(c for c in report["fastest_modes"] if (c["temperature"], c["batch_size"]) == (0.0, 1))
    assert [b["group"] for b in bs1["budgets"]] == [
        "ddtree-b8", "ddtree-b32", "ddtree-adaptive-8-32", "ddtree-schedule-1x32-2x8",
    ]
    assert bs1["best"]["group"] == "ddtree-schedule-1x32-2x8"
    assert report["recommended_schedule"]["schedule"] == "1:32"  # fixed budgets only
    assert "ddtree-schedule-1x32-2x8" not in {row["group"] for row in report["parity"]}
    assert report["config"]["budget_schedule"] == "1:32,2:8" and report["issues"] == []
    markdown = md.markdown_report(report)
    assert "| DDTREE schedule 1:32,2:8 | 450 (x2.25) | 300 (x1.50) |" in markdown
    assert "| fastest DDTREE | schedule 1:32,2:8: 450 (x2.25) | B=32: 332 (x1.66) |" in markdown
    assert "- ddtree-schedule-1x32-2x8/bs1/t0: B=8: 2, B=32: 2" in markdown
    assert plots._flat(report["cells"], bp.DDTREE, "tok_per_s", policy="schedule 1:32,2:8")[(0.0, 1)] == 450.0
    pytest.importorskip("matplotlib")
    files, why_not = plots.write_plots(report, tmp_path)
    assert why_not is None and len(files) == 3


# --- repeats (--repeats N) ------------------------------------------------------------------


def set_rate(cells: dict, name: str, repeat: int, rate: float) -> None:
    cells[name, repeat] |= {"tok_per_s": rate, "decode_s": PROMPTS * NEW / rate}


def repeats_run(tmp_path: Path, repeats: int = 3) -> tuple[bp.SweepPlan, dict, dict]:
    """As `synthetic`, except DFLASH at T=0 bs=1 runs 150, 210, 200 tok/s in repeats 1-3 and
    DDTREE B=8 there 300, 340, 320: medians 200 and 320."""
    plan = small_plan(tmp_path, repeats=repeats)
    cells, engines = synthetic(plan)
    for repeat, (dflash, ddtree) in enumerate(((150.0, 300.0), (210.0, 340.0), (200.0, 320.0))[:repeats], 1):
        set_rate(cells, "dflash/bs1/t0", repeat, dflash)
        set_rate(cells, "ddtree-b8/bs1/t0", repeat, ddtree)
    return plan, cells, engines


def test_a_cells_throughput_is_the_median_over_its_repeats(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path)
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    dflash, ddtree = rows["dflash/bs1/t0"], rows["ddtree-b8/bs1/t0"]
    assert dflash["tok_per_s"] == 200.0 and ddtree["tok_per_s"] == 320.0
    assert [(e["repeat"], e["status"], e["tok_per_s"]) for e in dflash["repeats"]] == [
        (1, "ok", 150.0), (2, "ok", 210.0), (3, "ok", 200.0),
    ]
    assert dflash["measured_repeats"] == 3 and dflash["median_repeat"] == 3
    steps = [e["step_ms"] for e in dflash["repeats"]]
    assert dflash["step_ms"] == sorted(steps)[1] and len(set(steps)) == 3
    assert dflash["decode_s"] == pytest.approx(PROMPTS * NEW / 200)  # the median repeat's
    assert ddtree["speedup_vs_dflash"] == pytest.approx(1.6) and ddtree["speedup_vs_target"] == pytest.approx(3.2)
    bs1 = next(c for c in report["fastest_modes"] if (c["temperature"], c["batch_size"]) == (0.0, 1))
    assert bs1["dflash"]["tok_per_s"] == 200.0
    assert next(b for b in bs1["budgets"] if b["budget"] == 8)["speedup_vs_dflash"] == pytest.approx(1.6)
    assert plots._series(report["cells"], "tok_per_s")[(0.0, 1)] == [(8, 320.0), (32, 332.0)]  # the plots' data
    assert report["config"]["repeats"] == 3 and report["issues"] == []
    assert all(r["lossless"]["passed"] for r in rows.values() if r["temperature"] == 0 and "lossless" in r)
    assert [e["lossless_passed"] for e in ddtree["repeats"]] == [True, True, True]
    markdown = md.markdown_report(report)
    assert "- **Repeats**: the engine groups ran 3 times, in rounds" in markdown
    assert "target-only, the correctness reference, ran once (round 1)" in markdown
    assert "| DFLASH | 200 | 200 | 200 | 200 |" in markdown  # the throughput table: medians
    assert "| arm | bs | T | tok/s | tok/s per repeat | x target |" in markdown
    assert "| DFLASH | 1 | 0 | 200 | 150, 210, 200 | 2.00 |" in markdown
    assert "| DDTREE B=8 | 1 | 0 | 320 | 300, 340, 320 | 3.20 | 1.60 |" in markdown
    assert "| engine | repeat | status | start s | health |" in markdown
    assert "| dflash | 2 | ok | 40.0 | ok |" in markdown
    # B=32 (332 in every repeat) is the fastest arm; DFLASH's fastest repeat is 210 (repeat 2).
    assert bs1["worst_case"] == {"ddtree_tok_per_s": 332.0, "dflash_tok_per_s": 210.0,
                                 "speedup_vs_dflash": pytest.approx(332 / 210)}
    assert "| fastest DDTREE, worst case: its slowest repeat ÷ DFLASH's fastest | x1.58 (332 ÷ 210) |" in markdown
    spread = next(n for n in report["notes"] if n.startswith("the repeats of"))
    assert spread == ("the repeats of 2 cell(s) differ by more than 10% in tok/s (engine-to-engine spread: "
                      "quote the worst case): dflash/bs1/t0 (1.40x), ddtree-b8/bs1/t0 (1.13x)")


def test_two_repeats_give_the_mean_of_the_two(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path, repeats=2)
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["dflash/bs1/t0"]
    assert row["tok_per_s"] == 180.0 and row["median_repeat"] == 1  # of the two middle ones, the slower


def test_a_repeat_that_failed_fails_the_cell_and_its_engine(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path)
    cells["ddtree-b8/bs1/t0", 2] = {"kind": "cell", "arm": "ddtree-b8/bs1/t0", "repeat": 2, "ok": False,
                                    "error": "RuntimeError: boom"}
    engines["ddtree-b8", 2] |= {"ok": False, "error": "RuntimeError: boom"}
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["ddtree-b8/bs1/t0"]
    assert row["status"] == "failed" and row["reason"] == "repeat 2: RuntimeError: boom"
    assert [e["status"] for e in row["repeats"]] == ["ok", "failed", "ok"] and row["measured_repeats"] == 2
    assert row.get("speedup_vs_dflash") is None
    group = {g["name"]: g for g in report["groups"]}["ddtree-b8"]
    assert group["status"] == "failed" and group["reason"] == "repeat 2: RuntimeError: boom"
    assert [r["status"] for r in group["repeats"]] == ["ok", "failed", "ok"]
    assert "ddtree-b8/bs1/t0 (repeat 2): RuntimeError: boom" in report["issues"]
    assert "ddtree-b8 (repeat 2): the engine failed: RuntimeError: boom" in report["issues"]
    markdown = md.markdown_report(report)
    assert "| DDTREE B=8 | failed |" in markdown
    assert "| DDTREE B=8 | 1 | 0 | failed: repeat 2: RuntimeError: boom | 300, failed, 320 |" in markdown


def test_greedy_outputs_of_every_repeat_are_judged(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path)
    cells["ddtree-b32/bs2/t0", 3]["outputs"] = outputs({3: 5})  # margin 5.0: a bug, in repeat 3 only
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["ddtree-b32/bs2/t0"]
    assert row["status"] == "ok" and [e["lossless_passed"] for e in row["repeats"]] == [True, True, False]
    assert not row["lossless"]["passed"] and row["lossless"]["repeat"] == 3
    assert report["issues"] == [
        "ddtree-b32/bs2/t0 (repeat 3): 1 of 4 prompts leave target-only greedy output beyond bf16 noise "
        "(largest top1-top2 margin 5.000 at token 5)"
    ]
    assert "| 3/4, first at 5 (margin 5.000) in repeat 3 |" in md.markdown_report(report)


def test_parity_is_checked_on_every_repeat(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path)
    for meta in cells["ddtree-b32/bs1/t0", 2]["meta"]:
        meta["spec_verify_ct"] = 6  # 1.5 tokens per round where the reference has 2.25
    report = analysis.analyse(plan, cells, engines, references=references())
    parity = {row["group"]: row for row in report["parity"]}
    off = parity["ddtree-b32"]
    assert off["status"] == "off" and off["repeat"] == 2 and off["ratio"] == pytest.approx(1.5 / 2.25)
    assert [r["ratio"] for r in off["ratios"]] == pytest.approx([1.0, 1.5 / 2.25, 1.0])
    assert parity["ddtree-b8"]["status"] == "ok" and parity["ddtree-b8"]["repeat"] == 1
    assert any(i.startswith("ddtree-b32 (repeat 2): tokens per round 1.500") for i in report["issues"])
    assert "| 0.667 (repeat 2; each: 1.000, 0.667, 1.000) |" in md.markdown_report(report)


def test_cells_short_of_repeats_keep_the_median_of_those_measured(tmp_path: Path) -> None:
    """The time box cut round 3 after DDTREE B=32's engine: every later run of it skipped."""
    plan, cells, engines = repeats_run(tmp_path)
    round_3 = [r.group.name for r in plan.runs if r.repeat == 3]
    assert round_3 == ["dflash", "dflash-no-overlap", "ddtree-b32", "ddtree-b8"]  # target-only: round 1 only
    cut = [r for r in plan.runs if r.repeat == 3][round_3.index("ddtree-b32") + 1:]
    assert [r.group.name for r in cut] == ["ddtree-b8"]
    for run in cut:
        engines[run.group.name, 3] = {"kind": "engine", "arm": run.group.name, "repeat": 3, "ok": False,
                                      "skipped": "time box"}
        for cell in run.cells:
            cells[cell.name, 3] = {"kind": "cell", "arm": cell.name, "repeat": 3, "ok": False, "skipped": "time box"}
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    row = rows["ddtree-b8/bs1/t0"]
    assert row["status"] == "ok" and row["measured_repeats"] == 2 and row["tok_per_s"] == 320.0
    assert [e["status"] for e in row["repeats"]] == ["ok", "ok", "skipped"]
    assert rows["ddtree-b32/bs1/t0"]["measured_repeats"] == 3
    assert rows["dflash-no-overlap/bs1/t0"]["measured_repeats"] == 3  # runs before any DDTREE engine
    assert rows["target-only/bs1/t0"]["measured_repeats"] == 1  # all it was planned for
    assert report["issues"] == []
    (note,) = (n for n in report["notes"] if "fewer than" in n)
    # ddtree-b8's 4 cells (bs 1 and 2 at T = 0 and 1), each against its own planned repeats: not
    # target-only's, measured in the one repeat it runs in
    assert note.startswith("4 cell(s) measured in fewer than their planned repeats")
    assert note.endswith(
        "repeats measured: ddtree-b8/bs1/t0 (2 of 3), ddtree-b8/bs2/t0 (2 of 3), ddtree-b8/bs1/t1 (2 of 3), "
        "ddtree-b8/bs2/t1 (2 of 3)"
    )
    assert "target-only" not in note and "dflash" not in note and "ddtree-b32" not in note
    assert "| DDTREE B=8 | 1 | 0 | 320 | 300, 340, \u2013 |" in md.markdown_report(report)
    assert {g["name"]: g["status"] for g in report["groups"]}["ddtree-b8"] == "ok"


def test_the_host_during_each_cell_and_repeat_is_tabled(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path, repeats=2)
    processes = [
        {"pid": 7, "comm": "sglang::schedul", "cpu_per_wall": 0.97, "cpus": "0-15", "last_cpu": 3, "core": "0/3"},
        {"pid": 8, "comm": "sglang::detoken", "cpu_per_wall": 0.31, "cpus": "0-15", "last_cpu": 11, "core": "0/3"},
        {"pid": 9, "comm": "python3", "cpu_per_wall": 0.01, "cpus": "0-15", "last_cpu": 5, "core": "0/5"},
    ]
    others = [{"pid": 30, "comm": "python3", "cpu_per_wall": 4.2}, {"pid": 31, "comm": "ptxas", "cpu_per_wall": 0.9}]
    for repeat, (load, busy) in enumerate(((4.0, 6.5), (0.5, 1.2)), 1):
        cells["dflash/bs1/t0", repeat]["host"] = {
            "load1": [load, load + 1], "busy_cores": busy, "cpus": 16, "processes": processes,
            **({"others": others} if repeat == 1 else {}),  # records before others were sampled lack it
        }
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["dflash/bs1/t0"]
    assert [e["host"]["busy_cores"] for e in row["repeats"]] == [6.5, 1.2]
    lines = md.host_table(report).splitlines()
    assert lines[0].startswith("| cell | repeat | tok/s | wall ms/step | load (1 min) | busy cores | busy engine")
    assert len(lines) == 4  # head, rule, one line per repeat that recorded its host
    assert lines[2].startswith("| dflash/bs1/t0 | 1 | 150 | ")
    assert lines[2].endswith(
        "| 4.00 → 5.00 | 6.50 of 16 | sglang::schedul 0.97 on CPU 3 (core 0/3); "
        "sglang::detoken 0.31 on CPU 11 (core 0/3) | python3 4.20; ptxas 0.90 | 0-15 |"
    )
    assert lines[3].endswith("(core 0/3) | \u2013 | 0-15 |")
    assert "## The host during each cell" in md.markdown_report(report)
    plain = analysis.analyse(*repeats_run(tmp_path / "plain", repeats=1), references=references())
    assert md.host_table(plain) is None and "## The host during" not in md.markdown_report(plain)


def test_a_parity_row_off_the_reference_or_without_one_is_an_issue() -> None:
    from ddtree_overlay.bench.correctness import parity_issue

    off = {"group": "ddtree-b32", "status": "off", "repeat": 2, "sglang_tokens_per_round": 4.0,
           "reference_tokens_per_round": 5.0, "ratio": 0.8}
    assert parity_issue(off, 2) == (
        "ddtree-b32 (repeat 2): tokens per round 4.000 against the offline reference's 5.000 (x0.800, tolerance +-10%)"
    )
    older = {k: v for k, v in off.items() if k != "repeat"}  # reports before --repeats
    assert parity_issue(older, 1).startswith("ddtree-b32: tokens per round 4.000")
    assert parity_issue({"group": "dflash", "status": "missing", "reason": "no file"}, 1) == (
        "dflash: no offline reference to compare with (no file)"
    )
    assert parity_issue({"group": "dflash", "status": "ok"}, 1) is None


# --- requests served at once (bench.capacity) -------------------------------------------------


def test_a_wave_wider_than_the_engine_serves_counts_the_steps_of_its_queued_requests(tmp_path: Path) -> None:
    # A bs 2 wave on an engine that runs one request at once decodes one request after the
    # other: twice the steps, so half the wall ms per step of a wave counted as one.
    plan = small_plan(tmp_path, only=("dflash", "ddtree-b8"))
    cells, engines = synthetic(plan)
    engines[("dflash", 1)]["requests_at_once"] = 1
    rows = {r["name"]: r for r in analysis.analyse(plan, cells, engines)["cells"]}
    capped, served = rows["dflash/bs2/t0"], rows["ddtree-b8/bs2/t0"]
    assert capped["steps"] == PROMPTS * 4 and served["steps"] == PROMPTS // 2 * 4
    assert capped["step_ms"] == pytest.approx(1000 * capped["decode_s"] / (PROMPTS * 4))
    assert (capped["running"], served["running"]) == (1, 2)
    assert analysis.step_ratio(served, capped) == pytest.approx((served["step_ms"] / 2) / capped["step_ms"])
    assert rows["dflash/bs1/t0"]["steps"] == PROMPTS * 4  # one at a time either way
    assert (capped["at_once"], served["at_once"]) == (1, 2)
    assert analysis.capped(served, capped) and not analysis.capped(served, rows["dflash/bs1/t0"])
    report = analysis.analyse(plan, cells, engines)
    bs2 = next(c for c in report["fastest_modes"] if c["batch_size"] == 2)["best"]
    assert bs2["step_ratio_at_cap"] == pytest.approx(analysis.step_ratio(served, capped, at_cap=True))
    row = next(line for line in md.fastest_modes_table(report).splitlines() if "continuous batching" in line)
    assert f"; at the caps x{bs2['per_round_speedup_at_cap']:.2f} (÷ x{bs2['step_ratio_at_cap']:.2f}) |" in row


def test_each_ddtree_engine_names_the_paths_its_profile_windows_say_it_ran(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, repeats=2, only=("dflash", "ddtree-b8"))
    cells, engines = synthetic(plan)
    assert "DDTREE paths" not in md.markdown_report(analysis.analyse(plan, cells, engines))  # older payloads
    for (name, repeat), engine in engines.items():
        if name == "ddtree-b8":
            state = "flat" if repeat == 1 else "snapshot"
            for window in engine["profile"]:
                window["paths"] = {"verify_attention": "splitkv", "hybrid_state": state}
    report = analysis.analyse(plan, cells, engines)
    group = {g["name"]: g for g in report["groups"]}["ddtree-b8"]
    assert [r["paths"]["hybrid_state"] for r in group["repeats"]] == ["flat", "snapshot"]
    table = md.markdown_report(report).split("## Engines")[1].split("## ")[0].splitlines()
    assert "| engine | repeat | status | start s | health | DDTREE paths |" in table
    assert "| ddtree-b8 | 1 | ok | 40.0 | ok | split-KV verify, flat state |" in table
    assert "| ddtree-b8 | 2 | ok | 40.0 | ok | split-KV verify, snapshots |" in table
    assert "| dflash | 1 | ok | 40.0 | ok | \u2013 |" in table
    assert paths_text({"verify_attention": "full-mask"}) == "FULL-mask verify"
    assert paths_text({"verify_attention": "splitkv", "draft_attention": "splitkv"}) == "split-KV verify, split-KV draft"
    assert paths_text({"verify_attention": "tiled"}) == "verify_attention tiled"  # a newer payload's word


def test_at_the_caps_a_capped_engine_counts_its_steps_per_request_its_cap_lets_run() -> None:
    # DFLASH ran a wave of 16 as 11 and then the 5 it queued: 8 running on average. Its cost
    # per request serving a stream at its cap is step / 8 if the 5-wide steps cost 5/11 of a
    # full one, step / 11 if they cost as much: the range's two ends.
    dflash = {"batch_size": 16, "step_ms": 38.0, "running": 8.0, "at_once": 11}
    ddtree = {"batch_size": 16, "step_ms": 56.0, "running": 16.0, "at_once": 16}
    assert analysis.step_ratio(ddtree, dflash) == pytest.approx((56 / 16) / (38 / 8))
    assert analysis.step_ratio(ddtree, dflash, at_cap=True) == pytest.approx((56 / 16) / (38 / 11))
    older = {"batch_size": 16, "step_ms": 38.0}  # reports before the served cap was recorded
    assert analysis.step_ratio(ddtree, older, at_cap=True) == analysis.step_ratio(ddtree, older) == pytest.approx(56 / 38)
    assert not analysis.capped(ddtree, older)


def test_each_engine_shows_the_requests_it_served_at_once_and_a_note_where_fewer_than_asked(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, repeats=2, only=("dflash", "ddtree-b8"))
    cells, engines = synthetic(plan)
    assert "requests at once" not in md.markdown_report(analysis.analyse(plan, cells, engines))  # none recorded
    for (name, repeat), engine in engines.items():
        engine["requests_at_once"] = 1 if (name, repeat) == ("dflash", 2) else 2
    report = analysis.analyse(plan, cells, engines)
    groups = {g["name"]: g for g in report["groups"]}
    assert [r["requests_at_once"] for r in groups["dflash"]["repeats"]] == [2, 1]
    assert groups["dflash"]["widest_batch"] == 2
    table = md.markdown_report(report).split("## Engines")[1].split("## ")[0].splitlines()
    assert "| engine | repeat | status | start s | requests at once | health |" in table
    assert "| dflash | 2 | ok | 40.0 | 1 | ok |" in table and "| ddtree-b8 | 1 | ok | 40.0 | 2 | ok |" in table
    engines[("dflash", 2)]["warm_up_s"] = 124.0  # where first-use compiles land; not recorded before 2026-12-04
    table = md.markdown_report(analysis.analyse(plan, cells, engines)).split("## Engines")[1].split("## ")[0].splitlines()
    assert "| engine | repeat | status | start s | warm-up s | requests at once | health |" in table
    assert "| dflash | 2 | ok | 40.0 | 124.0 | 1 | ok |" in table and "| dflash | 1 | ok | 40.0 | \u2013 | 2 | ok |" in table
    notes = [line for line in table if line.startswith("- ")]
    assert notes == [
        "- DFLASH served at most 1 of 2 requests at once: its KV cache fills the memory; its cells wider than 1 "
        "queued the rest"
    ]


def test_the_policy_view_orders_batch_sizes_and_their_grammar_tables_by_number() -> None:
    from ddtree_overlay.bench.policy_markdown import policy_view

    view = {
        "round_ms": {"16 grammar 4": {"8": 5.9}, "16": {"8": 1.1, "32": 1.3}, "2": {"8": 1.0}, "16 grammar 1": {"8": 2.7}},
        "gap_ms": {"16": 0.5, "16 grammar 4": 0.6},
        "choice": {"16": 32, "16 grammar 4": 8},
        "phi": None,
        "scale": 1.0,
    }
    assert policy_view(view) == (
        "bs 2: round ms 8:1.00; bs 16: round ms 8:1.10 32:1.30 + gap 0.50 -> B=32; "
        "bs 16 grammar 1: round ms 8:2.70; bs 16 grammar 4: round ms 8:5.90 + gap 0.60 -> B=8; c 1.00"
    )
