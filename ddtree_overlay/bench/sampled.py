"""Does DDTREE sample the target's law at T > 0: a multinomial homogeneity test of its tokens
against target-only's, pooled over prompts, and the power that test has.

Each arm decodes every prompt ``draws`` times, independently. At output position k (k ≥ 1:
position 0 is the prefill's token, the same sampler in both arms) the tokens of one prompt's
draws are a sample of that prompt's marginal law at k, which DDTREE must leave unchanged. Per
prompt, Pearson's χ² of the 2 x c table (reference draws, arm draws) over the c tokens seen,
rare tokens (< 5 draws in both arms together) pooled into one category; the prompts' statistics
and degrees of freedom add (independent draws), so one χ² test per position covers every
prompt.

Power, analytically (asymptotic): under an alternative the statistic is non-central χ² with the
test's degrees of freedom and non-centrality λ = Σ_prompts n_eff · Σ_j (p_j - q_j)² / m_j, with
n_eff = n_ref · n_arm / (n_ref + n_arm) and m the pooled law. By Cauchy-Schwarz,
Σ_j (p_j - q_j)² / m_j ≥ (Σ_j |p_j - q_j|)² = 4 · TV(p, q)², with equality when the difference
is proportional to m: the hardest alternative at a given total-variation distance. So if every
prompt's law moves by TV ≥ δ, λ ≥ 4 δ² Σ n_eff, and the test rejects at level alpha with at least
the power of the non-central χ² at that λ. `detectable_tv` inverts that: the smallest δ
detected with the given power, whatever the direction of the change. TV is over the test's
categories (pooling rare tokens can only hide a change among them).
`tests/bench/test_sampled.py` checks the asymptotics against simulated multinomial draws.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

RARE = 5  # draws (both arms together) below which a token joins the pooled category
POWER = 0.8


def _table(reference: Counter, arm: Counter) -> tuple[list[int], list[int]]:
    tokens = sorted(set(reference) | set(arm))
    common = [t for t in tokens if reference[t] + arm[t] >= RARE]
    rare = [t for t in tokens if reference[t] + arm[t] < RARE]
    rows = [reference[t] for t in common], [arm[t] for t in common]
    if rare:
        rows[0].append(sum(reference[t] for t in rare))
        rows[1].append(sum(arm[t] for t in rare))
    return rows


def pearson(reference: Sequence[int], arm: Sequence[int]) -> tuple[float, int]:
    """Pearson's χ² statistic of a 2 x c homogeneity table and its degrees of freedom (c - 1,
    no continuity correction: the power below assumes the plain statistic)."""
    n_ref, n_arm = sum(reference), sum(arm)
    total = n_ref + n_arm
    stat = 0.0
    for a, b in zip(reference, arm, strict=True):
        column = a + b
        for observed, n in ((a, n_ref), (b, n_arm)):
            expected = n * column / total
            stat += (observed - expected) ** 2 / expected
    return stat, len(reference) - 1


def pooled_test(reference: Sequence[Sequence[int]], arm: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The homogeneity test of one output position over prompts: ``reference[i]`` and ``arm[i]``
    are prompt i's tokens there, one per draw. Prompts where one token took every draw add
    nothing (0 degrees of freedom)."""
    from scipy.stats import chi2

    stat, dof, n_eff, draws = 0.0, 0, 0.0, [0, 0]
    for ours, theirs in zip(reference, arm, strict=True):
        if not ours or not theirs:
            continue
        rows = _table(Counter(ours), Counter(theirs))
        draws[0] += len(ours)
        draws[1] += len(theirs)
        if len(rows[0]) < 2:
            continue
        prompt_stat, prompt_dof = pearson(*rows)
        stat, dof = stat + prompt_stat, dof + prompt_dof
        n_eff += len(ours) * len(theirs) / (len(ours) + len(theirs))
    p_value = float(chi2.sf(stat, dof)) if dof else 1.0
    return {"chi2": stat, "dof": dof, "p_value": p_value, "n_eff": n_eff, "draws": draws}


