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
    "sglang.srt.speculative.ddtree_hybrid",
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
