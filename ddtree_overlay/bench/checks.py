"""GPU acceptance checks of the payload: decode arms through `sglang.Engine` in the env's own
interpreter (`in_target/engine_runner.py`), judged against each other.

`verify --smoke` runs the smoke: target-only, DFLASH and DDTREE at one budget, every prompt at
once, in one runner; DFLASH and DDTREE must match target-only's greedy output up to bf16
near-ties. `verify --smoke --preset NAME[,NAME...]` runs named presets instead
(`check_presets.PRESETS`): one runner per arm (a crash stays contained), each arm's greedy output judged against its
baseline arm, its acceptance against the offline reference (with ``--reference-dir``), a TP=2
arm against its TP=1 twin, a T=1 arm's token distribution against target-only's, and (preset
``sampling``) many prompts' draws at T = 0.6 and 1.0 with top-p and top-k against target-only's,
judged by a pooled χ² test whose power is reported (`bench.sampled`), an arm that returns
logprobs against its baseline's where their tokens agree (preset ``logprobs``), and (preset
``grammar``) regex-constrained requests' outputs, each a full match of its regex
(`bench.grammar_outputs`). After
every arm, ``--out`` gets ``arms.jsonl`` (the runner's records) and ``summary.json`` (the
verdicts so far), so a run cut off by its time box keeps what it reached.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree_overlay.bench import decode_compare, sampled
from ddtree_overlay.bench.arms import DDTREE, DFLASH, TARGET_ONLY, Arm
from ddtree_overlay.bench.check_presets import PLAIN_T1, SAMPLING_FAMILIES, CheckArm, Draws
from ddtree_overlay.bench.engine_paths import paths_text, ran_paths
from ddtree_overlay.bench.grammar_outputs import grammar_problem, grammar_verdict
from ddtree_overlay.bench.plan import capture_batch_sizes
from ddtree_overlay.bench.round_split import profile_split
from ddtree_overlay.engine.target import runner_events, start_engine_runner
from ddtree_overlay.in_target.engine_runner import PROFILE_ENV, profile_windows

RUNNER_EXIT_S = 1800  # a runner that closed its output has this long to exit
OnArm = Callable[[Mapping[str, Any]], None]

# A family of draws' tests (its settings x positions) share this level (Bonferroni), whichever
# of its arms a run selects: the sampling preset's halves, run in separate calls, keep its level.
SAMPLING_ALPHA = 0.01


# --- the smoke --------------------------------------------------------------------------------


def smoke_arms(budget: int) -> dict[str, Arm]:
    """The smoke's arms by the names verify reports them under."""
    return {"target-only": Arm(TARGET_ONLY), "DFLASH": Arm(DFLASH), "DDTREE": Arm.ddtree(budget)}


def smoke_plan(
    target: Path, draft: Path, budget: int, prompts: list[list[int]], max_new_tokens: int
) -> dict[str, Any]:
    greedy = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    # Every prompt decodes at once: decode graphs for that batch and the smaller powers of two
    # it shrinks through; prefill graphs off. Both shorten each engine's start.
    backend = {
        "attention_backend": "triton",
        "cuda_graph_bs_decode": capture_batch_sizes([len(prompts)]),
        "disable_prefill_cuda_graph": True,
    }
    arms = smoke_arms(budget)
    return {
        "target": str(target),
        "draft": str(draft),
        "prompts": prompts,
        "arms": [
            {"name": name, "engine": backend | arm.engine_args(), "sampling": greedy}
            | ({"top2": True} if arm.algorithm == TARGET_ONLY else {})
            for name, arm in arms.items()
        ],
    }


def run_smoke(
    python: Path,
    *,
    target: Path,
    draft: Path,
    budget: int,
    prompts: list[list[int]],
    max_new_tokens: int,
    on_arm: OnArm,
) -> dict[str, Any]:
    plan = smoke_plan(target, draft, budget, prompts, max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="ddtree-verify-") as scratch:
        plan_path, records_path = Path(scratch) / "plan.json", Path(scratch) / "arms.jsonl"
        plan_path.write_text(json.dumps(plan))
        _run_runner(python, plan_path, records_path, on_arm)
        records = read_arms(records_path)
    return judge_smoke(records, expected=[arm["name"] for arm in plan["arms"]])


