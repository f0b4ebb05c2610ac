"""round_trace: engines per arm at a batch size, the waves' timings, and the side-by-side tables."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddtree_overlay.bench import round_trace
from ddtree_overlay.bench.arms import Arm
from ddtree_overlay.bench.round_trace import (
    engine_kwargs,
    fastest_decode,
    gpu_table,
    prompt_waves,
    table,
    timing_notes,
    wave_timing,
)

SETTING = SimpleNamespace(target=Path("/m/target"), draft=Path("/m/draft"), engine={"load_format": "dummy"}, hybrid=False)


@pytest.mark.parametrize(("batch_size", "graphs"), [(1, [1]), (16, [1, 16])])
def test_the_engine_captures_decode_graphs_for_one_request_and_the_wave(batch_size: int, graphs: list) -> None:
    kwargs = engine_kwargs(Arm.parse("ddtree-b15"), SETTING, batch_size=batch_size)
    assert kwargs["cuda_graph_bs_decode"] == graphs
    assert "max_running_requests" not in kwargs
    assert kwargs["speculative_draft_model_path"] == "/m/draft" and kwargs["load_format"] == "dummy"


def test_a_wave_wider_than_sglangs_speculative_cap_runs_at_once() -> None:
    assert engine_kwargs(Arm.parse("dflash"), SETTING, batch_size=64)["max_running_requests"] == 64


def test_prompts_go_in_whole_waves_and_come_around_again_when_too_few() -> None:
    prompts = [(1,), (2,), (3,)]
    assert prompt_waves(prompts, 1, 2) == [[[1]], [[2]]]  # batch 1: one prompt at a time, as before
    assert prompt_waves(prompts, 2, 3) == [[[1], [2]], [[3], [1]]]
    assert prompt_waves(prompts, 4, 1) == [[[1], [2], [3], [1]]]  # at least one wave


def test_a_waves_steps_are_its_longest_requests_rounds() -> None:
    metas = [
        [{"completion_tokens": 10, "spec_verify_ct": 4}, {"completion_tokens": 10, "spec_verify_ct": 5}],
        [{"completion_tokens": 10, "spec_verify_ct": 2}, {"completion_tokens": 10, "spec_verify_ct": 3}],
    ]
    assert wave_timing(metas, 0.9) == {
        "tokens": 40,
        "tok_per_s": 44.4,
        "step_ms": 112.5,  # 900 ms over 5 + 3 steps
        "tokens_per_step": 2.857,  # 40 tokens over 14 request rounds
    }
    # target-only reports no verify count: a step per token
    assert wave_timing([[{"completion_tokens": 8}]], 0.08)["step_ms"] == 10.0


def test_the_arms_step_is_its_fastest_timed_decode_and_a_disturbed_one_is_named() -> None:
    # 2026-12-06: a fresh machine's DFLASH engine timed one decode at 30.86 ms per step, its trace 11.5
    disturbed = {"tokens": 512, "tok_per_s": 32.7, "step_ms": 30.863, "tokens_per_step": 1.008}
    steady = {"tokens": 512, "tok_per_s": 103.4, "step_ms": 9.749, "tokens_per_step": 1.008}
    timed = fastest_decode([disturbed, steady])
    assert timed == steady | {"timed_step_ms": [30.863, 9.749]}
    assert fastest_decode([steady]) == steady  # one timed decode: the record as before
    close = fastest_decode([steady, steady | {"step_ms": 10.5}])
    notes = timing_notes([{"arm": "dflash"} | timed, {"arm": "ddtree-b32"} | close, {"arm": "plain"} | steady])
    assert notes == ["note: dflash's timed decodes took 30.863, 9.749 ms per step; its step is the fastest, 9.749"]


def gpu(count: int, kernel: float, families: dict, *, span: float | None = None, empty: int = 0, idle: dict | None = None) -> dict:
    g = {"per": "step", "count": count, "kernel_ms": kernel, "busy_ms": kernel, "families": families}
    if span is not None:
        g["span_ms"] = span
    if idle is not None:
        g["idle"] = idle
    return g | {
        "top_kernels": [("void at::native::reduce_kernel<512, 1>(int)", 0.2, 1.0)],
        "graphs": [{"graph": "graph 3", "launches": 1.0, "events": 300.0, "kernel_ms": 9.5, "span_ms": 9.8}],
        "graph_launches_without_kernels": empty,
    }


IDLE = {
    "idle_ms": 0.6, "inside_graphs_ms": 0.26, "launched_late_ms": 0.3, "queued_ms": 0.04,
    "largest": [{"before": "_draft_block_kernel", "kind": "launched_late", "ms": 0.2, "gaps": 1.0}],
    "by_stage": {"draft": {"idle_ms": 0.2, "launched_late_ms": 0.2}, "verify": {"idle_ms": 0.26, "inside_graphs_ms": 0.26}},
}

RECORDS = [
    {"arm": "dflash", "step_ms": 13.38, "trace": {"gpu": gpu(95, 12.0, {"gemm": 9.0, "attention": 2.0}, span=13.0)}},
    {"arm": "ddtree-b15", "step_ms": 16.0, "trace": {"gpu": gpu(96, 14.5, {"ddtree": 0.5, "gemm": 9.25, "attention": 3.5}, idle=IDLE)}},
    {"arm": "ddtree-b16", "step_ms": 16.67, "trace": {"gpu": gpu(96, 15.0, {"ddtree": 0.5, "gemm": 10.0, "attention": 3.5}, empty=4)}},
]


def test_the_gpu_table_sets_the_arms_side_by_side_with_each_ones_difference_from_the_first() -> None:
    lines = gpu_table(RECORDS)
    assert lines[3] == "| | dflash | ddtree-b15 | ddtree-b16 | Δ ddtree-b15 | Δ ddtree-b16 |"
    assert lines[4] == "|---|---|---|---|---|---|"
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and not line.startswith("| |")}
    assert rows["steps"] == "| steps | 95 | 96 | 96 |  |  |"
    assert rows["kernel ms"] == "| kernel ms | 12 | 14.5 | 15 | +2.500 | +3.000 |"
    assert rows["span ms"] == "| span ms | 13 |  |  |  |  |"
    # families in a fixed order, a family an arm lacks at 0
    families = [name for name in rows if name in ("ddtree", "attention", "gemm")]
    assert families == ["ddtree", "attention", "gemm"]
    assert rows["ddtree"] == "| ddtree | 0 | 0.5 | 0.5 | +0.500 | +0.500 |"
    assert rows["gemm"] == "| gemm | 9 | 9.25 | 10 | +0.250 | +1.000 |"
    assert rows["graph launches without kernels"] == "| graph launches without kernels | 0 | 0 | 4 |  |  |"
    assert "- at::native::reduce_kernel<512, 1>: 0.2 (1.0)" in lines
    assert "- graph 3: 1.0 per step, 9.5 ms in 300.0 events, span 9.8 ms" in lines
    # where the GPU idled: the kinds as rows, each traced arm's largest gaps and stages as lines
    assert rows["idle ms"] == "| idle ms |  | 0.6 |  |  |  |"
    assert rows["idle, launched late"] == "| idle, launched late |  | 0.3 |  |  |  |"
    assert "- _draft_block_kernel (launched_late): 0.2 (1.0)" in lines
    assert "- by the stage that launched the event ending the gap: draft 0.2, verify 0.26" in lines


def test_arms_without_a_gpu_trace_leave_the_gpu_table_out() -> None:
    assert gpu_table([{"arm": "dflash", "trace": {"steps": {}}}, {"arm": "x", "error": "boom"}]) == []


def test_the_stage_table_gains_the_gpu_columns() -> None:
    stage = {"rounds": 5, "host_ms": 1.2, "launches": 3.0, "top_ops": [("aten::mm", 2.0)]}
    gpu_stage = stage | {"gpu_ms": 9.5, "gpu_span_ms": 9.8, "gpu_events": 300.0, "gpu_families": {"gemm": 7.0, "attention": 2.5}}
    text = table([{"arm": "ddtree-b16", "trace": {"stages": {"verify": gpu_stage | {"wait_ms": 0.4}, "draft": stage}}}])
    assert "| verify | 1.2 | 0.4 | 3.0 | 9.5 | 9.8 | gemm 7.0, attention 2.5 | aten::mm 2.0 |" in text
    assert "| draft | 1.2 |  | 3.0 |  |  |  | aten::mm 2.0 |" in text  # a record from before wait_ms


def test_the_arm_table_names_each_ddtree_arms_paths() -> None:
    text = table([{"arm": "ddtree-b32", "paths": {"verify_attention": "splitkv", "hybrid_state": "flat"}, "tok_per_s": 90.0},
                  {"arm": "dflash", "tok_per_s": 80.0}])
    assert "| ddtree-b32 | split-KV verify, flat state | 90.0 |" in text
    assert "| dflash | \N{EN DASH} | 80.0 |" in text


def refusal(monkeypatch, capsys, tmp_path: Path, *args: str) -> str:
    """The last line round_trace writes to stderr when it refuses ``args``, exit code 2."""
    monkeypatch.setattr(sys, "argv", ["round_trace", "--out", str(tmp_path), *args])
    with pytest.raises(SystemExit) as exit_info:
        round_trace.main()
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_batch_size_below_one_is_refused_before_any_engine(monkeypatch, capsys, tmp_path: Path) -> None:
    assert refusal(monkeypatch, capsys, tmp_path, "--batch-size", "0").endswith("--batch-size must be at least 1, got 0")


def test_prompt_tokens_are_refused_for_a_setting_with_real_prompts(monkeypatch, capsys, tmp_path: Path) -> None:
    assert refusal(monkeypatch, capsys, tmp_path, "--prompt-tokens", "1024").endswith("not of fixture")
    assert not list(tmp_path.iterdir())  # no model written before the refusal


def test_prompt_tokens_set_a_random_settings_prompts(tmp_path: Path) -> None:
    from ddtree_overlay.bench.settings import make_setting

    setting = make_setting("qwen3.6-27b-random", scratch=tmp_path, prompt_tokens=1024, write=False)
    assert {len(p) for p in setting.prompts} == {1024}
