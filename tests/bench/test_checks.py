"""bench.checks: the smoke and the GPU acceptance presets, their arms and their verdicts.

The presets run end to end here against the stand-in sglang of `bench_fakes` (CPU, no model):
one runner per arm, the records and verdicts written after every arm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_sglang

from ddtree_overlay.bench import check_presets, checks
from ddtree_overlay.bench.arms import DDTREE
from ddtree_overlay.bench.engine_paths import ran_paths

PYTHON = Path(sys.executable)


def budgets_used(profile_path: str | None, record: dict) -> dict[str, int] | None:
    return checks.profiled(checks.arm_windows(profile_path, record), record)["budgets"]


def test_an_arm_counts_the_budgets_of_the_profile_windows_written_while_its_engine_lived(tmp_path: Path) -> None:
    profile = tmp_path / "profile.jsonl"

    def window(t_first: float, budgets: dict[str, int]) -> dict:  # as ddtree_profile writes one
        rounds = sum(budgets.values())
        return {"t_first": t_first, "t_last": t_first + 1.0, "rounds": rounds, "requests": rounds,
                "cuda_graph_rounds": rounds, "ms_sum": {"round": 2.0 * rounds}, "budgets": budgets}

    windows = [
        window(5.0, {"64": 9}),  # the arm before
        window(12.0, {"32": 40, "8": 3}),
        window(15.0, {"32": 10, "128": 2}),
        window(25.0, {"8": 1}),  # the arm after
    ]
    profile.write_text("".join(json.dumps(w) + "\n" for w in windows))
    arm = {"t_start": 10.0, "t_end": 20.0}
    assert budgets_used(str(profile), arm) == {"8": 3, "32": 50, "128": 2}
    assert budgets_used(None, arm) is None
    assert budgets_used(str(profile), {"t_start": 30.0, "t_end": 40.0}) is None
    assert budgets_used(str(profile), {}) is None  # a record from before t_start was kept


def test_a_check_arm_names_the_ddtree_paths_its_engines_profile_windows_name(tmp_path: Path) -> None:
    profile = tmp_path / "profile.jsonl"
    windows = [
        {"t_first": 5.0, "t_last": 6.0, "paths": {"verify_attention": "full-mask"}},  # the arm before
        {"t_first": 12.0, "t_last": 13.0, "paths": {"verify_attention": "splitkv", "hybrid_state": "flat"}},
        {"t_first": 25.0, "t_last": 26.0, "paths": {"verify_attention": "full-mask"}},  # the arm after
    ]
    profile.write_text("".join(json.dumps(w) + "\n" for w in windows))
    arm = {"t_start": 10.0, "t_end": 20.0}
    assert [w["t_first"] for w in checks.arm_windows(str(profile), arm)] == [12.0]
    assert ran_paths(checks.arm_windows(str(profile), arm)) == {"verify_attention": "splitkv", "hybrid_state": "flat"}
    assert checks.arm_windows(str(profile), {}) == []
    summary = {"arms": {"ddtree-b32": {"ok": True, "tok_per_s": 1.0, "mean_acceptance_length": 2.0,
                                       "paths": {"verify_attention": "splitkv", "hybrid_state": "flat"}},
                        "plain": {"ok": True, "tok_per_s": 1.0, "mean_acceptance_length": 1.0, "paths": None}},
               "lossless": []}
    view = checks.arms_view(summary)
    assert view["ddtree-b32"]["ddtree_paths"] == "split-KV verify, flat state" and "ddtree_paths" not in view["plain"]


def test_the_adaptive_preset_checks_lossless_overlap_sync_and_sampling() -> None:
    arms = {arm.name: arm.runner_arm(256) for arm in check_presets.PRESETS["adaptive"]}
    assert arms["ddtree-adaptive"]["engine"]["speculative_ddtree_adaptive_budgets"] == "8,32,128"
    assert arms["ddtree-adaptive"]["env"] == {"SGLANG_DDTREE_SYNC_DEBUG": "error"}
    assert arms["ddtree-adaptive-no-overlap"]["engine"]["disable_overlap_schedule"] is True
    assert {"plain", "plain-t1", "ddtree-adaptive-t1"} <= set(arms)
    sampled = arms["ddtree-adaptive-t1"]
    assert (sampled["repeat"], sampled["prompts"], sampled["sampling"]["temperature"]) == (512, 1, 1.0)
    assert sampled["engine"]["max_running_requests"] == 32


def test_the_tp_preset_runs_adaptive_widths_with_the_chain_at_tp_2_judged_against_plain() -> None:
    (arm,) = [arm for arm in check_presets.PRESETS["tp"] if arm.name == "ddtree-adaptive-tp2"]
    engine = arm.runner_arm(256)["engine"]
    assert engine["speculative_ddtree_adaptive_budgets"] == "chain,32,128" and engine["tp_size"] == 2
    assert arm.baseline == "plain" and arm.tp_of is None  # its widths follow its own timings


def test_the_hybrid_flat_preset_sets_the_state_switch_per_arm() -> None:
    arms = {arm.name: arm.runner_arm(128) for arm in check_presets.PRESETS["hybrid-flat"]}
    assert arms["ddtree-b32-snapshot"]["env"] == {"SGLANG_DDTREE_HYBRID_STATE": "snapshot"}
    assert arms["ddtree-b32-flat"]["env"] == {"SGLANG_DDTREE_HYBRID_STATE": "flat"}
    assert arms["ddtree-adaptive-flat"]["env"] == {
        "SGLANG_DDTREE_HYBRID_STATE": "flat", "SGLANG_DDTREE_SYNC_DEBUG": "error"
    }
    assert arms["ddtree-adaptive-snapshot"]["env"] == {
        "SGLANG_DDTREE_HYBRID_STATE": "snapshot", "SGLANG_DDTREE_SYNC_DEBUG": "error"
    }
    assert arms["ddtree-b32-flat-t1"]["sampling"]["temperature"] == 1.0
    assert "env" not in arms["plain"]


def test_the_hybrid_preset_names_the_snapshot_state_and_hybrid_settings_runs_the_default() -> None:
    """The flat state is the payload's default: `hybrid` (SGLang's tree kernels, as its recorded
    runs had them) sets the snapshot state on every DDTREE engine, its fallback too; the other
    serving settings run whatever the default is."""
    ddtree = [arm for arm in check_presets.PRESETS["hybrid"] if arm.arm.algorithm == DDTREE]
    engines = ddtree + [arm.on_fail for arm in ddtree if arm.on_fail]
    assert {arm.name for arm in engines} == {
        "ddtree-b32", "ddtree-b32-eager", "ddtree-b16", "ddtree-adaptive", "ddtree-b32-t1"
    }
    for arm in engines:
        assert arm.runner_arm(128)["env"]["SGLANG_DDTREE_HYBRID_STATE"] == "snapshot", arm.name
    for arm in check_presets.PRESETS["hybrid-settings"]:
        assert "SGLANG_DDTREE_HYBRID_STATE" not in arm.runner_arm(128).get("env", {}), arm.name


def test_the_arms_the_gpu_scripts_name_are_in_their_presets() -> None:
    """scripts/gpu/evidence.sh's default arms, and every preset's arm names, are stable."""
    lossless = {arm.name for arm in check_presets.PRESETS["lossless"]}
    assert {"plain", "ddtree-b32", "ddtree-b32-page16", "plain-t1", "ddtree-b32-t1"} <= lossless
    for name, arms in check_presets.PRESETS.items():
        names = [arm.name for arm in arms]
        assert len(names) == len(set(names)), name
        for arm in arms:
            assert arm.baseline in (None, *names, "plain"), (name, arm.name)


def record(name, outputs, ok=True, **extra):
    meta = [{"completion_tokens": len(o), "spec_verify_ct": 2} for o in outputs]
    return {"arm": name, "ok": ok, "outputs": outputs, "meta": meta, "tok_per_s": 100.0} | extra


def test_the_summary_judges_what_ran_so_far_and_near_ties_pass() -> None:
    greedy = {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True}
    arms = check_presets.PRESETS["adaptive"]
    plain = record("plain", [[1, 2, 3, 4], [5, 6, 7, 8]], sampling=greedy,
                   top2_margins=[[0.5] * 4, [0.5, 0.0, 0.5, 0.5]])
    assert checks.summarize([plain], arms, None)["lossless"] == []
    # the second arm (after which the time box struck) diverges where the target's top two tie
    ddtree = record("ddtree-adaptive", [[1, 2, 3, 4], [5, 9, 7, 8]], sampling=greedy)
    summary = checks.summarize([plain, ddtree], arms, None)
    (verdict,) = summary["lossless"]
    assert (verdict["arm"], verdict["identical"], verdict["unexplained"], verdict["passed"]) == (
        "ddtree-adaptive", 1, 0, True,
    )
    assert summary["problems"] == []
    assert checks.arms_view(summary)["ddtree-adaptive"]["identical"] == "1/2"


def run_presets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: dict[str, Any], *names: str,
    preset: str = "lossless", prompts: int = 2,
):
    root = install_fake_sglang(tmp_path / "fake")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_SGLANG", json.dumps(behaviour))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))
    events: list[dict[str, Any]] = []
    summary = checks.run_checks(
        PYTHON,
        check_presets.preset_arms((preset,), names),
        out=tmp_path / "out",
        target=Path("/t"),
        draft=Path("/d"),
        prompts=[[1, 2, 3], [4, 5], [6], [7, 8]][:prompts],
        max_new_tokens=6,
        reference_dir=None,
        on_arm=events.append,
    )
    return summary, events


def test_presets_run_one_runner_per_arm_and_write_the_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, events = run_presets(tmp_path, monkeypatch, {}, "plain", "ddtree-b15", "dflash")
    assert [e["arm"] for e in events if e.get("event") != "start"] == ["plain", "dflash", "ddtree-b15"]  # preset order
    assert [e["arm"] for e in events if e.get("event") == "start"] == ["plain", "dflash", "ddtree-b15"]
    assert summary["problems"] == [] and {v["arm"] for v in summary["lossless"]} == {"dflash", "ddtree-b15"}
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    assert len((tmp_path / "out" / "arms.jsonl").read_text().splitlines()) == 3


def test_each_summary_lists_the_arms_not_run_yet_so_a_cut_off_run_says_what_it_missed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the H200 (2026-12-04) a preset cut off by the call's time limit left a summary.json
    with no problems and no word of its T = 1 arms, which had never run."""
    seen: list[list[str]] = []
    summary_path = tmp_path / "out" / "summary.json"

    def on_arm(event: dict[str, Any]) -> None:
        if event.get("event") == "start" and summary_path.exists():  # the summary of the arms before
            seen.append(json.loads(summary_path.read_text())["not_run"])

    root = install_fake_sglang(tmp_path / "fake")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_SGLANG", "{}")
    summary = checks.run_checks(
        PYTHON, check_presets.preset_arms(("lossless",), ("plain", "dflash", "ddtree-b15")),
        out=tmp_path / "out", target=Path("/t"), draft=Path("/d"), prompts=[[1, 2, 3]], max_new_tokens=4,
        reference_dir=None, on_arm=on_arm,
    )
    assert seen == [["dflash", "ddtree-b15"], ["ddtree-b15"]] and summary["not_run"] == []


