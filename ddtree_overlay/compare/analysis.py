"""An offline run against a side that replayed its prompts: per prompt, and per method.

Per prompt and method (T = 0): the side's output equals the offline target-only output, or
its first divergence, with the target's top1 - top2 margin there (from the side's own
target-only arm, where that arm still agrees with the offline output up to that step). Per
prompt and method, acceptance (`records.acceptance_length`, one convention for both sides) and
its ratio side / offline. Per method: the ratio of the mean acceptances, judged within 3 %;
tokens per second and the speedup over target-only side by side. The offline tok/s is
1 / mean(time per output token) over the turns and its speedup the ratio of those means, as
the reference code's own tables compute them; the side's are its whole-arm throughputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from ddtree_overlay.bench.decode_compare import BF16_MARGIN_NOISE, first_divergence
from ddtree_overlay.compare.records import Generation, Side, acceptance_length
from ddtree_overlay.compare.runfile import OfflineRun, arm_of

ACCEPTANCE_TOLERANCE = 0.03


def compare_runs(run: OfflineRun, side: Side) -> dict[str, Any]:
    """The comparison as JSON-ready data (see the module doc); `agrees` is the verdict."""
    index_of = {prompt: i for i, prompt in enumerate(side.prompts)}
    matched = [(turn, index_of[turn.prompt]) for turn in run.turns if turn.prompt in index_of]
    greedy = run.greedy
    baseline = side.arms.get(arm_of("baseline").name)
    methods, prompts = [], []
    for key in run.method_keys:
        arm = arm_of(key)
        result = side.arms.get(arm.name)
        if result is None:
            continue
        rows = [_prompt_row(key, turn, result.generations[i], baseline, i, greedy) for turn, i in matched]
        prompts += rows
        methods.append(_method_row(run, key, rows, result.tokens_per_s, baseline))
    missing = [arm_of(key).name for key in run.method_keys if arm_of(key).name not in side.arms]
    acceptance_ok = all(m["acceptance_within"] in (True, None) for m in methods)
    unexplained = sum(m["greedy_unexplained"] or 0 for m in methods)
    return {
        "offline": {
            "path": str(run.path), "target": run.target, "draft": run.draft, "dataset": run.dataset,
            "temperature": run.temperature, "max_new_tokens": run.max_new_tokens,
            "block_size": run.block_size, "turns": len(run.turns),
        },
        "side": side.source,
        "matched_prompts": len(matched),
        "unmatched_turns": [turn.index for turn in run.turns if turn.prompt not in index_of],
        "missing_arms": missing,
        "tolerance": ACCEPTANCE_TOLERANCE,
        "margin_noise": BF16_MARGIN_NOISE,
        "methods": methods,
        "prompts": prompts,
        "agrees": bool(matched) and not missing and acceptance_ok and unexplained == 0,
    }


def _prompt_row(
    key: str, turn: Any, got: Generation, baseline: Any, index: int, greedy: bool
) -> dict[str, Any]:
    offline = turn.methods[key]
    offline_acceptance = (
        None if key == "baseline" else acceptance_length(offline.acceptance_lengths, len(offline.tokens))
    )
    row = {
        "method": key,
        "arm": arm_of(key).label,
        "turn": turn.index,
        "offline_acceptance": offline_acceptance,
        "acceptance": got.acceptance,
        "acceptance_ratio": _ratio(got.acceptance, offline_acceptance),
        "greedy": None,
    }
    if greedy:
        expected = list(turn.methods["baseline"].tokens)
        at = first_divergence(expected, list(got.tokens))
        row["greedy"] = "equal" if at is None else "diverged"
        if at is not None:
            row["divergence"] = {
                "index": at,
                "offline_token": expected[at] if at < len(expected) else None,
                "token": got.tokens[at] if at < len(got.tokens) else None,
                "margin": _margin(expected, baseline.generations[index] if baseline else None, at),
            }
    return row


def _margin(expected: list[int], target_only: Generation | None, at: int) -> float | None:
    """The target's margin at step `at` on the offline output's context: the side's target-only
    arm knows it while its own output still follows the offline one through step `at - 1`."""
    if target_only is None or at >= len(target_only.margins):
        return None
    agrees_until = first_divergence(expected, list(target_only.tokens))
    return target_only.margins[at] if agrees_until is None or agrees_until >= at else None


def _method_row(
    run: OfflineRun, key: str, rows: Sequence[dict[str, Any]], tokens_per_s: float | None, baseline: Any
) -> dict[str, Any]:
    ours = [r["acceptance"] for r in rows if r["acceptance"] is not None and r["offline_acceptance"] is not None]
    theirs = [r["offline_acceptance"] for r in rows if r["acceptance"] is not None and r["offline_acceptance"] is not None]
    ratio = _ratio(fmean(ours) if ours else None, fmean(theirs) if theirs else None)
    offline_tpot = fmean(turn.methods[key].time_per_output_token for turn in run.turns)
    baseline_tpot = fmean(turn.methods["baseline"].time_per_output_token for turn in run.turns)
    diverged = [r for r in rows if r["greedy"] == "diverged"]
    explained = [r for r in diverged if (m := r["divergence"]["margin"]) is not None and m <= BF16_MARGIN_NOISE]
    greedy = run.greedy
    return {
        "method": key,
        "arm": arm_of(key).label,
        "prompts": len(rows),
        "offline_acceptance": fmean(theirs) if theirs else None,
        "acceptance": fmean(ours) if ours else None,
        "acceptance_ratio": ratio,
        "acceptance_within": None if ratio is None else abs(ratio - 1) <= ACCEPTANCE_TOLERANCE,
        "greedy_equal": len(rows) - len(diverged) if greedy else None,
        "greedy_diverged": len(diverged) if greedy else None,
        "greedy_unexplained": len(diverged) - len(explained) if greedy else None,
        "offline_tokens_per_s": 1 / offline_tpot if offline_tpot > 0 else None,
        "offline_speedup": baseline_tpot / offline_tpot if offline_tpot > 0 else None,
        "tokens_per_s": tokens_per_s,
        "speedup": _ratio(tokens_per_s, baseline.tokens_per_s if baseline else None),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
