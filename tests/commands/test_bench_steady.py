"""bench's continuous-batching options on the command line, and a sweep of stream cells run by
bench.supervision against the stand-in sglang."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_sglang
from overlay_helpers import run_cli

from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench import settings, supervision
from ddtree_overlay.commands import bench as bench_module
from ddtree_overlay.engine.errors import ExitCode

DRY = ("bench", "--env", sys.executable, "--dry-run")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--concurrency", "0"], "expected comma-separated numbers >= 1"),
        (["--window-s", "0"], "--window-s"),
        (["--warmup-s", "-1"], "--warmup-s"),
        (["--engines-per-arm", "0"], "--engines-per-arm"),
        (["--engine-order", "random"], "expected one of alternate, cycle, shuffle"),
        (["--only", "ddtree-b5"], "--only: no arm ddtree-b5 in this sweep"),
        (["--prompt-tokens", "1024"], "--prompt-tokens sets the random prompts of qwen3-8b-random"),
        (["--prompt-tokens", "0", "--setting", "qwen3-8b-random"], "--prompt-tokens"),
    ],
)
def test_bad_stream_arguments_are_usage_errors(args: list[str], fragment: str, tmp_path: Path) -> None:
    done = run_cli(*DRY, "--out", str(tmp_path / "out"), *args)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert fragment in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_prompt_tokens_and_a_prompts_file_exclude_each_other(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.json"
    prompts.write_text("[[1, 2, 3]]")
    done = run_cli(*DRY, "--setting", "qwen3-8b-random", "--prompt-tokens", "8", "--prompts", str(prompts))
    assert done.returncode == ExitCode.USAGE and "exclude each other" in done.stderr, done.stderr


def test_a_27b_dry_run_under_the_snapshot_state_plans_streams_only_and_shows_the_snapshot_memory() -> None:
    done = run_cli(*DRY, "--setting", "qwen3.6-27b-random", "--budgets", "15,32", "--concurrency", "1,16",
                   "--temperatures", "0", "--engines-per-arm", "2", "--engine-order", "shuffle", "--chain-control",
                   "--only", "dflash,ddtree-b32,ddtree-b15-chain", "--prompt-tokens", "1024",
                   env_vars={"SGLANG_DDTREE_HYBRID_STATE": "snapshot"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bench plan (qwen3.6-27b-random, 128 new tokens): 6 engines (3 groups x 2 engines each")
    assert sum(" 2 cells " in line for line in lines) == 6  # c=1 and c=16, no waves, no margins
    assert ("verify recurrent state per GPU (DDTREE: snapshot, SGLANG_DDTREE_HYBRID_STATE; the others: snapshot), "
            "beside the live states:") in lines
    assert ("  ddtree-b32             snapshot: 33 x 147 MiB = 4.7 GiB per request, 80.4 GiB at concurrency 16 "
            "(+ 2.3 GiB live)") in lines
    assert ("  dflash                 snapshot: 16 x 147 MiB = 2.3 GiB per request, 4.6 GiB at concurrency 1 "
            "(+ 147 MiB live)") in lines
    plan = json.loads(run_cli(*DRY, "--json", "--setting", "qwen3-8b-random", "--concurrency", "4").stdout)
    assert plan["data"]["plan"]["state_memory"] is None and plan["data"]["plan"]["capacity"] is None  # not a hybrid


def test_a_27b_dry_run_by_default_shows_ddtrees_flat_memory_and_dflashs_snapshots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE", raising=False)  # the flat state is the default
    done = run_cli(*DRY, "--setting", "qwen3.6-27b-random", "--budgets", "32", "--concurrency", "16",
                   "--temperatures", "0", "--only", "dflash,ddtree-b32")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert ("verify recurrent state per GPU (DDTREE: flat, SGLANG_DDTREE_HYBRID_STATE; the others: snapshot), "
            "beside the live states:") in lines
    assert ("  ddtree-b32             flat: 33 x 3.58 MiB + 45 MiB scratch = 163 MiB per request, 2.7 GiB at "
            "concurrency 16 (+ 2.3 GiB live)") in lines
    assert ("  dflash                 snapshot: 16 x 147 MiB = 2.3 GiB per request, 39.0 GiB at concurrency 16 "
            "(+ 2.3 GiB live)") in lines
    assert lines[-2].startswith("DDTREE engines serve SGLang's cap of concurrent requests where their verify state "
                                "does not fit a cell's batch, as DFLASH's do (SGLANG_DDTREE_SERVE_FEWER_REQUESTS=1)")
    dflash_only = run_cli(*DRY, "--json", "--setting", "qwen3.6-27b-random", "--budgets", "32", "--concurrency", "16",
                          "--only", "dflash")
    assert json.loads(dflash_only.stdout)["data"]["plan"]["capacity"] is None  # no DDTREE engine to say it of


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("value", ["dense", ""])
def test_a_malformed_hybrid_state_stops_the_bench_before_it_plans(tmp_path: Path, dry_run: bool, value: str) -> None:
    args = DRY if dry_run else DRY[:-1]
    done = run_cli(*args, "--setting", "qwen3.6-27b-random", "--out", str(tmp_path / "out"),
                   env_vars={"SGLANG_DDTREE_HYBRID_STATE": value})
    assert done.returncode == ExitCode.BAD_PATCH_SET, done.stderr
    assert done.stderr.startswith(f"error: SGLANG_DDTREE_HYBRID_STATE={value!r} is not `flat` or `snapshot`\n")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "out").exists()


# --- a sweep of stream cells against the stand-in sglang -------------------------------------


def test_a_stream_sweep_runs_every_engine_in_its_rounds_and_reports_the_steady_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = install_fake_sglang(tmp_path / "fake")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))
    monkeypatch.setenv("FAKE_SGLANG", json.dumps({"request_s": 0.02}))
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    setting = settings.make_setting("fixture", scratch=tmp_path / "models")
    config = bp.BenchConfig(budgets=(8,), batch_sizes=(), concurrencies=(2,), temperatures=(0.0,), max_new_tokens=9,
                            repeats=2, engine_order="cycle", chain_control=True, warmup_s=0.1, window_s=0.3,
                            primer=False)
    plan = bp.plan_sweep(setting, config)
    events: list[dict[str, Any]] = []
    report = supervision.run_bench(Path(sys.executable), plan, tmp_path / "out", context={"gpu": "fake"},
                                   on_event=events.append, runner_options={"idle_gap_s": 0.01, "health_idle_s": 0.01})
    rows = {r["name"]: r for r in report["steady"]["rows"]}
    assert set(rows) == {f"{g.name}/c2/t0" for g in plan.groups}
    assert all(r["status"] == "ok" and r["measured_engines"] == 2 for r in rows.values())
    assert rows["ddtree-b8/c2/t0"]["vs_dflash"]["ratio"] > 0 and rows["ddtree-b8/c2/t0"]["profile"]
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert len(engines) == 2 * len(plan.groups)  # target-only too: its stream runs every round
    assert [e.get("env:SGLANG_DDTREE_TREE_SHAPE") for e in engines] == [None] * len(engines)  # not logged by default
    starts = [e["arm"] for e in events if e["event"] == "start"]
    assert starts == [g.name for g in plan.groups] * 2  # cycle: the same order every round
    result = bench_module._result(report, tmp_path / "out")
    assert result.exit_code == 0, report["issues"]
    text = (tmp_path / "out" / "bench.md").read_text()
    assert "## Steady-state serving" in text and "| DDTREE B=15 chain control |" in text