def test_a_failed_ddtree_arm_runs_its_fallback_and_skips_later_ddtree_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, events = run_presets(
        tmp_path, monkeypatch, {"fail_start_budgets": [32]}, "plain", "ddtree-b32", "ddtree-b15"
    )
    outcomes = {e["arm"]: (e["ok"], e.get("error") or "") for e in events if e.get("event") != "start"}
    assert outcomes["ddtree-b32"][0] is False and outcomes["ddtree-b32-eager"][0] is False
    assert outcomes["ddtree-b15"] == (False, "skipped: an earlier DDTREE arm failed")
    assert [p.split(":")[0] for p in summary["problems"]] == ["ddtree-b32", "ddtree-b32-eager"]


def test_a_diverging_arm_is_a_problem_naming_its_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary, _ = run_presets(tmp_path, monkeypatch, {"diverge_budgets": [15]}, "plain", "ddtree-b15")
    (problem,) = summary["problems"]
    assert problem.startswith("ddtree-b15: 2 divergence(s) from plain beyond bf16 noise")


def test_smoke_passes_when_speculative_arms_match_target_only() -> None:
    plain = record("target-only", [[1, 2, 3]], top2_margins=[[5.0, 5.0, 5.0]])
    verdict = checks.judge_smoke(
        [plain, record("DFLASH", [[1, 2, 3]]), record("DDTREE", [[1, 2, 3]])],
        expected=["target-only", "DFLASH", "DDTREE"],
    )
    assert verdict["passed"] and verdict["arms"]["DDTREE"]["identical"] == "1/1"
    assert verdict["arms"]["DDTREE"]["acceptance_length"] == pytest.approx(1.0)


