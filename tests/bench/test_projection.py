from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtree_overlay.bench import acceptance_curve as ac
from ddtree_overlay.bench import markdown as md
from ddtree_overlay.bench import projection as pj

ROOT = Path(__file__).resolve().parents[2]
CURVE = ac.AcceptanceCurve("test", "here", chain=4.0, budgets={16: 5.0, 64: 6.0})


def cell(algorithm, bs, step_ms, *, budget=None, overlap=True, tokens_per_round=1.0, tok_per_s=100.0, **fields):
    name = f"{algorithm.lower()}-{budget or ''}{'' if overlap else '-no-overlap'}/bs{bs}/t0"
    return {
        "name": name, "algorithm": algorithm, "budget": budget, "adaptive": [], "schedule": "", "overlap": overlap,
        "batch_size": bs, "temperature": 0.0, "status": "ok", "step_ms": step_ms,
        "tokens_per_round": tokens_per_round, "tok_per_s": tok_per_s, **fields,
    }


def run(*cells, real_weights=False):
    return {"setting": {"name": "qwen3-8b-random", "real_weights": real_weights}, "cells": list(cells)}


def test_tau_is_interpolated_in_log2_budget_and_never_extrapolated():
    assert CURVE.tau(16) == 5.0 and CURVE.tau(64) == 6.0
    assert CURVE.tau(32) == pytest.approx(5.5)  # halfway between 16 and 64 in log2
    assert CURVE.tau(8) is None and CURVE.tau(128) is None


def test_the_speedup_is_the_tau_ratio_over_the_cost_ratio():
    assert CURVE.speedup(CURVE.chain * 1.5, 1.2) == pytest.approx(1.25)
    assert CURVE.break_even_tau(1.2) == pytest.approx(CURVE.chain * 1.2)
    assert CURVE.speedup(None, 1.2) is None and CURVE.speedup(6.0, None) is None


def test_projection_is_the_acceptance_ratio_over_the_step_ratio_per_batch_size():
    report = run(
        cell("DFLASH", 1, 10.0), cell("DFLASH", 1, 8.0, overlap=False),  # the faster mode: 8 ms
        cell("DDTREE", 1, 9.0, budget=16), cell("DDTREE", 1, 8.8, budget=16, overlap=False),
        cell("DDTREE", 1, 12.0, budget=64, profile={"ms_per_round": {"verify": 7.0, "draft": 1.5}}),
        cell("DDTREE", 1, 6.0, budget=8),  # off the curve: no projection, however fast
        cell("DFLASH", 16, 20.0), cell("DDTREE", 16, 30.0, budget=16),
        cell("DDTREE", 16, 25.0, budget=16, adaptive=[16, 64]),  # adaptive: not a fixed budget
    )
    projection = pj.project(report, CURVE)
    bs1, bs16 = projection["columns"]
    by_budget = {b["budget"]: b for b in bs1["budgets"]}
    assert bs1["dflash"] == {"step_ms": 8.0, "overlap": False}
    assert by_budget[16]["overlap"] is False and by_budget[16]["speedup_vs_dflash"] == pytest.approx(5 / 4 / (8.8 / 8))
    assert by_budget[64]["speedup_vs_dflash"] == pytest.approx(6 / 4 / (12 / 8))
    assert by_budget[64]["stages_ms"] == {"verify": 7.0, "draft": 1.5}
    assert by_budget[8]["speedup_vs_dflash"] is None and by_budget[8]["break_even_tau"] == pytest.approx(4 * 6 / 8)
    assert bs1["best"]["budget"] == 16
    assert bs16["best"]["speedup_vs_dflash"] == pytest.approx(5 / 4 / 1.5)
    text = pj.projection_markdown(projection)
    assert text.startswith("**A projection, not a measurement.**")
    assert "| 1 | 16, no overlap | 8.80 | 8.00, no overlap | 1.100 |" in text
    assert all(assumption in text for assumption in pj.ASSUMPTIONS)
    assert "--budgets 8,16,64 --batch-sizes 1,16" in text


def test_a_capped_dflash_is_projected_at_both_ends_of_its_cost_per_request():
    dflash = cell("DFLASH", 16, 40.0, running=8.0, at_once=11)  # 11 at once, then the 5 queued
    ddtree = cell("DDTREE", 16, 60.0, budget=16, running=16.0, at_once=16)
    entry = pj.project(run(dflash, ddtree), CURVE)["columns"][0]["budgets"][0]
    assert entry["step_ratio"] == pytest.approx((60 / 16) / (40 / 8))
    assert entry["step_ratio_at_cap"] == pytest.approx((60 / 16) / (40 / 11))
    assert entry["speedup_at_cap"] == pytest.approx(5 / 4 / entry["step_ratio_at_cap"])
    assert entry["break_even_tau_at_cap"] == pytest.approx(4 * entry["step_ratio_at_cap"])
    text = pj.projection_markdown(pj.project(run(dflash, ddtree), CURVE))
    assert "| 16 | 16 | 60.00 | 40.00 | 0.750 (1.031 at the caps) |" in text
    assert "| 3.00 (4.12) | **x1.67** (x1.21) |" in text
    uncapped = pj.project(run(cell("DFLASH", 16, 40.0), cell("DDTREE", 16, 60.0, budget=16)), CURVE)
    assert "step_ratio_at_cap" not in uncapped["columns"][0]["budgets"][0]


