"""Judge decode arms against each other: losslessness, acceptance, sampled distributions.

Inputs are the per-arm records that ``in_target/engine_runner.py`` writes. Exact
token equality is the gate at T=0, except where the target's own top1-top2
margin at the first divergence is within bf16 noise (prefill and decode
kernels round differently, so near-ties can flip); every divergence is
reported with its margin either way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

# A divergence is explained when the target's top1-top2 log-prob margin at that
# step is at most this. SGLang's bf16 margins on the fixture pair come in steps of
# 1/32; in the records of 2026-11-29 (H200, docs/BENCHMARKS.md) upstream DFLASH left
# plain decoding at margins up to 0.1875 and DDTREE up to 0.25, the bound itself.
BF16_MARGIN_NOISE = 0.25


@dataclass(frozen=True)
class Divergence:
    prompt: int
    index: int
    expected: int
    got: int
    margin: float | None
    explained: bool


def first_divergence(expected: list[int], got: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return i
    if len(expected) != len(got):
        return min(len(expected), len(got))
    return None


def lossless_report(reference: dict, arm: dict, *, margin_noise: float = BF16_MARGIN_NOISE) -> dict:
    """Compare ``arm``'s greedy outputs with ``reference``'s, prompt by prompt, over the prompts
    both decoded (a bench cell may decode fewer prompts than the margins run); ``undecoded``
    counts the reference's prompts the arm never decoded, and the arm's beyond the reference's."""
    margins = reference.get("top2_margins") or [[] for _ in reference["outputs"]]
    compared = min(len(reference["outputs"]), len(arm["outputs"]))
    divergences = []
    for prompt, (expected, got) in enumerate(zip(reference["outputs"], arm["outputs"], strict=False)):
        index = first_divergence(expected, got)
        if index is None:
            continue
        margin = margins[prompt][index] if index < len(margins[prompt]) else None
        divergences.append(
            Divergence(
                prompt=prompt,
                index=index,
                expected=expected[index] if index < len(expected) else -1,
                got=got[index] if index < len(got) else -1,
                margin=margin,
                explained=margin is not None and margin <= margin_noise,
            )
        )
    unexplained = [d for d in divergences if not d.explained]
    return {
        "arm": arm["arm"],
        "reference": reference["arm"],
        "prompts": compared,
        "identical": compared - len(divergences),
        "undecoded": abs(len(reference["outputs"]) - len(arm["outputs"])),
        "divergences": [asdict(d) for d in divergences],
        "unexplained": len(unexplained),
        "margin_noise": margin_noise,
        "passed": not unexplained,
    }


def logprob_report(reference: dict, arm: dict, *, tolerance: float = BF16_MARGIN_NOISE) -> dict:
    """``arm``'s output-token logprobs against ``reference``'s where both emitted the same
    tokens (each prompt up to its first divergence): the largest difference, within bf16
    noise (the margins' bound) to pass; no token compared fails."""
    compared, worst = 0, 0.0
    for expected, got, ref_values, arm_values in zip(
        reference["outputs"], arm["outputs"], reference["token_logprobs"], arm["token_logprobs"], strict=False
    ):
        same = first_divergence(expected, got)
        for ref_value, arm_value in list(zip(ref_values, arm_values, strict=False))[:same]:
            compared += 1
            worst = max(worst, abs(ref_value - arm_value))
    return {
        "arm": arm["arm"],
        "reference": reference["arm"],
        "tokens": compared,
        "max_abs_diff": worst,
        "tolerance": tolerance,
        "passed": compared > 0 and worst <= tolerance,
    }


def acceptance_per_prompt(arm: dict) -> list[float | None]:
    """Tokens committed per verify round, bonus included, prefill token excluded."""
    values = []
    for meta in arm["meta"]:
        rounds = meta.get("spec_verify_ct") or 0
        tokens = (meta.get("completion_tokens") or 0) - 1
        values.append(tokens / rounds if rounds else None)
    return values