def test_smoke_fails_on_a_crashed_arm_or_a_wide_margin_divergence() -> None:
    plain = record("target-only", [[1, 2, 3]], top2_margins=[[5.0, 5.0, 5.0]])
    crashed = {"arm": "DFLASH", "ok": False, "error": "RuntimeError: boom"}
    wrong = record("DDTREE", [[1, 9, 3]])
    verdict = checks.judge_smoke([plain, crashed, wrong], expected=["target-only", "DFLASH", "DDTREE"])
    assert not verdict["passed"]
    assert verdict["problems"][0] == "DFLASH: RuntimeError: boom"
    assert "largest top1-top2 margin 5.000" in verdict["problems"][1]


def test_smoke_plan_runs_the_three_arms_on_one_backend() -> None:
    plan = checks.smoke_plan(Path("/t"), Path("/d"), 32, [[1, 2]], 64)
    assert [arm["name"] for arm in plan["arms"]] == ["target-only", "DFLASH", "DDTREE"]
    assert {arm["engine"]["attention_backend"] for arm in plan["arms"]} == {"triton"}
    assert plan["arms"][2]["engine"]["speculative_ddtree_budget"] == 32


def test_smoke_reports_each_divergence_with_its_margin() -> None:
    plain = record("target-only", [[1, 2, 3], [4, 5, 6]], top2_margins=[[5.0, 0.1, 5.0], [5.0] * 3])
    near_tie = record("DDTREE", [[1, 7, 3], [4, 5, 6]])
    verdict = checks.judge_smoke(
        [plain, record("DFLASH", [[1, 2, 3], [4, 5, 6]]), near_tie], expected=["target-only", "DFLASH", "DDTREE"]
    )
    assert verdict["passed"]
    [divergence] = verdict["arms"]["DDTREE"]["divergences"]
    assert (divergence["prompt"], divergence["index"], divergence["got"], divergence["expected"]) == (0, 1, 7, 2)
    assert divergence["margin"] == pytest.approx(0.1) and divergence["explained"]


