"""compare's analysis on hand-made sides: greedy divergences with margins, the 3 % acceptance
verdict, speeds, prompt matching, and reading SGLang's engine records."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddtree_overlay.compare.analysis import compare_runs
from ddtree_overlay.compare.records import (
    ArmResult,
    Generation,
    Side,
    acceptance_length,
    side_from_engine_records,
)
from ddtree_overlay.compare.report import markdown_table, write_report
from ddtree_overlay.compare.runfile import OfflineGeneration, OfflineRun, OfflineTurn, arm_of

BASELINE = (10, 11, 12, 13, 14, 15)


@pytest.mark.parametrize(
    ("lengths", "generated", "expected"),
    [
        ([3, 2], 6, 5 / 2),  # 1 + 3 + 2 = 6: both rounds needed
        ([3, 2, 4], 6, 5 / 2),  # a third round past the last kept token is not counted
        ([4, 4], 6, 5 / 2),  # the second round's tokens are cut at max_new_tokens
        ([1], 1, None),  # only the prefill's token
        ([], 5, None),  # target-only
    ],
)
def test_acceptance_counts_the_rounds_that_produced_the_output(lengths, generated, expected) -> None:
    assert acceptance_length(lengths, generated) == expected


def offline_run(temperature: float = 0.0) -> OfflineRun:
    def gen(tokens, lengths, tpot):
        return OfflineGeneration(tuple(tokens), tuple(lengths), tpot, 0.1)

    turns = tuple(
        OfflineTurn(
            index=i,
            prompt=(1, 2, i),
            methods={
                "baseline": gen(BASELINE, [1] * 6, 0.02),
                "dflash": gen(BASELINE, [3, 3], 0.01),
                "ddtree_tb32": gen(BASELINE, [4, 2], 0.008),
            },
        )
        for i in range(2)
    )
    return OfflineRun(
        path=Path("run.pt"), target="t", draft="d", dataset="x", block_size=16, temperature=temperature,
        max_new_tokens=6, target_attention="sdpa", method_keys=("baseline", "dflash", "ddtree_tb32"), turns=turns,
    )


def side(*, ddtree_tokens=BASELINE, ddtree_acceptance=2.5, margins=(0.5,) * 6, prompts=((1, 2, 0), (1, 2, 1))) -> Side:
    def arm(key, tokens, acceptance, tok_s, margin=()):
        return ArmResult(arm_of(key), tuple(Generation(tuple(tokens), acceptance, margin) for _ in prompts), tok_s)

    arms = [
        arm("baseline", BASELINE, None, 100.0, margins),
        arm("dflash", BASELINE, 2.5, 200.0),
        arm("ddtree_tb32", ddtree_tokens, ddtree_acceptance, 300.0),
    ]
    return Side(source="sglang", prompts=tuple(prompts), arms={a.arm.name: a for a in arms})


def method(result: dict, key: str) -> dict:
    return next(m for m in result["methods"] if m["method"] == key)


def test_an_agreeing_side_agrees_with_speeds_side_by_side() -> None:
    result = compare_runs(offline_run(), side())
    assert result["agrees"] and result["matched_prompts"] == 2
    ddtree = method(result, "ddtree_tb32")
    assert ddtree["offline_acceptance"] == ddtree["acceptance"] == 2.5 and ddtree["acceptance_within"]
    assert ddtree["greedy_equal"] == 2 and ddtree["greedy_diverged"] == 0
    assert ddtree["offline_tokens_per_s"] == pytest.approx(125.0) and ddtree["offline_speedup"] == pytest.approx(2.5)
    assert ddtree["tokens_per_s"] == 300.0 and ddtree["speedup"] == 3.0


def test_acceptance_more_than_3_percent_off_fails_the_verdict() -> None:
    result = compare_runs(offline_run(), side(ddtree_acceptance=2.5 * 0.96))
    ddtree = method(result, "ddtree_tb32")
    assert ddtree["acceptance_ratio"] == pytest.approx(0.96) and ddtree["acceptance_within"] is False
    assert not result["agrees"]
    assert compare_runs(offline_run(), side(ddtree_acceptance=2.5 * 0.98))["agrees"]


@pytest.mark.parametrize(("margin", "unexplained"), [(0.1, 0), (3.0, 1)])
def test_a_divergence_reports_the_targets_margin_there(margin: float, unexplained: int) -> None:
    tokens = (*BASELINE[:3], 99, *BASELINE[4:])
    result = compare_runs(offline_run(), side(ddtree_tokens=tokens, margins=(5.0, 5.0, 5.0, margin, 5.0, 5.0)))
    row = next(r for r in result["prompts"] if r["method"] == "ddtree_tb32" and r["turn"] == 0)
    assert row["divergence"] == {"index": 3, "offline_token": 13, "token": 99, "margin": margin}
    assert method(result, "ddtree_tb32")["greedy_unexplained"] == 2 * unexplained
    assert result["agrees"] == (unexplained == 0)
    assert "first divergence at token 3 (13 offline, 99 here)" in markdown_table(result)


def test_no_margin_where_the_sides_target_only_left_the_offline_output_earlier() -> None:
    run, replay = offline_run(), side(ddtree_tokens=(*BASELINE[:4], 99, 15))
    target_only = replay.arms["target-only"]
    shifted = (10, 77, 12, 13, 14, 15)
    replay.arms["target-only"] = ArmResult(
        target_only.arm, tuple(Generation(shifted, None, g.margins) for g in target_only.generations), 100.0
    )
    row = next(r for r in compare_runs(run, replay)["prompts"] if r["method"] == "ddtree_tb32")
    assert row["divergence"]["index"] == 4 and row["divergence"]["margin"] is None


def test_sampled_runs_skip_the_greedy_check() -> None:
    result = compare_runs(offline_run(temperature=1.0), side(ddtree_tokens=(0,) * 6))
    assert method(result, "ddtree_tb32")["greedy_equal"] is None and result["agrees"]


def test_unmatched_prompts_and_missing_arms_are_named() -> None:
    replay = side(prompts=((1, 2, 0), (7, 7, 7)))
    del replay.arms["ddtree-b32"]
    result = compare_runs(offline_run(), replay)
    assert result["matched_prompts"] == 1 and result["unmatched_turns"] == [1]
    assert result["missing_arms"] == ["ddtree-b32"] and not result["agrees"]
    assert "not replayed: ddtree-b32" in markdown_table(result)


def test_sglang_engine_records_become_a_side() -> None:
    prompts = [(1, 2, 0), (1, 2, 1)]
    records = [
        {"arm": "target-only", "ok": True, "outputs": [list(BASELINE)] * 2, "tok_per_s": 100.0,
         "meta": [{"completion_tokens": 6}] * 2, "top2_margins": [[0.5] * 6] * 2},
        {"arm": "dflash", "ok": True, "outputs": [list(BASELINE)] * 2, "tok_per_s": 200.0,
         "meta": [{"completion_tokens": 6, "spec_verify_ct": 2}] * 2},
        {"arm": "ddtree-b32", "ok": True, "outputs": [list(BASELINE)] * 2, "tok_per_s": 300.0,
         "meta": [{"completion_tokens": 6, "spec_verify_ct": 2}] * 2},
        {"kind": "engine", "arm": "ddtree-b32", "ok": True},
    ]
    replay = side_from_engine_records(prompts, records)
    assert replay.arms["ddtree-b32"].generations[0].acceptance == 2.5
    assert replay.arms["target-only"].generations[1].margins == (0.5,) * 6
    assert compare_runs(offline_run(), replay)["agrees"]
    with pytest.raises(ValueError, match="1 outputs for 2 prompts"):
        side_from_engine_records(prompts, [dict(records[1], outputs=[list(BASELINE)])])


def cell_records(margins_outputs: list[list[int]]) -> list[dict]:
    """Records as the engine runner writes them for a bench plan: a cell per decode, target-only's
    margins from its untimed cell, an engine record per arm."""
    def cell(group: str, name: str, **fields) -> dict:
        return {"kind": "cell", "arm": f"{group}/{name}", "group": group, "repeat": 1, "batch_size": 1,
                "ok": True, "timed": True, "outputs": [list(BASELINE)] * 2, **fields}

    spec = [{"completion_tokens": 6, "spec_verify_ct": 2}] * 2
    return [
        cell("target-only", "bs1/t0", meta=[{"completion_tokens": 6}] * 2, tok_per_s=100.0),
        cell("target-only", "margins", timed=False, outputs=margins_outputs, meta=[{"completion_tokens": 6}] * 2,
             top2_margins=[[0.5] * 6] * 2, tok_per_s=90.0),
        {"kind": "engine", "arm": "target-only", "repeat": 1, "ok": True},
        cell("dflash", "bs1/t0", meta=spec, tok_per_s=200.0),
        cell("ddtree-b32", "bs1/t0", meta=spec, tok_per_s=300.0),
        cell("ddtree-b32", "bs1/t0", ok=False, skipped="time box"),
    ]


def test_bench_cell_records_become_a_side_with_the_margins_cells_margins() -> None:
    prompts = [(1, 2, 0), (1, 2, 1)]
    replay = side_from_engine_records(prompts, cell_records([list(BASELINE)] * 2))
    target_only = replay.arms["target-only"]
    assert target_only.tokens_per_s == 100.0 and target_only.generations[1].margins == (0.5,) * 6
    assert replay.arms["ddtree-b32"].generations[0].acceptance == 2.5
    assert compare_runs(offline_run(), replay)["agrees"]
    # margins taken along another output than the timed one describe other contexts: dropped
    other = side_from_engine_records(prompts, cell_records([list(BASELINE), [10, 11, 99, 13, 14, 15]]))
    assert [g.margins for g in other.arms["target-only"].generations] == [(0.5,) * 6, ()]
    records = cell_records([list(BASELINE)] * 2)
    with pytest.raises(ValueError, match="arm dflash: more than one decode of the prompts"):
        side_from_engine_records(prompts, [*records, records[3]])


def test_the_report_writes_json_markdown_and_a_plot(tmp_path: Path) -> None:
    files, why_not = write_report(compare_runs(offline_run(), side()), tmp_path)
    assert [f.name for f in files] == ["compare.json", "compare.md", "compare.png"] and why_not is None
    assert "| DDTREE B=32 | 2/2 equal | 2.500 | 2.500 | 1.0000 | within 3 %" in (tmp_path / "compare.md").read_text()
    assert (tmp_path / "compare.png").stat().st_size > 0