def acceptance_summary(arm: dict) -> dict:
    per_prompt = [v for v in acceptance_per_prompt(arm) if v is not None]
    rounds = sum(m.get("spec_verify_ct") or 0 for m in arm["meta"])
    tokens = sum((m.get("completion_tokens") or 0) - 1 for m in arm["meta"])
    return {
        "arm": arm["arm"],
        "mean_acceptance_length": tokens / rounds if rounds else None,
        "per_prompt_mean": sum(per_prompt) / len(per_prompt) if per_prompt else None,
        "rounds": rounds,
        "tok_per_s": arm.get("tok_per_s"),
    }


def token_histograms(arm: dict, position: int) -> Counter:
    return Counter(out[position] for out in arm["outputs"] if len(out) > position)


def distribution_test(reference: dict, arm: dict, position: int) -> dict:
    """Chi-square homogeneity test of the token at ``position`` across two sampled arms.

    Categories seen fewer than 5 times in total are pooled into one bin.
    """
    from scipy.stats import chi2_contingency

    ref, got = token_histograms(reference, position), token_histograms(arm, position)
    tokens = sorted(set(ref) | set(got))
    common = [t for t in tokens if ref[t] + got[t] >= 5]
    rare = [t for t in tokens if ref[t] + got[t] < 5]
    rows = [[ref[t] for t in common], [got[t] for t in common]]
    if rare:
        rows[0].append(sum(ref[t] for t in rare))
        rows[1].append(sum(got[t] for t in rare))
    if len(rows[0]) < 2:
        return {"position": position, "categories": len(rows[0]), "p_value": 1.0}
    stat, p_value, dof, _ = chi2_contingency(rows)
    return {
        "position": position,
        "categories": len(rows[0]),
        "chi2": float(stat),
        "dof": int(dof),
        "p_value": float(p_value),
        "draws": [sum(rows[0]), sum(rows[1])],
    }


def acceptance_parity(arm: dict, reference: dict, *, tolerance: float = 0.03) -> dict:
    """Per-prompt acceptance length of an SGLang arm against the offline reference's.

    ``reference`` is the reference decoder's JSON for the same prompts, algorithm and budget
    (``python -m ddtree_overlay.reference``). SGLang's per-prompt acceptance length is
    committed tokens per verify round, the prefill token excluded; the reference's is its
    mean accepted length per round. Prompts whose output equals the reference's token for
    token are counted apart: only there did both decoders draft from the same contexts.
    """
    ours = acceptance_per_prompt(arm)
    rows = reference["prompts"][: len(ours)]
    per_prompt = []
    for i, (value, ref) in enumerate(zip(ours, rows, strict=False)):
        if value is None or not ref.get("accept_len_mean"):
            continue
        per_prompt.append(
            {
                "prompt": i,
                "sglang": value,
                "reference": ref["accept_len_mean"],
                "rel_diff": value / ref["accept_len_mean"] - 1,
                "same_sequence": list(ref.get("tokens") or ()) == list(arm["outputs"][i]),
            }
        )

    def mean(values: list) -> float | None:
        return sum(values) / len(values) if values else None

    same = [p for p in per_prompt if p["same_sequence"]]
    ours_mean, theirs_mean = mean([p["sglang"] for p in per_prompt]), mean([p["reference"] for p in per_prompt])
    return {
        "arm": arm["arm"],
        "prompts": len(per_prompt),
        "sglang_mean": ours_mean,
        "reference_mean": theirs_mean,
        "mean_rel_diff": ours_mean / theirs_mean - 1 if ours_mean and theirs_mean else None,
        "within": sum(abs(p["rel_diff"]) <= tolerance for p in per_prompt),
        "same_sequence": len(same),
        "same_sequence_within": sum(abs(p["rel_diff"]) <= tolerance for p in same),
        "tolerance": tolerance,
        "per_prompt": per_prompt,
    }
