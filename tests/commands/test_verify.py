"""verify: import check in the env's interpreter, GPU smoke tier and its verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from overlay_helpers import run_cli, snapshot

from ddtree_overlay.commands import verify as verify_module
from ddtree_overlay.commands.apply import apply
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import ExitCode

PAYLOAD_MODULES = [
    "sglang.srt.speculative.spec_info",
    "sglang.srt.server_args",
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.speculative.ddtree_spec",
    "sglang.srt.speculative.ddtree_utils",
    "sglang.srt.speculative.ddtree_kernels",
    "sglang.srt.speculative.ddtree_info",
    "sglang.srt.speculative.ddtree_worker_v2",
    "sglang.srt.speculative.ddtree_contract",
    "sglang.srt.speculative.ddtree_compat",
    "sglang.srt.speculative.ddtree_profile",
    "sglang.srt.speculative.ddtree_tp",
    "sglang.srt.speculative.ddtree_adaptive",
    "sglang.srt.speculative.ddtree_cuda_graph_runner",
]


def test_verify_refuses_an_env_without_the_overlay(sglang_env: Path) -> None:
    before = snapshot(sglang_env)
    done = run_cli("verify", "--env", str(sglang_env))
    assert done.returncode == ExitCode.VERIFY_FAILED
    assert "no overlay is applied" in done.stderr
    assert f"hint: run `ddtree-overlay apply --env {sglang_env}`" in done.stderr
    assert snapshot(sglang_env) == before


def test_import_check_runs_in_the_env_and_names_each_failing_module(sglang_env: Path) -> None:
    """A --no-deps install has no torch: every payload module must be tried and reported."""
    apply(probe_env(sglang_env))
    done = run_cli("verify", "--env", str(sglang_env), "--import-only", "--json")
    envelope = json.loads(done.stdout)
    assert done.returncode == envelope["exit_code"] == ExitCode.VERIFY_FAILED
    imports = envelope["data"]["imports"]
    assert sorted(imports) == sorted(PAYLOAD_MODULES)
    assert all(error and "No module named" in error for error in imports.values()), imports
    assert envelope["data"]["smoke"] == "not requested"


def test_smoke_without_a_gpu_says_skipped(sglang_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apply(probe_env(sglang_env))
    monkeypatch.setattr(
        verify_module,
        "run_import_check",
        lambda python, modules: {"modules": dict.fromkeys(modules), "gpu": None},
    )
    result = verify_module.verify(probe_env(sglang_env), smoke=True)
    assert (result.status, result.exit_code) == ("ok", 0)
    assert result.data["smoke"] == "skipped (no GPU)"


def test_import_only_and_smoke_exclude_each_other(sglang_env: Path) -> None:
    done = run_cli("verify", "--env", str(sglang_env), "--import-only", "--smoke")
    assert done.returncode == ExitCode.USAGE


def record(name, outputs, ok=True, **extra):
    meta = [{"completion_tokens": len(o), "spec_verify_ct": 2} for o in outputs]
    return {"arm": name, "ok": ok, "outputs": outputs, "meta": meta, "tok_per_s": 100.0} | extra


def test_smoke_passes_when_speculative_arms_match_target_only() -> None:
    plain = record("target-only", [[1, 2, 3]], top2_margins=[[5.0, 5.0, 5.0]])
    verdict = verify_module.judge_smoke(
        [plain, record("DFLASH", [[1, 2, 3]]), record("DDTREE", [[1, 2, 3]])],
        expected=["target-only", "DFLASH", "DDTREE"],
    )
    assert verdict["passed"] and verdict["arms"]["DDTREE"]["identical"] == "1/1"
    assert verdict["arms"]["DDTREE"]["acceptance_length"] == pytest.approx(1.0)


def test_smoke_fails_on_a_crashed_arm_or_a_wide_margin_divergence() -> None:
    plain = record("target-only", [[1, 2, 3]], top2_margins=[[5.0, 5.0, 5.0]])
    crashed = {"arm": "DFLASH", "ok": False, "error": "RuntimeError: boom"}
    wrong = record("DDTREE", [[1, 9, 3]])
    verdict = verify_module.judge_smoke([plain, crashed, wrong], expected=["target-only", "DFLASH", "DDTREE"])
    assert not verdict["passed"]
    assert verdict["problems"][0] == "DFLASH: RuntimeError: boom"
    assert "largest top1-top2 margin 5.000" in verdict["problems"][1]


def test_smoke_plan_runs_the_three_arms_on_one_backend() -> None:
    plan = verify_module.smoke_plan(Path("/t"), Path("/d"), 32, [[1, 2]])
    assert [arm["name"] for arm in plan["arms"]] == ["target-only", "DFLASH", "DDTREE"]
    assert {arm["engine"]["attention_backend"] for arm in plan["arms"]} == {"triton"}
    assert plan["arms"][2]["engine"]["speculative_ddtree_budget"] == 32


def test_smoke_reports_each_divergence_with_its_margin() -> None:
    plain = record("target-only", [[1, 2, 3], [4, 5, 6]], top2_margins=[[5.0, 0.1, 5.0], [5.0] * 3])
    near_tie = record("DDTREE", [[1, 7, 3], [4, 5, 6]])
    verdict = verify_module.judge_smoke(
        [plain, record("DFLASH", [[1, 2, 3], [4, 5, 6]]), near_tie], expected=["target-only", "DFLASH", "DDTREE"]
    )
    assert verdict["passed"]
    [divergence] = verdict["arms"]["DDTREE"]["divergences"]
    assert (divergence["prompt"], divergence["index"], divergence["got"], divergence["expected"]) == (0, 1, 7, 2)
    assert divergence["margin"] == pytest.approx(0.1) and divergence["explained"]


@pytest.mark.parametrize(("prompts", "graphs"), [(1, [1]), (5, [1, 2, 4, 5]), (32, [1, 2, 4, 8, 16, 32])])
def test_smoke_captures_decode_graphs_only_for_the_batches_it_reaches(prompts: int, graphs: list) -> None:
    plan = verify_module.smoke_plan(Path("/t"), Path("/d"), 15, [[1]] * prompts, max_new_tokens=256)
    for arm in plan["arms"]:
        assert arm["engine"]["cuda_graph_bs_decode"] == graphs
        assert arm["sampling"]["max_new_tokens"] == 256


def test_smoke_refuses_more_prompts_than_the_fixture_holds(sglang_env: Path) -> None:
    done = run_cli("verify", "--env", str(sglang_env), "--smoke", "--prompts", "65")
    assert done.returncode == ExitCode.USAGE
    assert "--prompts" in done.stderr
