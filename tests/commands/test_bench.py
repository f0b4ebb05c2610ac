"""bench: the CLI verb's arguments and outcomes, and the sweep (bench.supervision) run against a
stand-in sglang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_sglang
from overlay_helpers import run_cli

from ddtree_overlay.bench import analysis, reanalysis, settings, supervision
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench.sglang_env import inherited_sglang_env
from ddtree_overlay.commands import bench as bench_module
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import ExitCode
from ddtree_overlay.fixture_paths import EAGLE3_DRAFT

FAST_RUNNER = {"idle_gap_s": 0.01, "health_idle_s": 0.01}


def assert_usage_error(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert fragment in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--budgets", "0,4"], "expected comma-separated numbers >= 1"),
        (["--budgets", "4,many"], "expected comma-separated numbers"),
        (["--batch-sizes", ""], "expected comma-separated numbers >= 1"),
        (["--temperatures", "-1"], "expected comma-separated numbers >= 0"),
        (["--setting", "llama"], "expected one of fixture, hybrid, qwen3-8b-random"),
        (["--attention-backend", "fa3"], "expected one of triton, flashinfer"),
        (["--max-minutes", "0"], "--max-minutes"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--repeats", "0"], "--repeats"),
        (["--ddtree-adaptive", "32"], "at least two budgets to choose from"),
        (["--ddtree-adaptive", "8,0"], "expected comma-separated numbers >= 1"),
        (["--ddtree-schedule", "1=256"], "expected BATCH_SIZE:BUDGET steps"),
        (["--ddtree-schedule", "2:256"], "must start at 1 and ascend"),
        (["--ddtree-schedule", "1:256,8:64,4:8"], "must start at 1 and ascend"),
        (["--ddtree-schedule", "1:256,8:0"], "every budget must be >= 1"),
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], fragment: str) -> None:
    assert_usage_error(run_cli("bench", "--env", sys.executable, "--dry-run", *args), fragment)


def test_target_and_draft_go_together_and_only_with_the_fixture_setting(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")  # a model directory, as far as the CLI looks
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--target", str(tmp_path))
    assert_usage_error(done, "--target and --draft go together")
    done = run_cli(
        "bench", "--env", sys.executable, "--dry-run", "--setting", "qwen3-8b-random",
        "--target", str(tmp_path), "--draft", str(tmp_path),
    )
    assert_usage_error(done, "--setting qwen3-8b-random has its own")


def test_a_model_directory_without_a_config_is_a_usage_error_before_any_engine(tmp_path: Path) -> None:
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--target", str(tmp_path), "--draft", str(tmp_path))
    assert_usage_error(done, "holds no config.json: not a model directory")
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--eagle3-draft", str(tmp_path / "nope"))
    assert_usage_error(done, "is not a directory")


def test_prompts_and_new_tokens_beyond_the_targets_context_are_refused_before_any_engine(tmp_path: Path) -> None:
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--setting", "qwen3.6-27b-random",
                   "--prompt-tokens", "32700")
    assert_usage_error(done, "a prompt of 32700 tokens and 128 new tokens exceed the target's context of 32768 tokens")
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--max-new-tokens", "2000")
    assert_usage_error(done, "and 2000 new tokens exceed the target's context of 2048 tokens")
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([[7] * 2000] * 16))
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--prompts", str(prompts), "--max-new-tokens", "64")
    assert done.returncode == ExitCode.BAD_PROMPT_FILE, done.stderr
    assert "a prompt of 2000 tokens and 64 new tokens exceed the target's context of 2048 tokens" in done.stderr
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--setting", "qwen3.6-27b-random",
                   "--prompt-tokens", "8192", "--json")
    assert done.returncode == 0, done.stderr


def test_a_tp_size_the_targets_heads_do_not_split_over_is_refused_before_any_engine() -> None:
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--setting", "hybrid", "--tp-size", "4")
    assert_usage_error(done, "the target cannot run at --tp-size 4: its 6 Gated-DeltaNet value heads do not split")
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--setting", "hybrid", "--tp-size", "2", "--json")
    assert done.returncode == 0, done.stderr


def test_a_malformed_prompts_file_exits_14(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.json"
    prompts.write_text('[["not", "ids"]]')
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--prompts", str(prompts))
    assert done.returncode == ExitCode.BAD_PROMPT_FILE, done.stderr
    assert "is not a bench prompt file: it must hold a non-empty JSON list of non-empty token-id lists" in done.stderr


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--setting", "qwen3-8b-random",
                   "--out", str(out), "--max-minutes", "6")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("bench plan (qwen3-8b-random, 128 new tokens): 10 engines after an untimed primer")
    assert " 1. primer (ddtree-b32) " in done.stdout and " 2. dflash " in done.stdout
    assert "(expected to be cut by --max-minutes)" in done.stdout
    assert "note: by the estimates, --max-minutes 6 leaves out" in done.stderr
    assert not out.exists()
    envelope = json.loads(run_cli("bench", "--env", sys.executable, "--dry-run", "--json").stdout)
    assert envelope["command"] == ["bench"] and envelope["status"] == "ok"
    assert envelope["data"]["plan"]["groups"][0]["name"] == "target-only"


def test_ddtree_no_overlap_flag_plans_every_budget_without_overlap_too() -> None:
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--json", "--budgets", "8,32", "--ddtree-no-overlap")
    assert done.returncode == 0, done.stderr
    groups = {g["name"]: g for g in json.loads(done.stdout)["data"]["plan"]["groups"]}
    assert list(groups) == [
        "target-only", "dflash", "dflash-no-overlap", "ddtree-b32", "ddtree-b32-no-overlap", "ddtree-b8",
        "ddtree-b8-no-overlap",
    ]
    assert groups["ddtree-b8-no-overlap"]["engine"]["disable_overlap_schedule"] is True
    assert not groups["ddtree-b8-no-overlap"]["overlap"] and groups["ddtree-b8-no-overlap"]["budget"] == 8
    plain = json.loads(run_cli("bench", "--env", sys.executable, "--dry-run", "--json", "--budgets", "8").stdout)
    plain_names = [g["name"] for g in plain["data"]["plan"]["groups"]]
    assert plain_names == ["target-only", "dflash", "dflash-no-overlap", "ddtree-b8"]


def test_ddtree_adaptive_flag_plans_one_more_ddtree_arm() -> None:
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--json", "--budgets", "8", "--ddtree-adaptive", "32,8")
    assert done.returncode == 0, done.stderr
    groups = json.loads(done.stdout)["data"]["plan"]["groups"]
    assert [g["name"] for g in groups][-1] == "ddtree-adaptive-8-32"
    assert groups[-1]["engine"]["speculative_ddtree_adaptive_budgets"] == "8,32"
    assert groups[-1]["adaptive"] == [8, 32] and groups[-1]["budget"] is None


def test_ddtree_adaptive_flag_plans_its_arm_under_tensor_parallelism_too() -> None:
    args = ("--budgets", "8", "--ddtree-adaptive", "chain,32", "--tp-size", "2")
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--json", *args)
    assert done.returncode == 0, done.stderr
    engine = json.loads(done.stdout)["data"]["plan"]["groups"][-1]["engine"]
    assert engine["speculative_ddtree_adaptive_budgets"] == "chain,32" and engine["tp_size"] == 2


def test_ddtree_schedule_flag_plans_one_more_ddtree_arm_per_scheduling_mode() -> None:
    done = run_cli(
        "bench", "--env", sys.executable, "--dry-run", "--json", "--budgets", "8",
        "--ddtree-no-overlap", "--ddtree-schedule", "1:256, 8:64",
    )
    assert done.returncode == 0, done.stderr
    groups = json.loads(done.stdout)["data"]["plan"]["groups"]
    assert [g["name"] for g in groups][-2:] == ["ddtree-schedule-1x256-8x64", "ddtree-schedule-1x256-8x64-no-overlap"]
    assert groups[-1]["engine"]["speculative_ddtree_budget_schedule"] == "1:256,8:64"
    assert groups[-1]["schedule"] == "1:256,8:64" and groups[-1]["budget"] is None


def test_dry_run_with_repeats_plans_every_group_once_per_round() -> None:
    args = ("bench", "--env", sys.executable, "--dry-run", "--budgets", "8", "--no-primer")
    once = json.loads(run_cli(*args, "--json").stdout)["data"]["plan"]
    done = run_cli(*args, "--json", "--repeats", "3")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["data"]["plan"]
    order = ["target-only", "dflash", "dflash-no-overlap", "ddtree-b8"]
    assert [g["name"] for g in plan["groups"]] == order and plan["repeats"] == 3
    later = order[1:]  # target-only runs in round 1 only
    assert [(e["group"], e["repeat"]) for e in plan["engines"]] == (
        [(g, 1) for g in order] + [(g, 2) for g in reversed(later)] + [(g, 3) for g in later]
    )
    groups = {g["name"]: g for g in plan["groups"]}
    assert {name: g["expected_repeats"] for name, g in groups.items()} == {
        "target-only": 1, "dflash": 3, "dflash-no-overlap": 3, "ddtree-b8": 3,
    }
    # a later run costs what the group's first did: only target-only, first, paid the kernel
    # compiles and the margins cell, so rounds 2 and 3 add the other groups' estimates
    assert all(e["estimated_s"] == groups[e["group"]]["estimated_s"] for e in plan["engines"])
    later_round_s = sum(groups[g]["estimated_s"] for g in later)
    assert plan["estimated_minutes"] == pytest.approx(once["estimated_minutes"] + 2 * later_round_s / 60, abs=0.1)
    assert 2 * once["estimated_minutes"] < plan["estimated_minutes"] < 2.5 * once["estimated_minutes"]
    text = run_cli(*args, "--repeats", "2", "--max-minutes", "10.5")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("bench plan (fixture, 256 new tokens): 7 engines")
    assert lines[1].split() == ["1.", "target-only", "repeat", "1", "7", "cells", "~170", "s"]
    assert lines[5].split()[:4] == ["5.", "ddtree-b8", "repeat", "2"]  # round 2 starts with round 1's last
    assert lines[7].split()[:4] == ["7.", "dflash", "repeat", "2"] and lines[9].startswith("results would go to")
    assert [line for line in lines[1:8] if "target-only" in line] == [lines[1]]  # one engine start
    # 170 + 3 x 87 s in round 1, then about 88 s each: the 10.5-minute box cuts round 2's last engine
    assert lines[7].endswith("(expected to be cut by --max-minutes)") and not lines[6].endswith(")")
    assert "leaves out: dflash (repeat 2) (the runner" in text.stderr and "target-only" not in text.stderr


def test_dry_run_lists_the_primer_first_and_no_primer_or_a_tight_box_drops_it() -> None:
    args = ("bench", "--env", sys.executable, "--dry-run", "--budgets", "8")
    lines = run_cli(*args).stdout.splitlines()
    assert lines[0].startswith("bench plan (fixture, 256 new tokens): 4 engines after an untimed primer, ~")
    assert lines[1].split() == ["1.", "primer", "(ddtree-b8)", "1", "cells", "~149", "s"]  # 45 + 85 s to start cold, a warm-up wave, its cell
    assert lines[2].split() == ["2.", "target-only", "7", "cells", "~85", "s"]
    engines = json.loads(run_cli(*args, "--json").stdout)["data"]["plan"]["engines"]
    assert engines[0]["primer"] and not any(e.get("primer") for e in engines[1:])
    plain = run_cli(*args, "--no-primer")
    assert "primer" not in plain.stdout and plain.stdout.splitlines()[1].split()[1:] == ["target-only", "7", "cells", "~170", "s"]
    # 149 + 85 s do not fit in 3 minutes: no primer, and the note says why
    tight = run_cli(*args, "--max-minutes", "3")
    assert tight.returncode == 0 and "primer" not in tight.stdout
    assert "note: --max-minutes 3 cannot hold the untimed primer engine (~149 s) and one timed engine" in tight.stderr


def test_an_env_without_sglang_is_refused_with_exit_3(tmp_path: Path, state_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    done = run_cli("bench", "--env", str(tmp_path / "bare"), "--out", str(tmp_path / "out"))
    assert done.returncode == ExitCode.ENV_NOT_FOUND
    assert done.stderr.splitlines()[0].startswith("error: sglang is not installed in")
    assert not (tmp_path / "out").exists()


def test_without_a_gpu_the_bench_says_skipped(sglang_env: Path, tmp_path: Path) -> None:
    """The scratch env has sglang but no torch: nothing to run the engines on."""
    done = run_cli("bench", "--env", str(sglang_env), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "bench: skipped (no GPU)"
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("note: bench skipped (no GPU): ModuleNotFoundError")
    assert not (tmp_path / "out").exists()
    envelope = json.loads(run_cli("bench", "--env", str(sglang_env), "--json").stdout)
    assert (envelope["status"], envelope["exit_code"]) == ("skipped", 0)
    assert envelope["data"]["bench"] == "skipped (no GPU)"


# --- the sweep against the stand-in sglang --------------------------------------------------


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = install_fake_sglang(tmp_path / "fake")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))

    def behave(**behaviour: Any) -> None:
        monkeypatch.setenv("FAKE_SGLANG", json.dumps(behaviour))

    behave()
    return behave


def small_plan(tmp_path: Path, **config: Any) -> bp.SweepPlan:
    setting = settings.make_setting("fixture", scratch=tmp_path / "models")
    defaults = {"budgets": (8, 32), "batch_sizes": (1, 2), "temperatures": (0.0,),
                "max_new_tokens": 9, "prompts_per_cell": 3, "primer": False}
    return bp.plan_sweep(setting, bp.BenchConfig(**(defaults | config)))


def run(tmp_path: Path, plan: bp.SweepPlan, events: list | None = None) -> dict[str, Any]:
    return supervision.run_bench(
        Path(sys.executable), plan, tmp_path / "out", context={"gpu": "fake"},
        on_event=(events if events is not None else []).append, runner_options=FAST_RUNNER,
    )


def reanalyse(out: Path) -> dict[str, Any]:
    return dict(bench_module.reanalyse(out).data["report"])


def test_sweep_runs_every_cell_and_writes_the_report(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    plan = small_plan(tmp_path)
    events: list = []
    report = run(tmp_path, plan, events)
    out = tmp_path / "out"
    assert {r["status"] for r in report["cells"]} == {"ok"}
    assert [g["status"] for g in report["groups"]] == ["ok"] * 5
    assert report["issues"] == [] and report["parity"] == []
    engines = (tmp_path / "engines.log").read_text().splitlines()
    assert len(engines) == len(plan.groups)  # one engine per group, every cell served by it
    ddtree = {r["name"]: r for r in report["cells"]}["ddtree-b32/bs2/t0"]
    assert ddtree["profile"]["ms_per_round"]["verify"] == pytest.approx(2.0)
    assert ddtree["lossless"]["passed"] and ddtree["speedup_vs_target"] is not None
    assert events[0] == {"event": "plan", "cells": len(plan.cells), "groups": 5, "engines": 5}
    assert sum(e["event"] == "cell" for e in events) == len(plan.cells)
    result = bench_module._result(report, out)
    assert (result.status, result.exit_code) == ("ok", 0)
    assert (out / "bench.json").exists() and (out / "bench.md").read_text().startswith("# DDTREE bench")
    assert json.loads((out / "bench.json").read_text())["cells"] == json.loads(json.dumps(report["cells"]))
    assert "| DDTREE B=8 |" in result.data["table"]
    runner_plan = json.loads((out / "plan.json").read_text())
    assert runner_plan["idle_gap_s"] == 0.01 and runner_plan["profile_path"] == str(out / "profile.jsonl")


def test_a_crashed_runner_fails_its_engine_and_a_new_one_runs_the_rest(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    fake_sglang(crash_budgets=[32])  # the process dies inside ddtree-b32's first cell
    report = run(tmp_path, small_plan(tmp_path))
    groups = {g["name"]: g for g in report["groups"]}
    assert groups["ddtree-b32"]["status"] == "failed"
    assert "the runner process exited with 9" in groups["ddtree-b32"]["reason"]
    assert groups["ddtree-b8"]["status"] == "ok" and groups["dflash-no-overlap"]["status"] == "ok"
    assert any(issue.startswith("ddtree-b32: the engine failed") for issue in report["issues"])
    result = bench_module._result(report, tmp_path / "out")
    assert (result.status, result.exit_code) == ("failed", ExitCode.VERIFY_FAILED)


def test_a_wrong_greedy_output_fails_the_bench(tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    fake_sglang(diverge_budgets=[8], margin=3.0)
    report = run(tmp_path, small_plan(tmp_path))
    assert [i.split(":")[0] for i in report["issues"]] == ["ddtree-b8/bs1/t0", "ddtree-b8/bs2/t0"]


def test_a_finished_run_is_reanalysed_from_its_records(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    fake_sglang(diverge_budgets=[8], margin=3.0)
    report = run(tmp_path, small_plan(tmp_path))
    out = tmp_path / "out"
    bench_module._result(report, out)
    done = run_cli("bench", "--reanalyse", str(out), "--json")  # no --env: no GPU needed
    assert done.returncode == ExitCode.VERIFY_FAILED, done.stderr
    again = json.loads(done.stdout)["data"]["report"]
    assert again["cells"] == json.loads(json.dumps(report["cells"]))
    assert again["issues"] == report["issues"] != []
    assert again["notes"][-1].startswith("re-analysed from records.jsonl at commit ")
    assert json.loads((out / "bench.json").read_text())["notes"] == again["notes"]


def test_reanalysis_projects_with_an_acceptance_curve_and_refuses_a_bad_one(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    report = run(tmp_path, small_plan(tmp_path))
    out = tmp_path / "out"
    bench_module._result(report, out)
    assert json.loads((out / "bench.json").read_text())["projection"] is None  # a real pair: no default curve
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"budgets": {"8": 5.0}}))
    before = (out / "bench.json").read_text()
    refused = run_cli("bench", "--reanalyse", str(out), "--acceptance-curve", str(bad))
    assert refused.returncode == ExitCode.USAGE and 'needs a "dflash"' in refused.stderr
    assert (out / "bench.json").read_text() == before  # nothing written
    curve = tmp_path / "curve.csv"
    curve.write_text("8,5.0\n32,6.0\ndflash,4.0\n")
    done = run_cli("bench", "--reanalyse", str(out), "--acceptance-curve", str(curve), "--json")
    projection = json.loads((out / "bench.json").read_text())["projection"]
    assert done.returncode == 0, done.stderr
    assert projection["curve"]["budgets"] == {"8": 5.0, "32": 6.0}
    assert [c["batch_size"] for c in projection["columns"]] == [1, 2]
    assert "## Projection: DDTREE ÷ DFLASH with another pair's acceptance" in (out / "bench.md").read_text()


def test_no_overlap_ddtree_arms_run_without_overlap_and_survive_reanalysis(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    plan = small_plan(tmp_path, budgets=(8,), ddtree_no_overlap=True)
    report = run(tmp_path, plan)
    assert [(g["name"], g["status"]) for g in report["groups"]] == [
        ("target-only", "ok"), ("dflash", "ok"), ("dflash-no-overlap", "ok"), ("ddtree-b8", "ok"),
        ("ddtree-b8-no-overlap", "ok"),
    ]
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    ddtree = [e for e in engines if e.get("speculative_algorithm") == "DDTREE"]
    assert [e.get("disable_overlap_schedule") for e in ddtree] == [None, True]
    rows = {r["name"]: r for r in report["cells"]}
    row = rows["ddtree-b8-no-overlap/bs2/t0"]
    assert row["lossless"]["passed"] and row["profile"] is not None and not row["overlap"]
    assert report["issues"] == [] and report["config"]["ddtree_no_overlap"] is True
    out = tmp_path / "out"
    bench_module._result(report, out)
    again = reanalyse(out)
    assert [g["name"] for g in again["groups"]] == [g["name"] for g in report["groups"]]
    assert again["cells"] == json.loads(json.dumps(report["cells"]))
    assert again["fastest_modes"] == json.loads(json.dumps(report["fastest_modes"]))


def test_no_overlap_ddtree_arms_share_their_budgets_reference(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, budgets=(4, 8), ddtree_no_overlap=True)
    draft = ["--draft", str(plan.setting.draft)]
    assert supervision.reference_jobs(plan) == {
        "dflash": [*draft, "--algo", "dflash"],
        "ddtree-b8": [*draft, "--algo", "ddtree", "--budget", "8"],
        "ddtree-b4": [*draft, "--algo", "ddtree", "--budget", "4"],
    }
    loaded = supervision.load_references(plan, tmp_path)
    assert sorted(loaded) == ["ddtree-b4", "ddtree-b8", "dflash"]


def test_reference_runs_once_per_algorithm_and_budget_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    setting = settings.make_setting("fixture", scratch=tmp_path / "models", eagle3_draft=EAGLE3_DRAFT)
    config = bp.BenchConfig(budgets=(4,), batch_sizes=(1,), temperatures=(0.0,), max_new_tokens=4,
                            prompts_per_cell=1, primer=False)
    plan = bp.plan_sweep(setting, config)
    draft = ["--draft", str(setting.draft)]
    assert supervision.reference_jobs(plan) == {
        "dflash": [*draft, "--algo", "dflash"], "ddtree-b4": [*draft, "--algo", "ddtree", "--budget", "4"],
        "eagle3": ["--draft", str(EAGLE3_DRAFT), "--algo", "eagle3", "--num-steps", "3"],
    }
    events: list = []
    runs = supervision.start_references(Path(sys.executable), plan, tmp_path, deadline=None, on_event=events.append)
    assert runs is not None
    results = runs.wait()
    assert sorted(results) == ["ddtree-b4", "dflash", "eagle3"]
    assert results["ddtree-b4"]["config"]["device"] == "cpu" and results["ddtree-b4"]["config"]["limit"] == 1
    assert results["ddtree-b4"]["aggregate"]["tokens_per_round"] > 0
    assert results["eagle3"]["config"]["algo"] == "eagle3" and results["eagle3"]["config"]["draft"] == str(EAGLE3_DRAFT)
    assert {(e["key"], e["ok"]) for e in events} == {("dflash", True), ("ddtree-b4", True), ("eagle3", True)}


def test_precomputed_references_are_checked_against_the_sweep(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, budgets=(4, 8), max_new_tokens=4, prompts_per_cell=2, batch_sizes=(1,))
    prompts = plan.setting.prompts

    def reference(max_new_tokens: int = 4, first_prompt_len: int | None = None) -> dict[str, Any]:
        lens = [first_prompt_len or len(prompts[0]), len(prompts[1])]
        return {
            "config": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
            "prompts": [{"prompt_len": n, "accept_len_mean": 2.0} for n in lens],
            "aggregate": {"tokens_per_round": 2.0},
        }

    refs = tmp_path / "refs"
    refs.mkdir()
    (refs / "dflash.json").write_text(json.dumps(reference()))
    (refs / "ddtree-b4.json").write_text(json.dumps(reference(max_new_tokens=9)))
    (refs / "ddtree-b8.json").write_text(json.dumps(reference(first_prompt_len=1)))
    # a sweep with more budgets than were made: that key says so
    wide = small_plan(tmp_path, budgets=(4, 8, 16), max_new_tokens=4, prompts_per_cell=2, batch_sizes=(1,))
    loaded = supervision.load_references(wide, refs)
    assert loaded["dflash"]["aggregate"]["tokens_per_round"] == 2.0
    assert "max_new_tokens=9" in loaded["ddtree-b4"]["error"]
    assert "other prompts" in loaded["ddtree-b8"]["error"]
    assert loaded["ddtree-b16"]["error"].endswith("ddtree-b16.json does not exist")
    # a file that is no reference result: its key says so, and the sweep's report is still written
    (refs / "ddtree-b16.json").write_text("{")
    (refs / "ddtree-b4.json").write_text("[]")
    loaded = supervision.load_references(wide, refs)
    assert "ddtree-b16.json is no reference result: JSONDecodeError" in loaded["ddtree-b16"]["error"]
    assert "ddtree-b4.json is no reference result: AttributeError" in loaded["ddtree-b4"]["error"]


def test_a_reference_dir_replaces_the_runs_beside_the_sweep(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("references were started although --reference-dir was given")

    monkeypatch.setattr(supervision, "start_references", must_not_run)
    plan = small_plan(tmp_path, budgets=(8,))
    report = supervision.run_bench(
        Path(sys.executable), plan, tmp_path / "out", context={"gpu": "fake"},
        runner_options=FAST_RUNNER, reference_dir=tmp_path,
    )
    assert {row["status"] for row in report["parity"]} == {"missing"}


def test_random_weights_and_custom_pairs_get_no_reference(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3-8b-random", scratch=tmp_path)
    plan = bp.plan_sweep(setting, bp.BenchConfig(budgets=(8,)))
    assert supervision.start_references(Path(sys.executable), plan, tmp_path, deadline=None, on_event=print) is None


def test_bench_skips_ddtree_where_the_overlay_is_not_applied(
    sglang_env: Path, tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_module, "probe_gpu", lambda python: {"gpu": "Fake GPU", "torch": "0", "error": None})
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    monkeypatch.setattr(bench_module, "run_bench", _fast(supervision.run_bench))
    config = bp.BenchConfig(budgets=(8,), batch_sizes=(1,), temperatures=(0.0,), max_new_tokens=5, prompts_per_cell=1)
    request = bench_module.BenchRequest(config=config, out=tmp_path / "out")
    result = bench_module.bench(probe_env(sglang_env), request)
    assert result.status == "ok", result.issues
    assert [g["name"] for g in result.data["report"]["groups"]] == ["target-only", "dflash", "dflash-no-overlap"]
    assert any("DDTREE arms skipped" in m and "ddtree-overlay apply" in m for m in result.messages)
    assert result.data["report"]["context"]["gpu"] == "Fake GPU"
    again = bench_module.reanalyse(tmp_path / "out")  # the plan's notes are not in the records
    assert [n for n in again.messages if "DDTREE arms skipped" in n] == result.data["report"]["plan_notes"]


def _fast(run_bench):
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return run_bench(*args, **kwargs, runner_options=FAST_RUNNER)

    return wrapped


def test_the_watchdog_stops_a_runner_that_outlives_the_time_box(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    monkeypatch.setattr(supervision, "GRACE_S", 0.5)
    fake_sglang(sleep_s=60)  # every generate() hangs far past the deadline
    plan = small_plan(tmp_path, max_minutes=0.02, budgets=(8,))
    quick = replace(plan.setting.cost, engine_start_s=0, first_start_extra_s=0, engine_overhead_s=0)
    plan = bp.plan_sweep(replace(plan.setting, cost=quick), plan.config)
    started = time.monotonic()
    report = run(tmp_path, plan)
    assert time.monotonic() - started < 20
    first = report["groups"][0]
    assert first["status"] == "skipped" and first["reason"].startswith("time box (the runner was stopped")
    assert report["issues"] == []


def test_an_engine_whose_scheduler_raised_at_start_names_the_exception(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    fake_sglang(die_start_budgets=[32])
    report = run(tmp_path, small_plan(tmp_path))
    groups = {g["name"]: g for g in report["groups"]}
    assert groups["ddtree-b32"]["reason"] == (
        "the runner process exited with 9 while this engine ran: "
        "ValueError: fake state refusal at B=32 (see runner.log)"
    )
    assert groups["ddtree-b8"]["status"] == "ok"


def test_first_exception_reads_only_what_the_last_runner_wrote(tmp_path: Path) -> None:
    log = tmp_path / "runner.log"
    log.write_text("RuntimeError: an earlier runner's\n")
    start = log.stat().st_size
    with log.open("a") as f:
        f.write("warning: x\nValueError: " + "y" * 500 + "\nRuntimeError: Rank 0 scheduler died\n")
    cause = supervision.first_exception(log, start)
    assert cause.startswith("ValueError: yyy") and len(cause) == supervision.CAUSE_CHARS
    assert supervision.first_exception(log, log.stat().st_size) is None


def test_a_runner_that_records_nothing_fails_every_engine_in_turn(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, budgets=(8,))
    false = Path("/bin/false")
    report = supervision.run_bench(false, plan, tmp_path / "out", context={})
    assert [g["status"] for g in report["groups"]] == ["failed"] * len(plan.groups)
    assert all("exited with 1" in g["reason"] for g in report["groups"])
    assert len(report["issues"]) >= len(plan.groups)


def test_repeats_run_every_group_in_rounds_and_survive_reanalysis(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    plan = small_plan(tmp_path, budgets=(8,), repeats=2)
    events: list = []
    report = run(tmp_path, plan, events)
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    arms = [(e.get("speculative_algorithm"), e.get("disable_overlap_schedule")) for e in engines]
    order = [(None, None), ("DFLASH", None), ("DFLASH", True), ("DDTREE", None)]
    # a fresh engine per repeat, round 2 reversed and without target-only (round 1 only)
    assert arms == order + order[:0:-1]
    cells = 2 * len(plan.cells) - len(plan.group("target-only").cells)  # target-only's cells once
    assert events[0] == {"event": "plan", "cells": cells, "groups": 4, "engines": 7}
    assert sum(e["event"] == "cell" for e in events) == cells
    rows = {r["name"]: r for r in report["cells"]}
    row = rows["ddtree-b8/bs2/t0"]
    assert row["status"] == "ok" and row["measured_repeats"] == 2
    assert [e["repeat"] for e in row["repeats"]] == [1, 2] and all(e["tok_per_s"] for e in row["repeats"])
    assert row["tok_per_s"] == pytest.approx(sum(e["tok_per_s"] for e in row["repeats"]) / 2)
    assert [e["lossless_passed"] for e in row["repeats"]] == [True, True]
    assert [[r["repeat"] for r in g["repeats"]] for g in report["groups"]] == [[1]] + [[1, 2]] * 3
    assert {r["measured_repeats"] for r in report["cells"] if r["group"] == "target-only"} == {1}
    assert report["issues"] == [] and report["config"]["repeats"] == 2
    out = tmp_path / "out"
    bench_module._result(report, out)
    assert "| DDTREE B=8 | 2 | 0 |" in (out / "bench.md").read_text()
    again = reanalyse(out)
    assert again["config"]["repeats"] == 2
    assert again["cells"] == json.loads(json.dumps(report["cells"]))
    assert again["groups"] == json.loads(json.dumps(report["groups"]))


def test_runs_made_before_repeats_are_reanalysed_as_one_repeat(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    report = run(tmp_path, small_plan(tmp_path, budgets=(8,)))
    out = tmp_path / "out"
    bench_module._result(report, out)
    old_records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    (out / "records.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k != "repeat"}) + "\n" for r in old_records
    ))
    old_json = json.loads((out / "bench.json").read_text())
    del old_json["config"]["repeats"]
    (out / "bench.json").write_text(json.dumps(old_json))
    again = reanalyse(out)
    assert again["config"]["repeats"] == 1
    assert again["cells"] == json.loads(json.dumps(report["cells"]))
    assert {r["measured_repeats"] for r in again["cells"]} == {1}


def test_a_crashed_repeat_is_not_run_again_after_the_restart(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    fake_sglang(crash_budgets=[32])  # the process dies inside ddtree-b32's first cell, in round 1
    report = run(tmp_path, small_plan(tmp_path, repeats=2))
    groups = {g["name"]: g for g in report["groups"]}
    runs = {r["repeat"]: r for r in groups["ddtree-b32"]["repeats"]}
    assert runs[1]["status"] == "failed" and "the runner process exited with 9" in runs[1]["reason"]
    assert runs[2] == {"repeat": 2, "status": "skipped", "reason": "an earlier repeat of this engine failed",
                       "start_s": None, "warm_up_s": None, "requests_at_once": None, "health": None, "attention_backend": "triton",
                       "paths": None}
    assert groups["ddtree-b32"]["status"] == "failed"
    assert all(g["status"] == "ok" for name, g in groups.items() if name != "ddtree-b32")
    measured = {r["group"]: r["measured_repeats"] for r in report["cells"] if r["group"] != "ddtree-b32"}
    assert measured == {"target-only": 1, "dflash": 2, "dflash-no-overlap": 2, "ddtree-b8": 2}  # target-only: round 1
    assert not any("fewer than" in n for n in report["notes"])  # target-only is not short of its 1 repeat
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert [e.get("speculative_ddtree_budget") for e in engines].count(32) == 1


def test_a_schedule_run_is_reanalysed_with_its_schedule(tmp_path: Path) -> None:
    plan = small_plan(tmp_path, budget_schedule=((1, 32), (2, 8)))
    recorded = json.loads(json.dumps(analysis.analyse(plan, {}, {})["config"]))
    assert reanalysis.config_from_report(recorded) == plan.config


def test_bench_without_env_or_reanalyse_is_a_usage_error() -> None:
    assert_usage_error(run_cli("bench", "--dry-run"), "--env is required (unless --reanalyse RUN_DIR)")


# --- the untimed primer engine ---------------------------------------------------------------


def test_the_primer_engine_runs_first_and_stays_out_of_the_report_but_its_notes(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    plan = small_plan(tmp_path, primer=True)
    events: list = []
    report = run(tmp_path, plan, events)
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert len(engines) == len(plan.groups) + 1
    assert (engines[0]["speculative_algorithm"], engines[0]["speculative_ddtree_budget"]) == ("DDTREE", 32)
    assert [e["arm"] for e in events if e["event"] == "start"][:2] == ["primer", "target-only"]
    out = tmp_path / "out"
    lines = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["arm"]) for r in lines if r.get("primer")] == [("cell", "primer/bs1/t0"), ("engine", "primer")]
    assert [g["name"] for g in report["groups"]] == [g.name for g in plan.groups]
    assert not any(r["name"].startswith("primer") for r in report["cells"])
    assert report["primer"]["status"] == "ok" and report["primer"]["group"] == "ddtree-b32"
    assert report["issues"] == [] and report["config"]["primer"] is True
    bench_module._result(report, out)
    text = (out / "bench.md").read_text()
    assert "| primer (untimed): ddtree-b32 | ok |" in text and "an untimed primer engine (ddtree-b32's config" in text
    again = reanalyse(out)
    assert again["primer"] == json.loads(json.dumps(report["primer"]))
    assert again["cells"] == json.loads(json.dumps(report["cells"]))


def test_a_primer_that_crashes_the_runner_is_charged_to_the_primer_and_the_timed_engines_run(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    fake_sglang(crash_budgets=[32])  # the primer (B = 32's config) dies, and so does B = 32 itself
    report = run(tmp_path, small_plan(tmp_path, primer=True))
    assert report["primer"]["status"] == "failed"
    assert "the runner process exited with 9" in report["primer"]["reason"]
    groups = {g["name"]: g for g in report["groups"]}
    assert groups["ddtree-b32"]["status"] == "failed" and groups["ddtree-b8"]["status"] == "ok"
    assert not any("primer" in issue for issue in report["issues"])  # the timed engine's failure is the issue
    assert any(issue.startswith("ddtree-b32: the engine failed") for issue in report["issues"])
    assert any(n.startswith("an untimed primer engine (ddtree-b32's config, failed: the runner") for n in report["notes"])
    primer = next(json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()
                  if json.loads(line)["arm"] == "primer")
    assert primer["primer"] is True and primer["kind"] == "engine"


def test_sglangs_switches_in_the_bench_environment_reach_every_engine_the_report_and_the_launch_commands(
    tmp_path: Path, fake_sglang, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's plan stream set where the bench runs: every engine starts with it, and the
    report, its Engines line, the launch commands and a re-analysis all say so."""
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    for name in [name for name in os.environ if name.startswith("SGLANG_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SGLANG_ENABLE_OVERLAP_PLAN_STREAM", "1")
    plan = small_plan(tmp_path, sglang_env=inherited_sglang_env())
    report = run(tmp_path, plan)
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert engines and all(e.get("env:SGLANG_ENABLE_OVERLAP_PLAN_STREAM") == "1" for e in engines)
    assert report["config"]["sglang_env"] == {"SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1"}
    out = tmp_path / "out"
    result = bench_module._result(report, out)
    assert "Every engine's environment: `SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1`." in (out / "bench.md").read_text()
    launches = result.data["report"]["recommendation"]["launch"]
    assert launches and all(
        launch["command"].startswith("SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1 python -m sglang.launch_server") for launch in launches
    )
    assert reanalyse(out)["config"]["sglang_env"] == report["config"]["sglang_env"]