def test_the_arm_projected_is_the_cheapest_per_request_not_per_step():
    """A capped engine runs narrower steps: cheaper each, dearer per request. DFLASH on its first
    backend serves 11 of 16 at once, on triton all 16; B = 16 with overlap is capped at 8."""
    report = run(
        cell("DFLASH", 16, 38.0, running=8.0, at_once=11), cell("DFLASH", 16, 45.0, running=16.0, at_once=16, backend="triton"),
        cell("DDTREE", 16, 30.0, budget=16, running=8.0, at_once=8),
        cell("DDTREE", 16, 48.0, budget=16, overlap=False, running=16.0, at_once=16),
    )
    column = pj.project(report, CURVE)["columns"][0]
    assert column["dflash"] == {"step_ms": 45.0, "overlap": True, "backend": "triton"}
    (entry,) = column["budgets"]
    assert (entry["step_ms"], entry["overlap"]) == (48.0, False)
    assert entry["step_ratio"] == pytest.approx((48 / 16) / (45 / 16))
    assert "step_ratio_at_cap" not in entry  # neither arm projected was capped
    assert "| 16 | 16, no overlap | 48.00 | 45.00 on triton | 1.067 |" in pj.projection_markdown(pj.project(report, CURVE))


def test_the_paper_curve_on_another_shape_says_so():
    cells = (cell("DFLASH", 1, 8.0), cell("DDTREE", 1, 8.0, budget=32))
    assert pj.project(run(*cells), ac.PAPER_QWEN3_8B)["assumptions"] == list(pj.ASSUMPTIONS)
    other = run(*cells) | {"setting": {"name": "qwen3.6-27b-random", "real_weights": False}}
    assumptions = pj.project(other, ac.PAPER_QWEN3_8B)["assumptions"]
    assert assumptions[-1].startswith("this run's shape is qwen3.6-27b-random, the curve's model Qwen3-8B")
    assert pj.project(other, CURVE)["assumptions"] == list(pj.ASSUMPTIONS)  # a curve given for it


def test_no_projection_without_both_algorithms():
    assert pj.project(run(cell("DFLASH", 1, 8.0)), CURVE) is None
    assert pj.default_curve(run(real_weights=True)) is None
    assert pj.default_curve(run()) is ac.PAPER_QWEN3_8B


def test_curves_load_from_json_csv_and_a_real_pairs_report(tmp_path: Path):
    (tmp_path / "c.json").write_text(json.dumps({"name": "27B", "dflash": 5.1, "budgets": {"16": 5.5, "32": 5.9}}))
    curve = ac.load_curve(tmp_path / "c.json")
    assert (curve.name, curve.chain, dict(curve.budgets)) == ("27B", 5.1, {16: 5.5, 32: 5.9})
    (tmp_path / "c.csv").write_text("budget,acceptance\n16,5.5\n32,5.9\ndflash,5.1\n")
    assert ac.load_curve(tmp_path / "c.csv").budgets == {16: 5.5, 32: 5.9}
    measured = run(
        cell("DFLASH", 1, 3.0, tokens_per_round=4.0, tok_per_s=1000), cell("DFLASH", 1, 2.5, overlap=False, tokens_per_round=4.1, tok_per_s=1200),
        cell("DDTREE", 1, 3.0, budget=32, tokens_per_round=5.4), cell("DDTREE", 4, 3.0, budget=32, tokens_per_round=9.0),
        real_weights=True,
    )
    (tmp_path / "bench.json").write_text(json.dumps(measured))
    curve = ac.load_curve(tmp_path / "bench.json")
    assert (curve.chain, dict(curve.budgets)) == (4.1, {32: 5.4})  # bs 1, DFLASH's faster mode


def test_a_curve_read_from_a_report_leaves_out_the_chain_control():
    """The chain control (``ddtree-b15-chain``) verifies DFLASH's chain through DDTREE: its
    tokens per round are the chain's, not a B = 15 tree's."""
    curve = ac.load_curve(ROOT / "docs/bench/2026-12-02-hybrid-adaptive-chain-control/bench.json")
    assert curve.budgets == {32: pytest.approx(5.057, abs=1e-3)}
    assert curve.chain == pytest.approx(3.984, abs=1e-3)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("c.json", "{", "is not JSON"),
        ("c.json", json.dumps({"budgets": {"16": 5}}), 'needs a "dflash" τ'),
        ("c.json", json.dumps({"dflash": 4, "budgets": {"x": 5}}), "budget 'x' is not an integer"),
        ("c.json", json.dumps({"dflash": 4, "budgets": {"16": 0.5}}), "below 1 token per round"),
        ("c.json", json.dumps({"dflash": 4, "budgets": {}}), "lists no budget"),
        ("c.csv", "16,5\n", "has no dflash row"),
        ("c.csv", "16,5,6\ndflash,4\n", "is not budget,acceptance"),
        ("c.json", json.dumps(run(cell("DFLASH", 1, 3.0))), "random-weight run accepts nothing"),
    ],
)
def test_a_bad_curve_is_one_line_naming_the_file(tmp_path: Path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ac.BadCurve, match=message) as error:
        ac.load_curve(tmp_path / name)
    assert str(tmp_path / name) in str(error.value) and "\n" not in str(error.value)


