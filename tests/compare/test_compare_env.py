"""`compare --env`: the bench plan it builds from a run, the replay through the bench's engine
runner against a stand-in sglang, its records read back as `--records`, and its usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from bench_fakes import install_fake_sglang
from overlay_helpers import run_cli

from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench import settings, supervision
from ddtree_overlay.bench.plan_json import runner_plan
from ddtree_overlay.commands import bench as bench_module
from ddtree_overlay.commands import compare as compare_module
from ddtree_overlay.compare.records import acceptance_length
from ddtree_overlay.compare.runfile import read_run
from ddtree_overlay.compare.sglang_plan import replay_config, replay_plan
from ddtree_overlay.engine.errors import ExitCode

RUN = Path(__file__).with_name("data") / "ddtree-benchmark-fixture-dense.pt"
FIXTURES = Path(__file__).parents[2] / "ddtree_overlay" / "fixtures"
FAST_RUNNER = {"idle_gap_s": 0.01, "health_idle_s": 0.01}


def raw_run() -> dict[str, Any]:
    """The run file as torch reads it: the oracle the plan is checked against."""
    with torch.serialization.safe_globals([types.SimpleNamespace]):
        return torch.load(RUN, map_location="cpu", weights_only=True)


def test_the_replay_plan_is_what_the_run_recorded() -> None:
    raw = raw_run()
    args = raw["args"]
    prompts = [r["baseline"].output_ids[0, : r["baseline"].num_input_tokens].tolist() for r in raw["responses"]]
    budgets = [int(b) for b in args["tree_budget"].split(",")]
    plan = replay_plan(read_run(RUN), FIXTURES / "target", FIXTURES / "draft")
    runner = runner_plan(plan, deadline=None, profile_path=None)
    assert runner["prompts"] == prompts and (runner["target"], runner["draft"]) == (
        str(FIXTURES / "target"), str(FIXTURES / "draft")
    )
    arms = {arm["name"]: arm for arm in runner["arms"]}
    assert list(arms) == ["target-only", "dflash", *(f"ddtree-b{b}" for b in budgets)]
    assert [a["repeat"] for a in arms.values()] == [1] * len(arms)
    sampling = {"temperature": args["temperature"], "max_new_tokens": args["max_new_tokens"], "ignore_eos": False}
    for arm in arms.values():
        timed = [c for c in arm["cells"] if not c["top2"]]
        assert [(c["batch_size"], c["prompts"]) for c in timed] == [(1, len(prompts))]
        assert all(c["sampling"] == sampling for c in arm["cells"])
    assert [c["name"] for c in arms["target-only"]["cells"] if c["top2"]] == ["target-only/margins"]
    assert "speculative_algorithm" not in arms["target-only"]["engine"]
    assert arms["dflash"]["engine"]["speculative_algorithm"] == "DFLASH"
    for b in budgets:
        engine = arms[f"ddtree-b{b}"]["engine"]
        assert (engine["speculative_algorithm"], engine["speculative_ddtree_budget"]) == ("DDTREE", b)


def test_the_replay_engines_are_the_bench_fixture_engines_at_batch_1(tmp_path: Path) -> None:
    bench = bp.plan_sweep(
        settings.make_setting("fixture", scratch=tmp_path),
        bp.BenchConfig(budgets=(16, 64), batch_sizes=(1,), temperatures=(0.0,), baseline_attention_backend="triton"),
    )
    replay = replay_plan(read_run(RUN), FIXTURES / "target", FIXTURES / "draft")
    assert {g.name: g.engine for g in replay.groups} == {
        g.name: g.engine for g in bench.groups if g.name in {"target-only", "dflash", "ddtree-b16", "ddtree-b64"}
    }
    engine = replay.group("ddtree-b16").engine
    assert engine["attention_backend"] == "triton" and engine["cuda_graph_bs_decode"] == [1]
    assert {g.engine["attention_backend"] for g in replay.groups} == {"triton"}  # outputs compared, not speed


# --- the replay, through the bench's runner and a stand-in sglang ----------------------------


def replies(run, *, diverge_at: int | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """The stand-in's outputs: the run's own, with the rounds that give its acceptance; DDTREE
    B=64's output changed at ``diverge_at``."""
    engines: dict[str, dict[str, dict[str, Any]]] = {}
    for key in run.method_keys:
        engine = {"baseline": "target-only", "dflash": "DFLASH"}.get(key) or f"DDTREE-{key.removeprefix('ddtree_tb')}"
        engines[engine] = {}
        for turn in run.turns:
            gen = turn.methods[key]
            tokens = list(gen.tokens)
            accepted = acceptance_length(gen.acceptance_lengths, len(tokens))
            rounds = round((len(tokens) - 1) / accepted) if accepted else None
            if diverge_at is not None and engine == "DDTREE-64":
                tokens[diverge_at] = (tokens[diverge_at] + 1) % 256
            engines[engine][",".join(map(str, turn.prompt))] = {"tokens": tokens, "rounds": rounds}
    return engines


