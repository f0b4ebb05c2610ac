"""bench.plan's continuous-batching cells, engine orders, the chain control and --only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench import plan_json, settings
from ddtree_overlay.bench.arms import DDTREE, Arm, BudgetPolicy


def plan_for(tmp_path: Path, setting: str = "fixture", **config: Any) -> bp.SweepPlan:
    made = settings.make_setting(setting, scratch=tmp_path, write=False)
    defaults: dict[str, Any] = {"budgets": (8, 32), "temperatures": (0.0,), "primer": False}
    return bp.plan_sweep(made, bp.BenchConfig(**(defaults | config)))


def test_concurrency_adds_a_stream_cell_per_concurrency_to_every_arm(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, batch_sizes=(1,), concurrencies=(4, 1, 16), warmup_s=5, window_s=30)
    for group in plan.groups:
        streams = [c for c in group.cells if c.stream]
        assert [c.batch_size for c in streams] == [1, 16, 4]  # batch 1, then the widest
        assert streams[0].name == f"{group.name}/c1/t0"
        assert all(c.window_s == 30 and c.warmup_s == 5 for c in streams)
        assert all(c.est_s > 35 for c in streams)  # warm-up, window, the last requests' tail
        assert group.engine["cuda_graph_bs_decode"] == [1, 2, 4, 8, 16]
        assert group.engine["max_running_requests"] == 16
    runner = plan_json.runner_plan(plan, deadline=None, profile_path=None)
    stream = next(c for a in runner["arms"] for c in a["cells"] if c["name"] == "dflash/c16/t0")
    assert stream["stream"] == {"concurrency": 16, "warmup_s": 5, "window_s": 30}
    assert stream["batch_size"] == 16 and stream["sampling"]["ignore_eos"]
    assert all("stream" not in c for a in runner["arms"] for c in a["cells"] if "/bs" in c["name"])


def test_concurrency_alone_plans_no_waves_and_no_margins_cell(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, batch_sizes=(), concurrencies=(1, 16))
    assert all(c.stream for c in plan.cells)
    assert "max_running_requests" in plan.group("target-only").engine


def test_waves_only_engines_keep_their_engine_options(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, batch_sizes=(1, 4))
    assert all("max_running_requests" not in g.engine for g in plan.groups)
    assert not any(c.stream for c in plan.cells)


def test_waves_on_a_hybrid_target_ask_for_their_widest_batch(tmp_path: Path) -> None:
    # SGLang's default cap of 48 counts as asked for: the Qwen3.6-27B shape's B = 32 snapshot
    # engine refused to start with it (2026-12-02) where 8 requests fit
    plan = plan_for(tmp_path, "qwen3.6-27b-random", batch_sizes=(1, 8), budgets=(32,))
    assert {g.engine.get("max_running_requests") for g in plan.groups} == {8}


def test_a_window_must_last(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="window_s"):
        plan_for(tmp_path, concurrencies=(4,), window_s=0)


def names(runs: tuple[bp.EngineRun, ...], repeat: int) -> list[str]:
    return [r.group.name for r in runs if r.repeat == repeat]


def test_cycle_keeps_plan_order_and_shuffle_is_seeded_per_round(tmp_path: Path) -> None:
    cycle = plan_for(tmp_path, concurrencies=(4,), repeats=3, engine_order="cycle")
    assert names(cycle.runs, 1) == names(cycle.runs, 2) == names(cycle.runs, 3)
    shuffled = [plan_for(tmp_path, budgets=(4, 8, 16, 32), concurrencies=(4,), repeats=4, engine_order="shuffle",
                         order_seed=seed).runs for seed in (7, 7, 8)]
    assert shuffled[0] == shuffled[1]  # seeded: the same plan twice
    rounds = [names(shuffled[0], k) for k in range(1, 5)]
    assert all(sorted(r) == sorted(rounds[0]) for r in rounds)  # every group once per round
    assert len({tuple(r) for r in rounds}) > 1  # the order changes between rounds
    assert [names(shuffled[2], k) for k in range(1, 5)] != rounds
    with pytest.raises(ValueError, match="engine order"):
        plan_for(tmp_path, engine_order="random")


def test_only_the_first_engine_to_start_pays_the_compiles_whatever_the_order(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, budgets=(4, 8, 16, 32), repeats=2, engine_order="shuffle", order_seed=3)
    cost = plan.setting.cost
    assert [r.est_start_s for r in plan.runs] == [cost.engine_start_s + cost.first_start_extra_s] + [
        cost.engine_start_s
    ] * (len(plan.runs) - 1)


def test_the_first_engine_on_flashinfer_pays_its_compiles_after_a_triton_primer_too(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, budgets=(8,), repeats=2, primer=True, baseline_attention_backend="flashinfer",
                    only=("dflash", "ddtree-b8"))
    cost = plan.setting.cost
    compiling = [r.label for r in plan.runs if r.est_start_s > cost.engine_start_s]
    assert compiling == ["primer (untimed ddtree-b8)", "dflash"]  # not DDTREE's triton: the primer ran it
    # a primer on SGLang's default backend (no DDTREE arm) takes the first engine's compiles too
    default = plan_for(tmp_path, budgets=(8,), primer=True, only=("dflash",))
    assert [r.label for r in default.runs if r.est_start_s > cost.engine_start_s] == ["primer (untimed dflash)"]


def test_target_only_repeats_its_stream_cells_but_not_its_waves(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, batch_sizes=(1,), concurrencies=(4,), repeats=2)
    second = next(r for r in plan.runs if r.group.name == "target-only" and r.repeat == 2)
    assert [c.name for c in second.cells] == ["target-only/c4/t0"]
    waves_only = plan_for(tmp_path, batch_sizes=(1,), repeats=2)
    assert [r.repeat for r in waves_only.runs if r.group.name == "target-only"] == [1]


def test_chain_control_is_one_more_ddtree_arm_with_the_payload_switch(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, batch_sizes=(1,), chain_control=True)
    group = plan.group("ddtree-b15-chain")
    assert group.arm == Arm(DDTREE, BudgetPolicy.fixed(15), chain=True)
    assert group.arm.label == "DDTREE B=15 chain control"
    assert group.engine["speculative_ddtree_budget"] == 15
    assert group.arm.reference_key == "dflash"  # it accepts what DFLASH accepts
    runner = plan_json.runner_plan(plan, deadline=None, profile_path=None)
    envs = {a["name"]: a.get("env") for a in runner["arms"]}
    assert envs["ddtree-b15-chain"] == {"SGLANG_DDTREE_TREE_SHAPE": "chain"}
    assert envs["ddtree-b8"] is None and envs["dflash"] is None
    assert Arm.of_row(group.arm.row()) == group.arm


def test_on_a_hybrid_target_ddtree_engines_serve_sglangs_cap_like_dflash(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, "qwen3.6-27b-random", budgets=(32,), batch_sizes=(16, 64), chain_control=True)
    envs = {a["name"]: a.get("env") for a in plan_json.runner_plan(plan, deadline=None, profile_path=None)["arms"]}
    serve_fewer = {"SGLANG_DDTREE_SERVE_FEWER_REQUESTS": "1"}
    assert envs["ddtree-b32"] == serve_fewer
    assert envs["ddtree-b15-chain"] == {"SGLANG_DDTREE_TREE_SHAPE": "chain"} | serve_fewer
    assert envs["dflash"] is None and envs["target-only"] is None


def test_only_keeps_the_named_arms_and_names_the_unknown(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, only=("dflash", "ddtree-b32"))
    assert [g.name for g in plan.groups] == ["dflash", "ddtree-b32"]
    with pytest.raises(ValueError, match="no arm ddtree-b64 in this sweep"):
        plan_for(tmp_path, only=("ddtree-b64",))


def test_stream_estimates_grow_with_the_prompts_prefill(tmp_path: Path) -> None:
    def stream_est(prompt_tokens: int) -> float:
        made = settings.make_setting("qwen3-8b-random", scratch=tmp_path, prompt_tokens=prompt_tokens, write=False)
        plan = bp.plan_sweep(made, bp.BenchConfig(budgets=(32,), batch_sizes=(), concurrencies=(16,),
                                                  temperatures=(0.0,)))
        return plan.group("dflash").cells[0].est_s

    assert stream_est(8192) > stream_est(1024) + 0.2


def test_the_chain_control_is_judged_against_dflashs_offline_reference(tmp_path: Path) -> None:
    from ddtree_overlay.bench.supervision import reference_jobs

    alone = plan_for(tmp_path, batch_sizes=(1,), chain_control=True, only=("ddtree-b15-chain",))
    draft = ["--draft", str(alone.setting.draft)]
    assert reference_jobs(alone) == {"dflash": [*draft, "--algo", "dflash"]}
    both = plan_for(tmp_path, batch_sizes=(1,), budgets=(15,), chain_control=True)
    assert reference_jobs(both) == {
        "dflash": [*draft, "--algo", "dflash"], "ddtree-b15": [*draft, "--algo", "ddtree", "--budget", "15"],
    }


def test_a_setting_that_measured_its_first_flashinfer_start_plans_it(tmp_path: Path) -> None:
    # At the Qwen3.6-27B shape DFLASH's first flashinfer engine took 229-326 s to be ready on a
    # fresh machine, more than the first start's compiles elsewhere.
    plan = plan_for(tmp_path, "qwen3.6-27b-random", budgets=(15,), primer=False, baseline_attention_backend="flashinfer",
                    only=("dflash", "ddtree-b15"))
    cost = plan.setting.cost
    assert cost.first_compile_extra_s is not None and cost.first_compile_extra_s > cost.first_start_extra_s
    starts = {r.group.name: r.est_start_s for r in plan.runs}
    assert starts == {"dflash": cost.engine_start_s + cost.first_compile_extra_s, "ddtree-b15": cost.engine_start_s}
    assert cost.first_start_s(first=True, compiles=False) == cost.engine_start_s + cost.first_start_extra_s