def test_the_report_shows_the_projection_section():
    report_keys = {
        "setting": {"name": "qwen3-8b-random", "note": "random", "real_weights": False},
        "config": {"temperatures": [0.0], "batch_sizes": [1], "budgets": [16], "attention_backend": "triton",
                   "tp_size": 1, "max_new_tokens": 8, "prompts_per_cell": 1},
        "context": {}, "cells": [], "fastest_modes": [], "parity": [], "groups": [], "issues": [], "notes": [],
        "projection": pj.project(run(cell("DFLASH", 1, 8.0), cell("DDTREE", 1, 8.0, budget=16)), CURVE),
    }
    text = md.markdown_report(report_keys)
    assert "## Projection: DDTREE ÷ DFLASH with another pair's acceptance" in text
    assert "| 1 | 16 | 8.00 | 8.00 | 1.000 |" in text


def steady_row(algorithm, concurrency, tok_per_s, *, budget=None, tokens_per_round=1.0, spread=(1.0, 1.0), **fields):
    return {
        "name": f"{algorithm.lower()}-{budget or ''}/c{concurrency}/t0", "group": f"{algorithm.lower()}-{budget or ''}",
        "algorithm": algorithm, "budget": budget, "adaptive": [], "schedule": "", "chain": False,
        "concurrency": concurrency, "temperature": 0.0, "status": "ok", "tok_per_s": tok_per_s,
        "tok_per_s_min": tok_per_s * spread[0], "tok_per_s_max": tok_per_s * spread[1],
        "tokens_per_round": tokens_per_round, "request_round_s": tokens_per_round / tok_per_s,
        "request_round_s_min": tokens_per_round / (tok_per_s * spread[1]),
        "request_round_s_max": tokens_per_round / (tok_per_s * spread[0]), **fields,
    }


def test_continuous_batching_cells_are_projected_per_concurrency_from_their_cost_per_request_and_round():
    # c = 16: DFLASH serves 11 of the 16 at once (its cap), DDTREE all 16; each cell's cost per
    # request and round is its tokens per round over its tok/s, whatever it ran at once.
    rows = [
        steady_row("DFLASH", 16, 200.0, mean_running=11.0, spread=(0.9, 1.1)),
        steady_row("DFLASH", 16, 150.0),  # the slower scheduling mode
        steady_row("DDTREE", 16, 250.0, budget=16, mean_running=16.0, spread=(0.8, 1.0)),
        steady_row("DDTREE", 16, 400.0, budget=16, adaptive=[16, 64]),  # not a fixed budget
        steady_row("DDTREE", 16, 300.0, budget=15, chain=True),  # the chain control
        steady_row("DDTREE", 16, 100.0, budget=64, tokens_per_round=2.0),
    ]
    report = run() | {"steady": {"rows": rows}}
    projection = pj.project(report, CURVE)
    assert projection["columns"] == [] and pj.STEADY_ASSUMPTION in projection["assumptions"]
    (column,) = projection["steady"]
    by_budget = {b["budget"]: b for b in column["budgets"]}
    assert column["dflash"] == {"group": "dflash-", "tok_per_s": 200.0, "mean_running": 11.0}
    assert sorted(by_budget) == [16, 64]
    assert by_budget[16]["step_ratio"] == pytest.approx((1 / 250) / (1 / 200))
    assert by_budget[16]["speedup_vs_dflash"] == pytest.approx(5 / 4 * 250 / 200)
    assert by_budget[16]["worst_speedup_vs_dflash"] == pytest.approx(5 / 4 * 200 / 220)
    assert by_budget[64]["step_ratio"] == pytest.approx((2 / 100) / (1 / 200))
    assert column["best"]["budget"] == 16
    text = pj.projection_markdown(projection)
    assert "| 16 | 16 | 250 (16.0) | 200 (11.0) | 0.800 (1.100) | 5.00 | 3.20 | **x1.56** (x1.14) |" in text
    assert "--budgets 16,64 --concurrency 16 --temperatures 0 --engines-per-arm 2`" in text


def test_fixed_waves_and_continuous_batching_project_side_by_side():
    report = run(cell("DFLASH", 1, 8.0), cell("DDTREE", 1, 8.0, budget=16)) | {
        "steady": {"rows": [steady_row("DFLASH", 1, 100.0), steady_row("DDTREE", 1, 100.0, budget=16)]}
    }
    projection = pj.project(report, CURVE)
    assert len(projection["columns"]) == len(projection["steady"]) == 1
    text = pj.projection_markdown(projection)
    assert text.index("| bs | budget |") < text.index("Continuous batching:") < text.index("| c | budget |")
    assert "--budgets 16 --batch-sizes 1 --temperatures 0 --ddtree-no-overlap --repeats 2`" in text