@pytest.mark.parametrize(("prompts", "graphs"), [(1, [1]), (5, [1, 2, 4, 5]), (32, [1, 2, 4, 8, 16, 32])])
def test_smoke_captures_decode_graphs_only_for_the_batches_it_reaches(prompts: int, graphs: list) -> None:
    plan = checks.smoke_plan(Path("/t"), Path("/d"), 15, [[1]] * prompts, max_new_tokens=256)
    for arm in plan["arms"]:
        assert arm["engine"]["cuda_graph_bs_decode"] == graphs
        assert arm["sampling"]["max_new_tokens"] == 256


def test_the_splitkv_preset_sets_the_switch_on_each_split_kv_engine_only() -> None:
    arms = {arm.name: arm.runner_arm(128) for arm in check_presets.PRESETS["splitkv"]}
    split = {name for name, arm in arms.items() if arm.get("env", {}).get("SGLANG_DDTREE_VERIFY_ATTENTION") == "splitkv"}
    assert split == {name for name in arms if "splitkv" in name}
    assert {"ddtree-b32-extend", "plain", "plain-t1"} <= set(arms) - split
    assert arms["ddtree-b32-extend"]["env"]["SGLANG_DDTREE_VERIFY_ATTENTION"] == "extend"
    assert arms["ddtree-b32-splitkv"]["engine"]["attention_backend"] == "triton"
    assert arms["ddtree-b32-splitkv-page16"]["engine"]["page_size"] == 16
    assert arms["ddtree-adaptive-splitkv"]["env"]["SGLANG_DDTREE_SYNC_DEBUG"] == "error"
    assert arms["ddtree-b32-splitkv-t1"]["sampling"]["temperature"] == 1.0


def test_the_grammar_preset_sends_each_prompt_its_regex_in_turn_with_the_byte_tokenizer() -> None:
    arms = {arm.name: arm for arm in check_presets.PRESETS["grammar"]}
    assert {arm.baseline for name, arm in arms.items() if name != "plain-grammar"} == {"plain-grammar"}
    for name, arm in arms.items():
        runner = arm.runner_arm(256)
        engine = runner["engine"]
        assert (engine["grammar_backend"], engine["skip_tokenizer_init"]) == ("xgrammar", False), name
        assert (Path(engine["tokenizer_path"]) / "tokenizer.json").is_file()
        assert runner["sampling_cycle"] == [
            {"regex": check_presets.LINE_REGEX}, {"regex": check_presets.DIGITS_REGEX}, {},
        ]
        # the tree goes to the host for the bitmask: no sync guard
        switches = {"-overlap": {"SGLANG_DDTREE_GRAMMAR_OVERLAP": "1"}, "-path": {"SGLANG_DDTREE_GRAMMAR_MASK": "path"}}
        assert runner.get("env", {}) == next((env for end, env in switches.items() if name.endswith(end)), {})
    assert arms["dflash-grammar"].arm.algorithm == "DFLASH" and arms["plain-grammar"].top2
    assert "sampling_cycle" not in check_presets.PRESETS["lossless"][0].runner_arm(256)