def judge_smoke(records: list[Mapping[str, Any]], *, expected: list[str]) -> dict[str, Any]:
    """Pass when every arm ran and the speculative arms match target-only up to near-ties."""
    by_name = {record["arm"]: record for record in records}
    problems, arms = [], {}
    for name in expected:
        record = by_name.get(name)
        if record is None or not record.get("ok"):
            error = (record or {}).get("error", "did not run")
            problems.append(f"{name}: {error}")
            arms[name] = {"ok": False, "error": error}
            continue
        arms[name] = _arm_view(record)
    reference = by_name.get(expected[0])
    for name in expected[1:]:
        if not (arms[name]["ok"] and arms[expected[0]]["ok"]):
            continue
        report = decode_compare.lossless_report(reference, by_name[name])
        arms[name] |= _lossless_view(report)
        if not report["passed"]:
            problems.append(_lossless_problem(name, report))
    return {"passed": not problems, "problems": problems, "arms": arms}


# --- the presets ------------------------------------------------------------------------------


def run_checks(
    python: Path,
    arms: Sequence[CheckArm],
    *,
    out: Path,
    target: Path,
    draft: Path,
    prompts: list[list[int]],
    max_new_tokens: int,
    reference_dir: Path | None,
    on_arm: OnArm,
) -> dict[str, Any]:
    """Each arm in its own runner; once a DDTREE arm fails the later DDTREE arms are skipped
    (an arm's ``on_fail`` runs instead). Returns the last `summarize`."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "arms.jsonl"
    results.unlink(missing_ok=True)
    judged = list(arms) + [arm.on_fail for arm in arms if arm.on_fail]
    summary = summarize([], judged, reference_dir)
    ddtree_broken = False
    for arm in arms:
        if ddtree_broken and arm.arm.algorithm == DDTREE:
            on_arm({"arm": arm.name, "ok": False, "error": "skipped: an earlier DDTREE arm failed"})
            continue
        ran = _run_check_arm(python, arm, out, target, draft, prompts, max_new_tokens, on_arm)
        if not ran and arm.arm.algorithm == DDTREE:
            ddtree_broken = True
            if arm.on_fail:
                _run_check_arm(python, arm.on_fail, out, target, draft, prompts, max_new_tokens, on_arm)
        records = read_arms(results)
        summary = summarize(records, judged, reference_dir)
        # a run cut off by its time box ends with the arms it never reached listed here
        recorded = {record["arm"] for record in records}
        summary["not_run"] = [arm.name for arm in arms if arm.name not in recorded]
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _run_check_arm(
    python: Path,
    arm: CheckArm,
    out: Path,
    target: Path,
    draft: Path,
    prompts: list[list[int]],
    max_new_tokens: int,
    on_arm: OnArm,
) -> bool:
    runner_arm = arm.runner_arm(max_new_tokens)
    plan = {
        "target": str(target),
        "draft": str(draft),
        "prompts": prompts[: runner_arm.pop("prompts", len(prompts))],
        "arms": [runner_arm],
    }
    plan_path = out / f"plan-{arm.name}.json"
    plan_path.write_text(json.dumps(plan))
    return _run_runner(python, plan_path, out / "arms.jsonl", on_arm, stderr=None) == 0


def summarize(
    records: Sequence[Mapping[str, Any]], arms: Sequence[CheckArm], reference_dir: Path | None
) -> dict[str, Any]:
    """The verdicts on the arms recorded so far: each arm's acceptance, greedy outputs against
    its baseline, acceptance against the offline reference, TP=2 against TP=1, and T=1 token
    distributions against target-only's. ``problems`` (failed arms, lossless failures) make
    the check fail; the rest is reported."""
    by_name = {record["arm"]: record for record in records}
    known = {arm.name: arm for arm in arms}
    summary: dict[str, Any] = {
        "arms": {}, "lossless": [], "distribution": [], "sampling": [], "sampling_combined": [], "parity": [],
        "tp": [], "grammar": [],
        "logprobs": [], "problems": [],
    }
    for name, record in by_name.items():
        arm = known.get(name)
        if not record.get("ok"):
            summary["arms"][name] = {"ok": False, "error": record.get("error"), "traceback": record.get("traceback")}
            summary["problems"].append(f"{name}: {record.get('error')}")
            continue
        summary["arms"][name] = dict(
            decode_compare.acceptance_summary(record),
            ok=True,
            tok_per_s=record.get("tok_per_s"),
            start_s=record.get("start_s"),
            decode_s=record.get("decode_s"),
            **profiled(arm_windows(os.environ.get(PROFILE_ENV), record), record),
        )
        if arm is None:
            continue
        baseline = by_name.get(arm.baseline or "")
        if baseline and baseline.get("ok") and arm.draws:
            verdicts = sampling_verdicts(baseline, record, arm.draws, alpha=sampling_level(arm.draws))
            summary["sampling"] += verdicts
            summary["problems"] += _sampling_problems(arm, verdicts)
            summary["sampling_combined"].append(combined_report(baseline, record, arm.draws))
        elif baseline and baseline.get("ok") and not arm.sampled:
            report = decode_compare.lossless_report(baseline, record)
            summary["lossless"].append(report)
            if not report["passed"]:
                summary["problems"].append(_lossless_problem(name, report))
            if arm.top2 and "token_logprobs" in baseline:
                logprobs = decode_compare.logprob_report(baseline, record)
                summary["logprobs"].append(logprobs)
                if not logprobs["passed"]:
                    summary["problems"].append(_logprob_problem(name, logprobs))
        if arm.grammars:
            verdict = grammar_verdict(record, arm.grammars)
            summary["grammar"].append(verdict)
            if not verdict["passed"]:
                summary["problems"].append(grammar_problem(verdict))
        reference = _reference(reference_dir, arm)
        if reference is not None:
            parity = decode_compare.acceptance_parity(record, reference)
            summary["parity"].append({k: v for k, v in parity.items() if k != "per_prompt"})
        twin = by_name.get(arm.tp_of or "")
        if twin and twin.get("ok"):
            summary["tp"].append(tp_comparison(twin, record))
        plain = by_name.get(PLAIN_T1.name)
        if arm.sampled and name != PLAIN_T1.name and plain and plain.get("ok"):
            for position in (1, 2, 3):
                test = decode_compare.distribution_test(plain, record, position)
                summary["distribution"].append(dict(test, arm=name))
    return summary


def sampling_level(draws: Draws) -> float:
    family = next(family for family in SAMPLING_FAMILIES if draws in family)
    return SAMPLING_ALPHA / sum(d.positions for d in family)


def combined_report(baseline: Mapping[str, Any], record: Mapping[str, Any], draws: Draws) -> dict[str, Any]:
    """Every position at once, reported beside the per-position verdicts (not one of them): the
    sum of their statistics against its permutation law, which keeps their dependence."""
    test = sampled.combined_test(baseline, record, draws.per_prompt, draws.positions)
    text = (
        f"{record['arm']} against {baseline['arm']} ({draws.label}), positions 1-{draws.positions} at once: "
        f"χ² sum {test['chi2']:.1f} (relabelled draws: mean {test['null_mean']:.1f}), "
        f"permutation p = {test['p_value']:.3g} over {test['rounds']} relabellings"
    )
    return test | {"arm": record["arm"], "baseline": baseline["arm"], "text": text}


def _sampling_problems(arm: CheckArm, verdicts: list[dict[str, Any]]) -> list[str]:
    """Each rejected position; for a control arm (a known other law), none rejected."""
    if not arm.control:
        return [v["text"] for v in verdicts if not v["passed"]]
    if all(v["passed"] for v in verdicts):
        return [f"{arm.name}: draws from another law than {arm.baseline}, and no position's test told them apart"]
    return []


def sampling_verdicts(
    baseline: Mapping[str, Any], record: Mapping[str, Any], draws: Draws, *, alpha: float
) -> list[dict[str, Any]]:
    """Per output position 1 … ``draws.positions``: the pooled χ² test of the arm's tokens
    against its target-only baseline's, its verdict at ``alpha``, and the smallest TV distance
    it detects there with 80 % power (``detectable_tv``; None: none)."""
    verdicts = []
    for position in range(1, draws.positions + 1):
        test = sampled.pooled_test(
            sampled.by_prompt(baseline, draws.per_prompt, position),
            sampled.by_prompt(record, draws.per_prompt, position),
        )
        tv = sampled.detectable_tv(test["n_eff"], test["dof"], alpha)
        passed = test["p_value"] >= alpha
        prompts = len(record["outputs"]) // draws.per_prompt
        # A change at one prompt only adds its own share of n_eff to the non-centrality.
        one = None if tv is None or not prompts else tv * prompts**0.5
        one = one if one is not None and one <= 1 else None
        text = (
            f"{record['arm']} against {baseline['arm']} ({draws.label}), position {position}: "
            f"χ² {test['chi2']:.1f}, {test['dof']} dof, p = {test['p_value']:.3g} "
            f"({'passed' if passed else 'FAILED'} at alpha = {alpha:.2g}), {prompts} prompts, "
            f"{test['draws'][0]} / {test['draws'][1]} draws; "
            + (f"detects TV ≥ {tv:.3f} at every prompt with 80 % power" if tv is not None else "no TV distance detectable")
            + (f" (at one prompt only: TV ≥ {one:.2f})" if one is not None else "")
        )
        verdicts.append(test | {
            "arm": record["arm"], "baseline": baseline["arm"], "position": position, "alpha": alpha,
            "passed": passed, "detectable_tv": tv, "detectable_tv_one_prompt": one, "text": text,
            "temperature": draws.temperature, "top_p": draws.top_p, "top_k": draws.top_k, "min_p": draws.min_p,
        })
    return verdicts


def arms_view(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Per arm, what `verify` shows: ok, tok/s, acceptance, and the lossless and grammar verdicts."""
    lossless = {report["arm"]: report for report in summary["lossless"]}
    grammar = {verdict["arm"]: verdict for verdict in summary.get("grammar", ())}
    view = {}
    for name, arm in summary["arms"].items():
        if not arm["ok"]:
            view[name] = {"ok": False, "error": arm["error"]}
            continue
        view[name] = {"ok": True, "tok_per_s": arm["tok_per_s"], "acceptance_length": arm["mean_acceptance_length"]}
        if arm.get("paths"):
            view[name]["ddtree_paths"] = paths_text(arm["paths"])
        if name in lossless:
            view[name] |= _lossless_view(lossless[name])
        if name in grammar:
            view[name]["grammar_matched"] = f"{grammar[name]['matched']}/{grammar[name]['constrained']}"
    return view


