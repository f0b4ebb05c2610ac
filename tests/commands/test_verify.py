"""verify: import check in the env's interpreter, GPU smoke tier and its verdicts."""

from __future__ import annotations

import json
import sys
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
    "sglang.srt.layers.attention.linear.gdn_backend",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.model_executor.model_runner_kv_cache_mixin",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.speculative.ddtree_spec",
    "sglang.srt.speculative.ddtree_utils",
    "sglang.srt.speculative.ddtree_tree_stage",
    "sglang.srt.speculative.ddtree_kernels",
    "sglang.srt.speculative.ddtree_info",
    "sglang.srt.speculative.ddtree_worker_v2",
    "sglang.srt.speculative.ddtree_contract",
    "sglang.srt.speculative.ddtree_compat_base",
    "sglang.srt.speculative.ddtree_compat",
    "sglang.srt.speculative.ddtree_profile",
    "sglang.srt.speculative.ddtree_tp",
    "sglang.srt.speculative.ddtree_adaptive",
    "sglang.srt.speculative.ddtree_adaptive_tp",
    "sglang.srt.speculative.ddtree_budget",
    "sglang.srt.speculative.ddtree_envs",
    "sglang.srt.speculative.ddtree_hybrid",
    "sglang.srt.speculative.ddtree_gdn_tree",
    "sglang.srt.speculative.ddtree_cuda_graph_runner",
    "sglang.srt.speculative.ddtree_attention_choice",
    "sglang.srt.speculative.ddtree_verify_attention",
    "sglang.srt.speculative.ddtree_warmup",
    "sglang.srt.speculative.ddtree_kv_move",
    "sglang.srt.speculative.ddtree_grammar_path",
    "sglang.srt.speculative.ddtree_sampling",
]


def test_verify_refuses_an_env_without_the_overlay(sglang_env: Path) -> None:
    before = snapshot(sglang_env)
    done = run_cli("verify", "--env", str(sglang_env))
    assert done.returncode == ExitCode.VERIFY_FAILED
    assert "no overlay is applied" in done.stderr
    assert f"hint: run `ddtree-overlay apply --env {sglang_env}`" in done.stderr
    assert snapshot(sglang_env) == before


def test_an_env_without_sglangs_own_dependencies_is_blamed_not_the_overlay(sglang_env: Path) -> None:
    """A --no-deps install has no numpy or torch: every payload module is tried, and the
    verdict names the missing dependency once and the pip command that brings it."""
    apply(probe_env(sglang_env))
    done = run_cli("verify", "--env", str(sglang_env), "--import-only", "--json")
    envelope = json.loads(done.stdout)
    assert done.returncode == envelope["exit_code"] == ExitCode.SGLANG_DEPENDENCIES_MISSING
    imports = envelope["data"]["imports"]
    assert sorted(imports) == sorted(PAYLOAD_MODULES)
    assert all(error and "No module named" in error for error in imports.values()), imports
    assert sorted(envelope["data"]["missing_dependencies"]) == ["numpy"]
    assert [issue["code"] for issue in envelope["issues"]] == ["sglang_dependencies_missing"]
    assert "pip install sglang==0.5.14" in envelope["data"]["hint"]

    plain = run_cli("verify", "--env", str(sglang_env), "--import-only")
    assert plain.returncode == ExitCode.SGLANG_DEPENDENCIES_MISSING
    assert plain.stderr.count("error:") == 1 and plain.stderr.count("No module named") == 0, plain.stderr
    assert "sglang 0.5.14's own dependencies are missing" in plain.stderr and "`numpy`" in plain.stderr


def test_a_patched_module_that_fails_on_its_own_is_the_overlays_failure(
    sglang_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(probe_env(sglang_env))
    broken = "sglang.srt.speculative.ddtree_worker_v2"

    def import_check(python: Path, modules: list[str]) -> dict[str, object]:
        errors = {name: None for name in modules} | {broken: "ModuleNotFoundError: No module named 'sglang.srt.gone'"}
        return {"modules": errors, "missing": {broken: "sglang.srt.gone"}, "gpu": None}

    monkeypatch.setattr(verify_module, "run_import_check", import_check)
    result = verify_module.verify(probe_env(sglang_env), smoke=False)
    assert (result.status, result.exit_code) == ("failed", ExitCode.VERIFY_FAILED)
    assert [issue.message for issue in result.issues] == [f"`{broken}`: ModuleNotFoundError: No module named 'sglang.srt.gone'"]


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


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--preset", "nope"], "expected presets among first, lossless"),
        (["--preset", "lossless", "--only", "ddtree-b99"], "--only: no arm ddtree-b99 in lossless"),
        (["--only", "plain"], "--only picks arms of --preset"),
        (["--import-only", "--preset", "tp"], "exclude each other"),
    ],
)
def test_bad_preset_arguments_are_usage_errors(args: list[str], fragment: str) -> None:
    done = run_cli("verify", "--env", sys.executable, *args)
    assert done.returncode == ExitCode.USAGE and fragment in done.stderr, done.stderr


def test_smoke_refuses_more_prompts_than_the_fixture_holds(sglang_env: Path) -> None:
    done = run_cli("verify", "--env", str(sglang_env), "--smoke", "--prompts", "65")
    assert done.returncode == ExitCode.USAGE
    assert "--prompts" in done.stderr


def test_a_preset_the_envs_release_cannot_serve_is_refused_before_anything_runs(sglang_env: Path) -> None:
    before = snapshot(sglang_env)
    done = run_cli("verify", "--env", str(sglang_env), "--smoke", "--preset", "lossless,grammar")
    assert done.returncode == ExitCode.USAGE
    assert "error: preset grammar needs sglang 0.5.17 or later; this env has 0.5.14" in done.stderr
    assert snapshot(sglang_env) == before


@pytest.mark.parametrize(("version", "checks", "refused"), [
    ("0.5.17", verify_module.GpuChecks(presets=("grammar",)), None),
    ("0.5.17", verify_module.GpuChecks(presets=("logprobs",)), "preset logprobs needs sglang 0.5.18 or later"),
    ("0.5.23", verify_module.GpuChecks(presets=("logprobs", "grammar")), None),
    ("0.5.23", verify_module.GpuChecks(presets=("grammar",), target=Path("/models/Qwen3.6-27B")), "byte vocabulary"),
])
def test_which_presets_a_release_and_a_target_can_run(version, checks, refused) -> None:
    import types

    from ddtree_overlay.engine.errors import BadArguments

    env = types.SimpleNamespace(sglang=types.SimpleNamespace(version=version))
    if refused is None:
        verify_module._refuse_presets_out_of_reach(env, checks)
        return
    with pytest.raises(BadArguments, match=refused):
        verify_module._refuse_presets_out_of_reach(env, checks)
