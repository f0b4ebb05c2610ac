"""bench planning: settings, one engine per config, the order of engines and cells, time box."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from ddtree_overlay.bench import estimates, plan_json, settings
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench.arms import DFLASH, Arm, BudgetPolicy


def fixture_plan(tmp_path: Path, **config) -> bp.SweepPlan:
    """The fixture's sweep; without the primer unless asked (tests/bench/test_primer.py)."""
    setting = settings.make_setting("fixture", scratch=tmp_path)
    return bp.plan_sweep(setting, bp.BenchConfig(**({"primer": False} | config)))


def first_run_s(plan: bp.SweepPlan, name: str) -> float:
    """The estimate of the group's first engine run."""
    return next(r.est_s for r in plan.runs if r.group.name == name)


def test_default_sweep_has_one_engine_per_algorithm_budget_and_scheduling(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    names = [g.name for g in plan.groups]
    assert sorted(names) == sorted(
        ["target-only", "dflash", "dflash-no-overlap"] + [f"ddtree-b{b}" for b in bp.DEFAULT_BUDGETS]
    )
    for group in plan.groups:
        timed = [(c.batch_size, c.temperature) for c in group.cells if not c.top2]
        assert sorted(timed) == sorted((bs, t) for bs in (1, 4, 16) for t in (0.0, 1.0))
    assert len(plan.cells) == 10 * 6 + 1  # plus target-only's margins cell


def test_every_arm_uses_the_same_cuda_graph_settings(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    shared = {(tuple(g.engine["cuda_graph_bs_decode"]), g.engine["disable_prefill_cuda_graph"]) for g in plan.groups}
    assert shared == {((1, 2, 4, 8, 16), True)}
    assert not any("disable_cuda_graph" in g.engine for g in plan.groups)
    by_name = {g.name: g.engine for g in plan.groups}
    assert "speculative_algorithm" not in by_name["target-only"]
    assert by_name["dflash"]["speculative_algorithm"] == "DFLASH"
    assert "disable_overlap_schedule" not in by_name["dflash"]
    assert by_name["dflash-no-overlap"]["disable_overlap_schedule"] is True
    assert by_name["ddtree-b64"]["speculative_algorithm"] == "DDTREE"
    assert by_name["ddtree-b64"]["speculative_ddtree_budget"] == 64
    assert "disable_overlap_schedule" not in by_name["ddtree-b64"]


def test_ddtree_arms_run_their_backend_and_the_others_sglangs_default_or_the_one_asked_for(tmp_path: Path) -> None:
    setting = settings.make_setting("hybrid", scratch=tmp_path, eagle3_draft=tmp_path)
    baselines = ["target-only", "dflash", "dflash-no-overlap", "nextn", "eagle3"]

    def backends(**config) -> dict[str, str | None]:
        plan = bp.plan_sweep(setting, bp.BenchConfig(budgets=(8,), primer=False, **config))
        return {g.name: g.engine.get("attention_backend") for g in plan.groups}

    # auto: the engine is given no backend, and SGLang picks its default for the GPU
    assert backends() == dict.fromkeys(baselines) | {"ddtree-b8": "triton"}
    assert backends(attention_backend="flashinfer", baseline_attention_backend="triton") == (
        dict.fromkeys(baselines, "triton") | {"ddtree-b8": "flashinfer"}
    )
    assert backends(baseline_attention_backend="fa3", ddtree_no_overlap=True, chain_control=True) == (
        dict.fromkeys(baselines, "fa3") | dict.fromkeys(["ddtree-b8", "ddtree-b8-no-overlap", "ddtree-b15-chain"], "triton")
    )


def test_each_further_baseline_backend_runs_the_chain_baselines_again(tmp_path: Path) -> None:
    setting = settings.make_setting("hybrid", scratch=tmp_path, eagle3_draft=tmp_path)
    plan = bp.plan_sweep(setting, bp.BenchConfig(budgets=(8,), primer=False, baseline_attention_backend="flashinfer,triton"))
    chains = ["dflash", "dflash-no-overlap", "nextn", "eagle3"]
    assert {g.name: g.engine.get("attention_backend") for g in plan.groups} == (
        {"target-only": "flashinfer"} | dict.fromkeys(chains, "flashinfer")
        | {f"{name}@triton": "triton" for name in chains} | {"ddtree-b8": "triton"}
    )
    assert [g.name for g in plan.groups][:5] == ["target-only", *chains]  # the first backend's, as before
    only = bp.plan_sweep(setting, bp.BenchConfig(budgets=(8,), primer=False, baseline_attention_backend="fa3,flashinfer",
                                                 only=("dflash@flashinfer", "ddtree-b8")))
    (dflash, _) = only.groups
    assert dflash.arm == Arm(DFLASH, backend="flashinfer") and dflash.engine["attention_backend"] == "flashinfer"
    with pytest.raises(ValueError, match="no arm dflash@fa3 in this sweep"):
        bp.plan_sweep(setting, bp.BenchConfig(budgets=(8,), baseline_attention_backend="fa3,flashinfer", only=("dflash@fa3",)))


def test_tp_size_reaches_every_engine_and_defaults_to_one_gpu(tmp_path: Path) -> None:
    assert {g.engine["tp_size"] for g in fixture_plan(tmp_path).groups} == {1}
    plan = fixture_plan(tmp_path, tp_size=2)
    assert all(g.engine["tp_size"] == 2 for g in plan.groups)
    runner = plan_json.runner_plan(plan, deadline=None, profile_path=None)
    assert {arm["engine"]["tp_size"] for arm in runner["arms"]} == {2}


def baselines_before_ddtree(plan: bp.SweepPlan) -> list[str]:
    """The groups that run before the first DDTREE one."""
    first = next(i for i, g in enumerate(plan.groups) if g.arm.algorithm == bp.DDTREE)
    return [g.name for g in plan.groups[:first]]


def test_engines_run_baselines_first_then_budgets_by_interest(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    assert [g.name for g in plan.groups] == [
        "target-only",
        "dflash",
        "dflash-no-overlap",
        "ddtree-b16",
        "ddtree-b32",
        "ddtree-b64",
        "ddtree-b8",
        "ddtree-b128",
        "ddtree-b4",
        "ddtree-b256",
    ]
    # every speedup is against DFLASH's faster mode: both DFLASH modes run before any DDTREE budget
    assert baselines_before_ddtree(plan) == ["target-only", "dflash", "dflash-no-overlap"]
    assert plan.runs[0].est_start_s > plan.runs[1].est_start_s  # the first compiles kernels


def test_ddtree_no_overlap_runs_each_budget_again_right_after_its_overlap_twin(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, ddtree_no_overlap=True)
    assert [g.name for g in plan.groups] == [
        "target-only",
        "dflash",
        "dflash-no-overlap",
        "ddtree-b16",
        "ddtree-b16-no-overlap",
        "ddtree-b32",
        "ddtree-b32-no-overlap",
        "ddtree-b64",
        "ddtree-b64-no-overlap",
        "ddtree-b8",
        "ddtree-b8-no-overlap",
        "ddtree-b128",
        "ddtree-b128-no-overlap",
        "ddtree-b4",
        "ddtree-b4-no-overlap",
        "ddtree-b256",
        "ddtree-b256-no-overlap",
    ]
    assert baselines_before_ddtree(plan) == ["target-only", "dflash", "dflash-no-overlap"]
    for budget in bp.DEFAULT_BUDGETS:
        twin, arm = plan.group(f"ddtree-b{budget}"), plan.group(f"ddtree-b{budget}-no-overlap")
        assert arm.arm == Arm.ddtree(budget, overlap=False)
        assert dict(arm.engine) == dict(twin.engine) | {"disable_overlap_schedule": True}
        assert arm.engine["speculative_ddtree_budget"] == budget
        assert [c.name for c in arm.cells] == [c.name.replace(twin.name, arm.name, 1) for c in twin.cells]
        assert [c.est_s for c in arm.cells] == [c.est_s for c in twin.cells]
        assert first_run_s(plan, arm.name) == first_run_s(plan, twin.name)  # neither starts first
    without = fixture_plan(tmp_path)
    twins_s = sum(first_run_s(plan, f"ddtree-b{b}") for b in bp.DEFAULT_BUDGETS)
    assert plan.est_s == pytest.approx(without.est_s + twins_s)
    assert not any(g.name.endswith("-no-overlap") and g.arm.algorithm == bp.DDTREE for g in without.groups)


def test_ddtree_no_overlap_arms_count_in_the_time_box(tmp_path: Path) -> None:
    full = fixture_plan(tmp_path, ddtree_no_overlap=True)
    up_to = [g.name for g in full.groups].index("ddtree-b16-no-overlap")
    minutes = sum(r.est_s for r in full.runs[: up_to + 1]) / 60 + 0.01
    boxed = fixture_plan(tmp_path, ddtree_no_overlap=True, max_minutes=minutes)
    assert boxed.expected_to_fit == tuple(i <= up_to for i in range(len(full.groups)))
    assert "ddtree-b32-no-overlap" in boxed.notes[0] and "ddtree-b16-no-overlap" not in boxed.notes[0]


def test_adaptive_budgets_add_one_ddtree_arm_per_scheduling_mode_after_the_fixed_budgets(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, budgets=(32, 256), adaptive_budgets=(256, 8, 32), ddtree_no_overlap=True)
    assert [g.name for g in plan.groups][-2:] == ["ddtree-adaptive-8-32-256", "ddtree-adaptive-8-32-256-no-overlap"]
    arm, widest = plan.group("ddtree-adaptive-8-32-256"), plan.group("ddtree-b256")
    assert arm.arm == Arm.ddtree(BudgetPolicy(adaptive=(8, 32, 256)))
    assert arm.engine["speculative_ddtree_adaptive_budgets"] == "8,32,256"
    assert "speculative_ddtree_budget" not in arm.engine
    assert dict(arm.engine) | {"speculative_ddtree_budget": 256} == dict(
        widest.engine, speculative_ddtree_adaptive_budgets="8,32,256"
    )
    assert [c.est_s for c in arm.cells] == [c.est_s for c in widest.cells]  # priced as its widest
    assert plan_json.describe_plan(plan)["groups"][-1]["adaptive"] == [8, 32, 256]
    assert not any(g.arm.policy and g.arm.policy.adaptive for g in fixture_plan(tmp_path).groups)


def test_group_and_cell_names_carry_the_scheduling_mode() -> None:
    assert bp.cell_name("ddtree-b32-no-overlap", 4, 0.0) == "ddtree-b32-no-overlap/bs4/t0"


def test_budgets_outside_the_priority_list_run_after_it(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, budgets=(3, 16, 1000))
    assert [g.name for g in plan.groups] == [
        "target-only", "dflash", "dflash-no-overlap", "ddtree-b16", "ddtree-b3", "ddtree-b1000",
    ]


def test_cells_run_greedy_first_batch_one_then_widest(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    dflash = plan.group("dflash")
    assert [c.name for c in dflash.cells] == [
        "dflash/bs1/t0", "dflash/bs16/t0", "dflash/bs4/t0", "dflash/bs1/t1", "dflash/bs16/t1", "dflash/bs4/t1",
    ]
    target = plan.group("target-only")
    margins = [c for c in target.cells if c.top2]
    assert [c.name for c in margins] == ["target-only/margins"]
    assert target.cells.index(margins[0]) == 3  # after the greedy cells, before T = 1
    assert margins[0].batch_size == 16 and margins[0].temperature == 0


def test_every_cell_decodes_at_least_one_full_wave_of_shared_prompts(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    assert {(c.batch_size, c.prompts) for c in plan.cells} == {(1, 8), (4, 8), (16, 16)}
    qwen = bp.plan_sweep(settings.make_setting("qwen3-8b-random", scratch=tmp_path), bp.BenchConfig())
    assert {(c.batch_size, c.prompts) for c in qwen.cells} == {(1, 4), (4, 4), (16, 16)}


def test_time_box_marks_what_the_estimates_cannot_fit(tmp_path: Path) -> None:
    full = fixture_plan(tmp_path)
    assert all(full.expected_to_fit) and full.notes == ()
    boxed = fixture_plan(tmp_path, max_minutes=first_run_s(full, "target-only") / 60 + 0.1)
    assert boxed.expected_to_fit[0] and not any(boxed.expected_to_fit[2:])
    assert "leaves out" in boxed.notes[0] and "ddtree-b256" in boxed.notes[0]
    assert [g.name for g in boxed.groups] == [g.name for g in full.groups]  # the runner decides


def test_estimates_grow_with_verify_width_and_shrink_with_acceptance(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3-8b-random", scratch=tmp_path)
    common = {"algorithm": bp.DDTREE, "batch_size": 16, "temperature": 0.0, "prompts": 16, "max_new_tokens": 128}
    assert estimates.estimate_cell_s(setting, budget=256, **common) > estimates.estimate_cell_s(setting, budget=32, **common)
    fixture = settings.make_setting("fixture", scratch=tmp_path)
    t0 = estimates.estimate_cell_s(fixture, budget=16, **common)
    t1 = estimates.estimate_cell_s(fixture, budget=16, **(common | {"temperature": 1.0}))
    assert t1 > t0


def test_runner_plan_is_the_json_engine_runner_reads(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, budgets=(8,), batch_sizes=(1, 2), temperatures=(0.0,), max_new_tokens=5)
    runner = plan_json.runner_plan(plan, deadline=123.0, profile_path=tmp_path / "p.jsonl")
    json.dumps(runner)  # JSON-ready
    assert runner["deadline"] == 123.0 and runner["profile_path"] == str(tmp_path / "p.jsonl")
    assert len(runner["prompts"]) == 8
    arms = {arm["name"]: arm for arm in runner["arms"]}
    assert [a["name"] for a in runner["arms"]] == ["target-only", "dflash", "dflash-no-overlap", "ddtree-b8"]
    assert arms["ddtree-b8"]["profile"] and not arms["dflash"]["profile"]
    assert arms["ddtree-b8"]["family"] == "DDTREE"
    cell = arms["ddtree-b8"]["cells"][0]
    assert cell["sampling"] == {"temperature": 0.0, "max_new_tokens": 5, "ignore_eos": True}
    assert cell["batch_size"] == 1 and cell["prompts"] == 8 and cell["est_s"] > 0
    assert [c["top2"] for c in arms["target-only"]["cells"]] == [False, False, True]


def test_runner_plan_profiles_the_no_overlap_ddtree_arm_too(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, budgets=(8,), batch_sizes=(1,), temperatures=(0.0,), ddtree_no_overlap=True)
    arms = {arm["name"]: arm for arm in plan_json.runner_plan(plan, deadline=None, profile_path=None)["arms"]}
    arm = arms["ddtree-b8-no-overlap"]
    assert arm["family"] == "DDTREE" and arm["profile"]
    assert arm["engine"]["disable_overlap_schedule"] is True and arm["engine"]["speculative_ddtree_budget"] == 8
    assert "disable_overlap_schedule" not in arms["ddtree-b8"]["engine"]
    assert [c["name"] for c in arm["cells"]] == ["ddtree-b8-no-overlap/bs1/t0"]
    summary = plan_json.describe_plan(plan)
    row = next(g for g in summary["groups"] if g["name"] == "ddtree-b8-no-overlap")
    assert (row["algorithm"], row["budget"], row["overlap"]) == ("DDTREE", 8, False)


def test_describe_plan_summarises_groups_and_estimates(tmp_path: Path) -> None:
    summary = plan_json.describe_plan(fixture_plan(tmp_path, max_minutes=1))
    assert summary["setting"] == "fixture" and summary["max_minutes"] == 1
    assert summary["estimated_minutes"] > 1
    assert summary["groups"][0]["name"] == "target-only" and not summary["groups"][-1]["expected_to_fit"]


def test_capture_sizes_cover_requested_batches_and_powers_of_two() -> None:
    assert bp.capture_batch_sizes([1, 4, 16]) == [1, 2, 4, 8, 16]
    assert bp.capture_batch_sizes([6, 24]) == [1, 2, 4, 6, 8, 16, 24]


# --- repeats (--repeats N): every group N times, in rounds; target-only in round 1 only ----


def test_repeats_run_every_group_once_per_round_every_other_round_reversed(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, budgets=(8,), repeats=3)
    order = ["target-only", "dflash", "dflash-no-overlap", "ddtree-b8"]
    assert [g.name for g in plan.groups] == order
    later = order[1:]  # target-only, the correctness reference, runs in round 1 only
    assert [(r.group.name, r.repeat) for r in plan.runs] == (
        [(name, 1) for name in order] + [(name, 2) for name in reversed(later)] + [(name, 3) for name in later]
    )
    assert [r.repeat for r in plan.runs if r.group.name == "target-only"] == [1]
    assert plan.expected_to_fit == (True,) * 10
    by_run = {(r.group.name, r.repeat): r for r in plan.runs}
    # target-only's one run has all its cells, the untimed margins cell too; every other group's
    # cells run in every repeat
    assert [c.name for c in by_run["target-only", 1].cells] == [c.name for c in plan.group("target-only").cells]
    assert not any(c.top2 for r in plan.runs if r.repeat > 1 for c in r.cells)
    assert by_run["dflash", 3].cells == plan.group("dflash").cells
    # only the sweep's first engine start compiles kernels
    cost = plan.setting.cost
    assert plan.runs[0].est_start_s == cost.engine_start_s + cost.first_start_extra_s
    assert {r.est_start_s for r in plan.runs[1:]} == {cost.engine_start_s}
    assert by_run["dflash", 2].label == "dflash (repeat 2)" and by_run["dflash", 1].label == "dflash"


def test_repeats_multiply_the_estimate(tmp_path: Path) -> None:
    once = fixture_plan(tmp_path, budgets=(8, 16))
    thrice = fixture_plan(tmp_path, budgets=(8, 16), repeats=3)
    # target-only runs first and once, and pays the kernel compiles: a later round is every other
    # group at its first run's estimate
    cost, target = once.setting.cost, once.runs[0]
    assert target.group.name == "target-only" and target.est_start_s == cost.engine_start_s + cost.first_start_extra_s
    later_round = once.est_s - target.est_s
    assert later_round == pytest.approx(sum(first_run_s(once, g.name) for g in once.groups if g.name != "target-only"))
    assert thrice.est_s == pytest.approx(once.est_s + 2 * later_round)
    assert 2 * once.est_s < thrice.est_s < 2.5 * once.est_s  # target-only is about a third of round 1 here
    summary = plan_json.describe_plan(thrice)
    assert summary["repeats"] == 3 and summary["estimated_minutes"] == round(thrice.est_s / 60, 1)
    assert len(summary["engines"]) == len(thrice.groups) + 2 * (len(thrice.groups) - 1)
    assert [e["repeat"] for e in summary["engines"] if e["group"] == "target-only"] == [1]
    assert {g["name"]: g["expected_repeats"] for g in summary["groups"]} == {
        g.name: 1 if g.name == "target-only" else 3 for g in thrice.groups
    }
    assert summary["engines"][len(thrice.groups)] == {
        "group": thrice.groups[-1].name, "repeat": 2, "cells": 6,
        "estimated_s": round(thrice.runs[len(thrice.groups)].est_s), "expected_to_fit": True,
    }


def test_the_time_box_cuts_later_repeats_before_any_groups_first_run(tmp_path: Path) -> None:
    full = fixture_plan(tmp_path, budgets=(8, 16), repeats=2)
    round_1 = sum(r.est_s for r in full.runs if r.repeat == 1)
    boxed = fixture_plan(tmp_path, budgets=(8, 16), repeats=2, max_minutes=round_1 / 60 + 0.01)
    assert boxed.expected_to_fit == tuple(r.repeat == 1 for r in boxed.runs)
    (note,) = boxed.notes
    # all of round 2, in its (reversed) run order, which has no target-only
    assert "leaves out: ddtree-b8 (repeat 2), ddtree-b16 (repeat 2), dflash-no-overlap (repeat 2), dflash (repeat 2) " \
        "(the runner" in note
    assert "target-only" not in note
    summary = plan_json.describe_plan(boxed)
    assert {(g["expected_to_fit"], g["expected_repeats"]) for g in summary["groups"]} == {(True, 1)}


def test_runner_plan_has_an_arm_per_engine_run_with_its_repeat(tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, budgets=(8,), batch_sizes=(1,), temperatures=(0.0,), repeats=2)
    arms = plan_json.runner_plan(plan, deadline=None, profile_path=None)["arms"]
    assert [(a["name"], a["repeat"]) for a in arms] == [
        ("target-only", 1), ("dflash", 1), ("dflash-no-overlap", 1), ("ddtree-b8", 1),
        ("ddtree-b8", 2), ("dflash-no-overlap", 2), ("dflash", 2),
    ]
    assert [c["name"] for c in arms[0]["cells"]] == ["target-only/bs1/t0", "target-only/margins"]
    assert [c["name"] for c in arms[-1]["cells"]] == ["dflash/bs1/t0"]
    assert arms[0]["est_start_s"] > arms[-1]["est_start_s"] == plan.setting.cost.engine_start_s
    assert arms[4]["engine"] == arms[3]["engine"] and arms[4]["profile"]


def test_repeats_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        fixture_plan(tmp_path, repeats=0)


def test_the_warm_up_estimate_is_one_wave_per_temperature_and_batch_size(tmp_path: Path) -> None:
    """The runner warms an engine with one full-length wave per (T, bs) of its waves cells (at
    the Qwen3.6-27B shape tens of seconds: a bs 64 wave took 33 s, 2026-12-04), and one short
    wave per (T, concurrency) of its stream cells."""
    setting = settings.make_setting("fixture", scratch=tmp_path)
    cells = (
        bp.Cell("a/bs16/t0", 16, 0.0, 64, est_s=40.0),  # four waves: 10 s each
        bp.Cell("a/bs16/t0/margins", 16, 0.0, 64, est_s=80.0, top2=True),  # the same (T, bs): warmed once
        bp.Cell("a/bs64/t0", 64, 0.0, 64, est_s=30.0),  # one wave
        bp.Cell("a/bs64/t1", 64, 1.0, 64, est_s=25.0),
        bp.Cell("a/c16/t0", 16, 0.0, 64, est_s=99.0, window_s=20.0),  # a stream warms up in its own time
    )
    fixed = setting.cost.engine_overhead_s
    stream = (estimates.STREAM_WARM_UP_TOKENS / setting.tau(DFLASH, None, 0.0) * estimates.round_ms(setting, DFLASH, None, 16)
              / 1000 + 16 * max(map(len, setting.prompts)) * setting.cost.prefill_token_us / 1e6)  # a short wave of 16
    overhead = partial(estimates.estimate_overhead_s, setting, algorithm=DFLASH, budget=None)
    assert overhead(cells) == pytest.approx(fixed + 10.0 + 30.0 + 25.0 + stream)
    assert overhead(cells[-1:]) == pytest.approx(setting.cost.stream_only_overhead_s + stream) and stream > 0