def arm_windows(profile_path: str | None, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The profile windows written while an arm's engine decoded (none for records from before
    ``t_start`` was kept)."""
    if record.get("t_start") is None:
        return []
    return [w for w in profile_windows(profile_path, record["t_start"]) if w["t_last"] <= record["t_end"]]


def profiled(windows: list[dict[str, Any]], record: Mapping[str, Any]) -> dict[str, Any]:
    """An arm's rounds per tree budget and the DDTREE paths its engine ran, from the profile
    windows written while its engine lived (`arm_windows`)."""
    split = profile_split(windows, record["t_start"], record["t_end"]) if windows else None
    return {"budgets": (split or {}).get("budgets") or None, "paths": ran_paths(windows)}


def tp_comparison(tp1: Mapping[str, Any], tp2: Mapping[str, Any]) -> dict[str, Any]:
    """A TP=2 arm against its TP=1 twin: same outputs, same acceptance, tok/s ratio."""
    same = sum(a == b for a, b in zip(tp1["outputs"], tp2["outputs"], strict=False))
    acceptance = [decode_compare.acceptance_summary(r)["mean_acceptance_length"] for r in (tp1, tp2)]
    return {
        "arm": tp2["arm"], "tp1_arm": tp1["arm"], "identical_to_tp1": same, "prompts": len(tp2["outputs"]),
        "acceptance_tp1": acceptance[0], "acceptance_tp2": acceptance[1],
        "tok_per_s_ratio": tp2["tok_per_s"] / tp1["tok_per_s"],
    }


def read_arms(path: Path) -> list[dict[str, Any]]:
    """The runner's records so far (one JSON line per arm)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _reference(directory: Path | None, arm: CheckArm) -> dict[str, Any] | None:
    """The offline reference run for the arm's algorithm and fixed budget, if there is one."""
    key = arm.arm.reference_key
    if directory is None or key is None or arm.sampled:
        return None
    path = directory / f"{key}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _run_runner(python: Path, plan: Path, records: Path, on_arm: OnArm, **popen: Any) -> int:
    with start_engine_runner(python, plan, records, **popen) as runner:
        assert runner.stdout is not None
        for tag, event in runner_events(runner.stdout):
            if tag in ("START", "ARM"):
                on_arm(dict(event, event=tag.lower()))
        return runner.wait(timeout=RUNNER_EXIT_S)