@pytest.fixture
def replay_env(sglang_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The env with a stand-in sglang for the runner, a GPU for the probe (the one seam bench's
    tests use too), the runner's pauses cut; ``behave(**FAKE_SGLANG)`` sets the stand-in."""
    monkeypatch.setenv("PYTHONPATH", str(install_fake_sglang(tmp_path / "fake")))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))
    monkeypatch.setattr(bench_module, "probe_gpu", lambda python: {"gpu": "Fake GPU", "torch": "0", "error": None})
    run_sweep = supervision.run_sweep
    monkeypatch.setattr(compare_module, "run_sweep", lambda *a, **k: run_sweep(*a, **k, runner_options=FAST_RUNNER))

    def behave(**behaviour: Any) -> None:
        monkeypatch.setenv("FAKE_SGLANG", json.dumps(behaviour))

    return sglang_env, behave


def compare_in(env: Path, out: Path, events: list | None = None):
    request = compare_module.CompareRequest(
        baseline=RUN, target=FIXTURES / "target", draft=FIXTURES / "draft", records=None, out=out, env=env
    )
    return compare_module.compare(request, on_event=(events if events is not None else []).append)


def test_the_sglang_replay_agrees_and_its_records_reanalyse_to_the_same_report(tmp_path: Path, replay_env) -> None:
    env, behave = replay_env
    assert run_cli("apply", "--env", str(env)).returncode == 0
    run = read_run(RUN)
    (tmp_path / "replies.json").write_text(json.dumps(replies(run)))
    behave(replies=str(tmp_path / "replies.json"))
    events: list = []
    result = compare_in(env, tmp_path / "out", events)
    assert (result.status, result.exit_code) == ("ok", 0), result.data
    assert [m["acceptance_ratio"] for m in result.data["methods"][1:]] == [pytest.approx(1.0)] * 3
    assert {m["greedy_equal"] for m in result.data["methods"]} == {8} and result.data["side"] == "sglang"
    assert [e["arm"] for e in events if e["event"] == "start"] == ["target-only", "dflash", "ddtree-b16", "ddtree-b64"]
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert [e.get("speculative_ddtree_budget") for e in engines] == [None, None, 16, 64]
    out = tmp_path / "out"
    assert str(out / "records.jsonl") in result.data["files"] and (out / "runner.log").exists()

    again = run_cli("compare", "--baseline", str(RUN), "--records", str(out / "records.jsonl"),
                    "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "compare.json").read_text() == (out / "compare.json").read_text()


@pytest.mark.parametrize(("margin", "code"), [(0.125, ExitCode.OK), (1.0, ExitCode.VERIFY_FAILED)])
def test_a_divergence_is_judged_by_the_margin_the_replays_target_only_recorded(
    tmp_path: Path, replay_env, margin: float, code: ExitCode
) -> None:
    env, behave = replay_env
    assert run_cli("apply", "--env", str(env)).returncode == 0
    (tmp_path / "replies.json").write_text(json.dumps(replies(read_run(RUN), diverge_at=5)))
    behave(replies=str(tmp_path / "replies.json"), margin=margin)
    result = compare_in(env, tmp_path / "out")
    assert result.exit_code == code
    b64 = next(m for m in result.data["methods"] if m["method"] == "ddtree_tb64")
    assert (b64["greedy_diverged"], b64["greedy_unexplained"]) == (8, 0 if code == ExitCode.OK else 8)
    row = next(r for r in result.data["prompts"] if r["method"] == "ddtree_tb64")
    assert row["divergence"]["index"] == 5 and row["divergence"]["margin"] == pytest.approx(margin)


def test_without_the_overlay_the_ddtree_arms_are_not_replayed(tmp_path: Path, replay_env) -> None:
    env, behave = replay_env
    (tmp_path / "replies.json").write_text(json.dumps(replies(read_run(RUN))))
    behave(replies=str(tmp_path / "replies.json"))
    result = compare_in(env, tmp_path / "out")
    assert (result.status, result.exit_code) == ("failed", ExitCode.VERIFY_FAILED)
    assert result.data["missing_arms"] == ["ddtree-b16", "ddtree-b64"]
    assert any("DDTREE arms skipped" in m and "ddtree-overlay apply" in m for m in result.messages)


def test_a_failed_engine_is_named_with_its_error(tmp_path: Path, replay_env) -> None:
    env, behave = replay_env
    assert run_cli("apply", "--env", str(env)).returncode == 0
    (tmp_path / "replies.json").write_text(json.dumps(replies(read_run(RUN))))
    behave(replies=str(tmp_path / "replies.json"), fail_start_budgets=[64])
    result = compare_in(env, tmp_path / "out")
    assert result.exit_code == ExitCode.VERIFY_FAILED and result.data["missing_arms"] == ["ddtree-b64"]
    assert "engine ddtree-b64: RuntimeError: fake start failure at B=64 (see runner.log)" in result.messages


# --- usage and env errors --------------------------------------------------------------------


def test_env_and_records_together_are_a_usage_error(tmp_path: Path) -> None:
    done = run_cli("compare", "--baseline", str(RUN), "--env", sys.executable, "--records", str(tmp_path / "r.jsonl"),
                   "--out", str(tmp_path / "out"))
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "--env and --records exclude each other" in done.stderr and not (tmp_path / "out").exists()


def test_an_env_without_sglang_is_refused_as_bench_refuses_it(tmp_path: Path, state_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    done = run_cli("compare", "--baseline", str(RUN), "--env", str(tmp_path / "bare"), "--out", str(tmp_path / "out"))
    bench = run_cli("bench", "--env", str(tmp_path / "bare"), "--out", str(tmp_path / "out"))
    assert done.returncode == bench.returncode == ExitCode.ENV_NOT_FOUND
    assert done.stderr.splitlines()[0] == bench.stderr.splitlines()[0]
    assert done.stderr.startswith("error: sglang is not installed in") and not (tmp_path / "out").exists()
    missing = run_cli("compare", "--baseline", str(RUN), "--env", str(tmp_path / "nope"))
    assert missing.returncode == ExitCode.ENV_NOT_FOUND and "env not found" in missing.stderr.splitlines()[0]


def test_without_a_gpu_the_replay_says_skipped(sglang_env: Path, tmp_path: Path) -> None:
    """The scratch env has sglang but no torch: nothing to run the engines on."""
    done = run_cli("compare", "--baseline", str(RUN), "--env", str(sglang_env), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "compare: skipped (no GPU)"
    assert done.stderr.strip().startswith("note: compare skipped (no GPU): ModuleNotFoundError")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("state", ["snapshot", "flat"])
def test_the_replay_records_the_hybrid_state_its_engines_inherit(monkeypatch, state: str) -> None:
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", state)
    assert replay_config(read_run(RUN)).hybrid_state == state
