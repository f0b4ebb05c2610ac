"""DDTREE ÷ DFLASH projected on a round trace's costs per request and round."""

from __future__ import annotations

import pytest

from ddtree_overlay.bench.acceptance_curve import AcceptanceCurve
from ddtree_overlay.bench.trace_projection import project_trace, trace_projection_lines

CURVE = AcceptanceCurve(name="a curve", source="test", chain=4.0, budgets={16: 5.0, 64: 6.0})


def record(arm: str, step_ms: float, kernel_ms: float | None, *, at_once: int = 16, **extra) -> dict:
    trace = {} if kernel_ms is None else {"trace": {"gpu": {"kernel_ms": kernel_ms}}}
    return {"arm": arm, "batch_size": 16, "requests_at_once": at_once, "step_ms": step_ms, **trace, **extra}


def test_each_budget_on_the_curve_is_projected_against_the_traces_cheapest_dflash_per_request_running() -> None:
    records = [
        record("ddtree-b16", 12.0, 10.0, primer=True),  # the untimed primer: not a row
        record("dflash", 10.0, 8.0, at_once=8),  # capped: 8 requests ran its steps
        record("dflash-no-overlap@flashinfer", 12.0, 8.0),  # 0.75 ms per request: the cheaper
        record("ddtree-b16@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv", 22.0, 17.6),
        record("ddtree-b32", 30.0, None),  # τ 5.5 between 16 and 64, in log2 B
        record("ddtree-b15", 20.0, 16.0),  # outside the curve
        record("ddtree-b16-chain", 20.0, 16.0),  # the chain control is no budget's tree
        {"arm": "ddtree-b64", "error": "engine failed to start"},
    ]
    rows = project_trace(records, CURVE)
    assert [r["arm"] for r in rows] == ["ddtree-b16@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv", "ddtree-b32"]
    b16, b32 = rows
    assert b16["dflash"] == "dflash-no-overlap@flashinfer"
    assert (b16["wall_ratio"], b16["kernel_ratio"]) == pytest.approx((22 / 16 / (12 / 16), 17.6 / 16 / (8 / 16)))
    assert b16["speedup_vs_dflash"] == pytest.approx(5.0 / 4.0 / (22 / 12))
    assert b16["kernel_speedup_vs_dflash"] == pytest.approx(5.0 / 4.0 / 2.2)
    assert b16["break_even_tau"] == pytest.approx(4.0 * 22 / 12)
    assert b32["tau"] == pytest.approx(5.5) and b32["kernel_ratio"] is None
    lines = trace_projection_lines(rows, CURVE)
    assert "| ddtree-b32 | 1 | 5.50 | 2.500 | \u2013 | 10.00 | x0.55 | x0.55 | \u2013 |" in lines
    assert lines[1].startswith("**A projection, not a measurement**")


def test_no_dflash_arm_no_projection() -> None:
    assert project_trace([record("ddtree-b16", 12.0, 10.0)], CURVE) == []
    assert trace_projection_lines([], CURVE) == []


def test_an_arm_of_several_engines_counts_their_median_and_its_worst_case_against_dflashs_cheapest_engine() -> None:
    records = [
        record("dflash", 10.0, 8.0),
        record("ddtree-b16", 12.0, 9.0),
        record("dflash", 12.0, 8.4),
        record("ddtree-b16", 11.0, 9.2),
        record("ddtree-b16", 16.0, 9.1),  # one slow engine moves the worst case, not the median
        record("dflash-no-overlap", 13.0, 9.0),  # a dearer DFLASH arm by its median
    ]
    (row,) = project_trace(records, CURVE)
    assert row["dflash"] == "dflash" and (row["engines"], row["dflash_engines"]) == (3, 2)
    assert row["wall_ratio"] == pytest.approx(12.0 / 11.0) and row["kernel_ratio"] == pytest.approx(9.1 / 8.2)
    assert row["worst_wall_ratio"] == pytest.approx(16.0 / 10.0)
    assert row["speedup_vs_dflash"] == pytest.approx(5.0 / 4.0 / (12.0 / 11.0))
    assert row["worst_speedup_vs_dflash"] == pytest.approx(5.0 / 4.0 / 1.6)
    assert "| ddtree-b16 | 3 | 5.00 | 1.091 | 1.110 | 4.36 | x1.15 | x0.78 | x1.13 |" in trace_projection_lines([row], CURVE)