def _arm_view(record: Mapping[str, Any]) -> dict[str, Any]:
    summary = decode_compare.acceptance_summary(record)
    return {"ok": True, "tok_per_s": record.get("tok_per_s"), "acceptance_length": summary["mean_acceptance_length"]}


def _lossless_view(report: Mapping[str, Any]) -> dict[str, Any]:
    view = {"identical": f"{report['identical']}/{report['prompts']}", "divergences": report["divergences"]}
    return view | ({"undecoded": report["undecoded"]} if report["undecoded"] else {})


def _lossless_problem(name: str, report: Mapping[str, Any]) -> str:
    worst = max(d["margin"] or 0.0 for d in report["divergences"] if not d["explained"])
    return (
        f"{name}: {report['unexplained']} divergence(s) from {report['reference']} beyond bf16 noise "
        f"(largest top1-top2 margin {worst:.3f})"
    )


def _logprob_problem(name: str, report: Mapping[str, Any]) -> str:
    if not report["tokens"]:
        return f"{name}: no output-token logprob to compare with {report['reference']}'s"
    return (
        f"{name}: output-token logprobs differ from {report['reference']}'s by up to "
        f"{report['max_abs_diff']:.4g} (bf16 noise {report['tolerance']:g}) over {report['tokens']} tokens"
    )