GRAMMAR_OUTPUTS = {check_presets.LINE_REGEX: "    return x\n", check_presets.DIGITS_REGEX: "12,345;"}


def test_grammar_arms_pass_when_every_constrained_output_matches_its_regex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, _ = run_presets(
        tmp_path, monkeypatch, {"regex_outputs": GRAMMAR_OUTPUTS}, preset="grammar", prompts=4
    )
    assert summary["problems"] == [] and summary["not_run"] == []
    verdicts = {v["arm"]: (v["constrained"], v["matched"]) for v in summary["grammar"]}
    # prompts 0 and 3 take the line regex, prompt 1 the digits, prompt 2 none
    assert verdicts == {name: (3, 3) for name in verdicts} and len(verdicts) == 6
    records = {r["arm"]: r for r in checks.read_arms(tmp_path / "out" / "arms.jsonl")}
    plain = records["plain-grammar"]
    assert plain["outputs"][1] == [*b"12,345;", 257] and len(plain["outputs"][2]) == 6  # unconstrained: its length
    assert all(report["passed"] for report in summary["lossless"])
    assert checks.arms_view(summary)["ddtree-b32-grammar"]["grammar_matched"] == "3/3"


def test_a_grammar_arm_whose_outputs_leave_the_regex_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    behaviour = {"regex_outputs": GRAMMAR_OUTPUTS, "regex_break_budgets": [32]}
    summary, _ = run_presets(
        tmp_path, monkeypatch, behaviour, "plain-grammar", "ddtree-b32-grammar", preset="grammar", prompts=3
    )
    grammar_problems = [p for p in summary["problems"] if "regex" in p]
    assert grammar_problems == [
        "ddtree-b32-grammar: 1 of 2 constrained outputs are not a full match of their regex "
        f"(prompt 1, {check_presets.DIGITS_REGEX!r}: 'x12,345;')"  # a line may start with an x
    ]


def test_logprob_arms_are_judged_against_target_only_where_their_tokens_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, _ = run_presets(tmp_path, monkeypatch, {"logprob_shift_budgets": [32]}, preset="logprobs")
    reports = {report["arm"]: report for report in summary["logprobs"]}
    assert set(reports) == {"ddtree-b32-logprobs", "dflash-logprobs", "ddtree-adaptive-logprobs"}
    assert reports["dflash-logprobs"]["passed"] and reports["dflash-logprobs"]["tokens"] == 12
    assert summary["problems"] == [
        "ddtree-b32-logprobs: output-token logprobs differ from plain's by up to 1 (bf16 noise 0.25) over 12 tokens"
    ]


def test_the_plan_stream_preset_turns_sglangs_plan_stream_on_for_every_speculative_arm() -> None:
    arms = {arm.name: arm for arm in check_presets.PRESETS["plan-stream"]}
    speculative = [arm for arm in arms.values() if not arm.name.startswith("plain")]
    assert {a.arm.algorithm for a in speculative} == {"DDTREE", "DFLASH"}
    for arm in speculative:
        assert arm.runner_arm(64)["env"]["SGLANG_ENABLE_OVERLAP_PLAN_STREAM"] == "1", arm.name
        assert arm.arm.overlap  # the plan stream only matters under overlap scheduling
    assert "env" not in arms["plain"].runner_arm(64)  # the baseline as SGLang serves it by default
    assert arms["ddtree-adaptive-plan-stream"].runner_arm(64)["env"]["SGLANG_DDTREE_SYNC_DEBUG"] == "error"


def test_the_draft_splitkv_preset_switches_the_drafters_attention_beside_a_ddtree_arm_pinned_to_sglangs_kernel() -> None:
    arms = {arm.name: arm for arm in check_presets.PRESETS["draft-splitkv"]}
    switched = [name for name, arm in arms.items() if arm.runner_arm(64).get("env", {}).get("SGLANG_DDTREE_DRAFT_ATTENTION") == "splitkv"]
    assert switched == [name for name in arms if "draft-splitkv" in name] and len(switched) == 4
    assert {arms[name].arm.algorithm for name in switched} == {"DDTREE"}
    # the acceptance they are read against: named, since the default (auto) runs the split-KV kernel
    assert arms["ddtree-b32"].runner_arm(64)["env"] == {"SGLANG_DDTREE_DRAFT_ATTENTION": "extend"}
    adaptive = arms["ddtree-adaptive-draft-splitkv"].runner_arm(64)["env"]
    assert adaptive["SGLANG_DDTREE_SYNC_DEBUG"] == "error" and adaptive["SGLANG_ENABLE_OVERLAP_PLAN_STREAM"] == "1"