def noncentrality_for_power(dof: int, alpha: float, power: float = POWER) -> float:
    """The non-centrality λ at which a level-``alpha`` χ² test with ``dof`` degrees of freedom
    rejects with probability ``power``."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2

    critical = chi2.isf(alpha, dof)
    upper = 1.0
    while ncx2.sf(critical, dof, upper) < power:
        upper *= 2
    return float(brentq(lambda lam: ncx2.sf(critical, dof, lam) - power, 0.0, upper, xtol=1e-9))


def detectable_tv(n_eff: float, dof: int, alpha: float, power: float = POWER) -> float | None:
    """The smallest total-variation distance between the two laws (at every prompt) that the
    pooled test detects at level ``alpha`` with probability at least ``power``, whatever the
    change; None when nothing was tested, or not even TV = 1 would be."""
    if dof < 1 or n_eff <= 0:
        return None
    tv = math.sqrt(noncentrality_for_power(dof, alpha, power) / (4 * n_eff))
    return tv if tv <= 1 else None


def power_against(
    reference: Sequence[Sequence[float]], arm: Sequence[Sequence[float]], draws: int, alpha: float
) -> float:
    """The pooled test's power at one position when prompt i's tokens follow the law
    ``reference[i]`` in the baseline and ``arm[i]`` in the arm, ``draws`` of each: the
    non-central χ² above, with λ and the degrees of freedom over the tokens the test keeps
    apart (an expected RARE draws or more in both arms together)."""
    from scipy.stats import chi2, ncx2

    lam, dof = 0.0, 0
    for p, q in zip(reference, arm, strict=True):
        kept = [(a, b) for a, b in zip(p, q, strict=True) if (a + b) * draws >= RARE]
        lam += draws / 2 * sum((a - b) ** 2 / ((a + b) / 2) for a, b in kept)
        dof += len(kept) - 1
    return float(ncx2.sf(chi2.isf(alpha, dof), dof, lam)) if dof > 0 else 0.0


def planned_tv(prompts: int, draws: int, categories: int, alpha: float, power: float = POWER) -> float | None:
    """`detectable_tv` before running: ``prompts`` x ``draws`` per arm, at most ``categories``
    tokens per prompt (top-k bounds them; more degrees of freedom only lower the power, so this
    is the bound for the worst case)."""
    return detectable_tv(prompts * draws / 2, prompts * (categories - 1), alpha, power)


def by_prompt(record: Mapping[str, Any], draws: int, position: int) -> list[list[int]]:
    """The token at ``position`` of each draw, grouped by prompt (the runner repeats each
    prompt ``draws`` times in a row)."""
    outputs = record["outputs"]
    return [
        [out[position] for out in outputs[i : i + draws] if len(out) > position]
        for i in range(0, len(outputs), draws)
    ]


def combined_test(
    reference: Mapping[str, Any], arm: Mapping[str, Any], draws: int, positions: int,
    rounds: int = 2000, seed: int = 0,
) -> dict[str, Any]:
    """Every position at once: the sum over positions 1 … ``positions`` of the pooled
    statistics, against its permutation law. Within each prompt, ``rounds`` times, the two
    arms' whole draws are relabelled at random (as many to each arm as it drew), which keeps
    the dependence between one draw's positions that rules out adding their χ² degrees of
    freedom. Draws shorter than ``positions`` + 1 tokens are left out."""
    import numpy as np

    rng = np.random.default_rng(seed)
    observed, null = 0.0, np.zeros(rounds)
    full = positions + 1
    prompts = range(0, len(reference["outputs"]), draws)
    for start in prompts:
        ours = [o for o in reference["outputs"][start : start + draws] if len(o) >= full]
        theirs = [o for o in arm["outputs"][start : start + draws] if len(o) >= full]
        both = ours + theirs
        if not ours or not theirs:
            continue
        n, total = len(ours), len(both)
        chosen = np.zeros((rounds, total), dtype=np.float32)
        np.put_along_axis(chosen, rng.random((rounds, total)).argsort(axis=1)[:, :n], 1.0, axis=1)
        for position in range(1, full):
            tokens = [o[position] for o in both]
            counts = Counter(tokens)
            common = sorted(t for t in counts if counts[t] >= RARE)
            index = {t: i for i, t in enumerate(common)}
            columns = len(common) + (len(common) < len(counts))
            if columns < 2:
                continue
            onehot = np.zeros((total, columns), dtype=np.float32)
            onehot[np.arange(total), [index.get(t, len(common)) for t in tokens]] = 1.0
            column = onehot.sum(axis=0)
            expected_ours, expected_theirs = column * n / total, column * (total - n) / total
            mine = chosen @ onehot
            null += ((mine - expected_ours) ** 2 / expected_ours + (column - mine - expected_theirs) ** 2 / expected_theirs).sum(axis=1)
            observed += pearson(
                [int(c) for c in onehot[:n].sum(axis=0)], [int(c) for c in onehot[n:].sum(axis=0)]
            )[0]
    p_value = float((1 + (null >= observed - 1e-9).sum()) / (rounds + 1))
    return {"chi2": observed, "p_value": p_value, "rounds": rounds, "positions": positions, "null_mean": float(null.mean())}
