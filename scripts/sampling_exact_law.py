"""The T = 0.6 sampling draws against the dense fixture target's exact fp32 law, on the CPU.

    .venv/bin/python scripts/sampling_exact_law.py [--seeds 0,1,2] [--run SEED=RECORD]
        [--rounds 2000] [--bf16] [--eps 0.01] [--delta 0.1] [--cells 22:1,10:1]
        [--json /tmp/sampling_exact_law.json]

The `sampling*` checks compare DDTREE's draws with target-only's (a homogeneity test). This
tests every arm against the law both must draw instead. For each draw and output position k
(0: the prefill's token, the same sampler in both arms; 1 - 8: the check's positions), the law of
its token given its own drawn prefix: the fixture target in fp32 on the CPU (the offline
reference's model), logits / T, softmax, SGLang's sampler's filters (a token is kept if it is
among the top k and inside the top-p nucleus of the unfiltered distribution, i.e. the mass of
the tokens ranked above it is below top-p), renormalised.

Per arm, position and prompt, three statistics, each judged against its exact law conditional on
the drawn prefixes (Monte Carlo, ``--rounds`` redraws of every draw's token from its law):
- full: a χ² of the observed token counts against Σ_draws p(token | prefix), each category's
  squared gap over its variance Σ_draws p (1 - p) (tokens expected fewer than 5 times pooled).
  A token the fp32 law excludes (off support) can make it infinite.
- core: the same, only over the draws whose token lies in its prefix's *core* (kept by both
  filters with a margin: the mass above it below top-p - eps, its scaled logit more than delta
  above the (k+1)-th's), against the law renormalised over the core. Where the cut falls does
  not change that law, so a kernel's rounding moving the cut leaves it exact; a bias inside the
  nucleus does not.
- edge: how many draws land outside the core (at the cut or beyond) against the fp32 law's
  expectation.
Each position's Monte Carlo p-value is uniform given the positions before it under the null, so
positions combine by Fisher's method. Beside them, the check's own homogeneity statistic split
by prompt and position, and the check's combined permutation test again with every draw's
non-core token replaced by one EDGE category (a change confined to the cut then vanishes),
and ``--cells``' (prompt, position) cells in every arm of every seed. ``--bf16`` runs the model in
bf16 on the CPU as well: how far another kernel's rounding moves the law (not the GPU's law).
About a minute on two CPU cores (with --bf16).
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH = ROOT / "docs" / "bench"
TARGET = ROOT / "ddtree_overlay" / "fixtures" / "target"
RUNS = {  # seed: record (seed 2 on 0.5.14: the same draws as on 0.5.17, plus the flashinfer control)
    0: "2026-12-05-sampling-t0.6-h100",
    1: "2026-12-06-sampling-t0.6-seed1-0.5.17-h100",
    2: "2026-12-06-sampling-t0.6-seed2-0.5.14-h100",
    3: "2026-12-06-sampling-t0.6-seed3-0.5.14-h100",
}
PER_PROMPT = 256
POSITIONS = 9  # output positions 0 ... 8
MIN_EXPECTED = 5.0
EDGE = -1  # the token a draw's non-core token becomes in the collapsed homogeneity test


# ----------------------------------------------------------------------------------------------
# Pure functions (tests/bench/test_sampling_exact_law.py)


def filter_law(
    logits: np.ndarray, temperature: float, top_p: float, top_k: int, eps: float = 0.01, delta: float = 0.1
) -> dict[str, np.ndarray]:
    """SGLang's sampler's law for rows of ``logits`` [N, V]: ``probs`` (filtered, renormalised),
    ``raw`` (softmax of logits / T), ``rank`` (0 = likeliest), ``above`` (the raw mass of the
    tokens ranked above), ``kept`` and ``core`` (kept with a margin eps on the nucleus and delta
    on the scaled logit against the (k+1)-th token's) as [N, V] arrays."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    raw = np.exp(z - z.max(axis=1, keepdims=True))
    raw /= raw.sum(axis=1, keepdims=True)
    order = np.argsort(-z, axis=1, kind="stable")
    rows = np.arange(z.shape[0])[:, None]
    rank = np.empty_like(order)
    rank[rows, order] = np.arange(z.shape[1])[None, :]
    sorted_raw = raw[rows, order]
    above = np.empty_like(raw)
    above[rows, order] = np.cumsum(sorted_raw, axis=1) - sorted_raw
    kept = (rank < top_k) & (above < top_p)
    k_plus_1 = z[rows[:, 0], order[:, top_k]] if top_k < z.shape[1] else np.full(z.shape[0], -np.inf)
    core = kept & (above < top_p - eps) & (z - k_plus_1[:, None] > delta)
    probs = np.where(kept, raw, 0.0)
    probs /= probs.sum(axis=1, keepdims=True)
    return {"probs": probs, "raw": raw, "rank": rank, "above": above, "kept": kept, "core": core}


def pearson_cells(expected: np.ndarray, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """Category of each token for a Pearson statistic: its own where it is expected at least
    ``min_expected`` times, else the one pooled category (the last index)."""
    common = np.flatnonzero(expected >= min_expected)
    cells = np.full(expected.shape[0], len(common))
    cells[common] = np.arange(len(common))
    return cells


def standardized_stat(observed: np.ndarray, expected: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """Σ (O - E)² / V over the last axis, V each category's variance under the null (Σ_draws
    p (1 - p)); a category with no variance adds inf where O ≠ E (impossible under the null)."""
    gap = (observed - expected) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(variance > 1e-12, gap / np.where(variance > 1e-12, variance, 1), np.where(gap > 1e-12, np.inf, 0.0))
    return terms.sum(axis=-1)


def conditional_gof(
    laws: np.ndarray, tokens: np.ndarray, rounds: int, rng: np.random.Generator
) -> tuple[float, np.ndarray, int]:
    """A χ² of ``tokens`` (one per draw) against their laws ``laws`` [n, V] (each draw its own):
    per category (tokens expected fewer than 5 times pooled) (O - E)² over its variance, with
    the statistic's law when every token is redrawn from its law ``rounds`` times:
    (statistic, null draws [rounds], categories - 1)."""
    cells = pearson_cells(laws.sum(axis=0))
    c = int(cells.max()) + 1
    if c < 2:
        return 0.0, np.zeros(rounds), 0
    cell_laws = np.zeros((laws.shape[0], c))
    np.add.at(cell_laws.T, cells, laws.T)
    expected = cell_laws.sum(axis=0)
    variance = (cell_laws * (1 - cell_laws)).sum(axis=0)
    observed = np.bincount(cells[tokens], minlength=c).astype(float)
    null = np.zeros((rounds, c))
    unique, inverse = np.unique(cell_laws, axis=0, return_inverse=True)
    for g, law in enumerate(unique):
        m = int((inverse.reshape(-1) == g).sum())
        null += rng.multinomial(m, law / law.sum(), size=rounds)
    return float(standardized_stat(observed, expected, variance)), standardized_stat(null, expected, variance), c - 1


def edge_count(outside: np.ndarray, chance: np.ndarray, rounds: int, rng: np.random.Generator) -> tuple[int, float, np.ndarray]:
    """Draws that landed outside the core (``outside`` [n] bool) against the fp32 law's
    chances ``chance`` [n] of doing so: (observed, expected, null counts [rounds])."""
    null = (rng.random((rounds, chance.shape[0])) < chance[None, :]).sum(axis=1)
    return int(outside.sum()), float(chance.sum()), null


def mc_p(observed: float, null: np.ndarray) -> float:
    """One-sided Monte Carlo p-value, (1 + #{null ≥ observed}) / (rounds + 1)."""
    return float((1 + (null >= observed - 1e-9).sum()) / (null.shape[0] + 1))


def two_sided_mc_p(observed: float, null: np.ndarray) -> float:
    lower = (1 + (null <= observed + 1e-9).sum()) / (null.shape[0] + 1)
    return float(min(1.0, 2 * min(lower, mc_p(observed, null))))


def fisher(p_values: list[float]) -> float:
    """Fisher's method: -2 Σ ln p against χ² with 2n degrees of freedom."""
    from scipy.stats import chi2

    return float(chi2.sf(-2 * sum(math.log(p) for p in p_values), 2 * len(p_values)))


def collapse(outputs: list[list[int]], in_core) -> list[list[int]]:
    """Every draw's token at positions ≥ 1 replaced by EDGE where ``in_core(draw, position)``
    is false (position 0, the prefill's, kept as drawn: the prefixes stay the draws' own)."""
    return [[t if k == 0 or in_core(d, k) else EDGE for k, t in enumerate(out)] for d, out in enumerate(outputs)]


# ----------------------------------------------------------------------------------------------
# The records and the model


@cache
def load_arms(run: str) -> dict[str, dict]:
    """A record's arms by name, read once (main reads each seed's for its prefixes, its test and
    its cells)."""
    text = lzma.decompress((BENCH / run / "arms.jsonl.xz").read_bytes()).decode()
    return {r["arm"]: r for r in map(json.loads, filter(str.strip, text.splitlines()))}


def load_prompts(run: str) -> list[list[int]]:
    plans = sorted((BENCH / run).glob("plan-plain-*.json"))
    return json.loads(plans[0].read_text())["prompts"]


def logits_by_prefix(prompts, prefixes_by_prompt, dtype) -> dict[tuple[int, tuple[int, ...]], np.ndarray]:
    """fp32 (or ``dtype``) logits of the next token after prompt i + prefix, for every
    (i, prefix) of ``prefixes_by_prompt[i]`` and each prefix's own prefixes."""
    import torch

    from ddtree_overlay.reference.model import load_target

    target = load_target(TARGET, dtype=dtype)
    out: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            seqs = sorted(prefixes_by_prompt[i])
            for start in range(0, len(seqs), 64):
                batch = seqs[start : start + 64]
                ids = torch.tensor([prompt + list(s) for s in batch])
                positions = torch.arange(ids.shape[1]).expand_as(ids)
                logits = target(ids, positions).logits.float().numpy()
                p = len(prompt)
                for row, s in zip(logits, batch, strict=True):
                    for k in range(len(s) + 1):
                        out[(i, s[:k])] = row[p - 1 + k]
    return out


# ----------------------------------------------------------------------------------------------
# The analysis


class Laws:
    """The filtered law of every (prompt, prefix), rows of one table."""

    def __init__(self, logits: dict, sampling: dict, eps: float, delta: float) -> None:
        self.index = {key: n for n, key in enumerate(logits)}
        table = np.stack(list(logits.values()))
        self.law = filter_law(table, sampling["temperature"], sampling["top_p"], sampling["top_k"], eps, delta)

    def rows(self, prompt: int, outputs: list[list[int]], k: int) -> np.ndarray:
        return np.array([self.index[(prompt, tuple(o[:k]))] for o in outputs])


def test_arm(laws: Laws, outputs: list[list[int]], prompts: int, rounds: int, rng) -> dict:
    probs, core = laws.law["probs"], laws.law["core"]
    per_position, off_support = [], []
    for k in range(POSITIONS):
        full_stat, core_stat, edge_obs, edge_exp = 0.0, 0.0, 0, 0.0
        full_null, core_null, edge_null = np.zeros(rounds), np.zeros(rounds), np.zeros(rounds)
        prompt_rows = []
        for i in range(prompts):
            outs = outputs[i * PER_PROMPT : (i + 1) * PER_PROMPT]
            rows, tokens = laws.rows(i, outs, k), np.array([o[k] for o in outs])
            p = probs[rows]
            stat, null, dof = conditional_gof(p, tokens, rounds, rng)
            full_stat, full_null = full_stat + stat, full_null + null
            in_core = core[rows, tokens]
            off_support += [law_place(laws, int(r), int(t)) | {"prompt": i, "position": k, "row": int(r)}
                            for r, t in zip(rows, tokens, strict=True) if probs[r, t] == 0]
            q = np.where(core[rows], p, 0.0)[in_core]
            cstat, cnull, cdof = (0.0, np.zeros(rounds), 0)
            if in_core.any():
                cstat, cnull, cdof = conditional_gof(q / q.sum(axis=1, keepdims=True), tokens[in_core], rounds, rng)
            core_stat, core_null = core_stat + cstat, core_null + cnull
            o, e, enull = edge_count(~in_core, 1 - np.where(core[rows], p, 0.0).sum(axis=1), rounds, rng)
            edge_obs, edge_exp, edge_null = edge_obs + o, edge_exp + e, edge_null + enull
            prompt_rows.append({
                "prompt": i, "full_chi2": stat, "full_dof": dof, "full_p": mc_p(stat, null),
                "core_chi2": cstat, "core_null_mean": float(cnull.mean()), "core_dof": cdof, "core_p": mc_p(cstat, cnull),
                "edge": o, "edge_expected": e, "off_support": int((p[np.arange(len(tokens)), tokens] == 0).sum()),
            })
        per_position.append({
            "position": k, "full_chi2": full_stat, "full_p": mc_p(full_stat, full_null),
            "off_support": sum(r["off_support"] for r in prompt_rows),
            "core_chi2": core_stat, "core_null_mean": float(core_null.mean()), "core_p": mc_p(core_stat, core_null),
            "edge": edge_obs, "edge_expected": edge_exp, "edge_p": two_sided_mc_p(edge_obs, edge_null),
            "prompts": prompt_rows,
        })
    checked = per_position[1:]
    by_prompt = [
        {"prompt": i, "fisher_core_1_8": fisher([r["prompts"][i]["core_p"] for r in checked]),
         "fisher_full_1_8": fisher([r["prompts"][i]["full_p"] for r in checked])}
        for i in range(prompts)
    ]
    return {
        "positions": per_position,
        "fisher_full_1_8": fisher([r["full_p"] for r in checked]),
        "fisher_core_1_8": fisher([r["core_p"] for r in checked]),
        "fisher_edge_1_8": fisher([r["edge_p"] for r in checked]),
        "off_support_1_8": sum(r["off_support"] for r in checked),
        "edge_1_8": sum(r["edge"] for r in checked),
        "edge_expected_1_8": sum(r["edge_expected"] for r in checked),
        "off_support_draws": off_support,
        "by_prompt": sorted(by_prompt, key=lambda r: r["fisher_core_1_8"]),
    }


def law_place(laws: Laws, row: int, token: int) -> dict:
    """Where ``token`` sits in one prefix's fp32 law: rank, raw probability, the raw mass ranked
    above it, the support's size and whether it is kept / in the core."""
    law = laws.law
    return {
        "token": token, "rank": int(law["rank"][row, token]), "p_raw": float(law["raw"][row, token]),
        "p": float(law["probs"][row, token]), "mass_above": float(law["above"][row, token]),
        "support": int(law["kept"][row].sum()), "kept": bool(law["kept"][row, token]), "core": bool(law["core"][row, token]),
    }


def token_info(laws: Laws, prompt: int, records: list[list[list[int]]], k: int, token: int) -> dict:
    """``token`` at position k of ``prompt``: each record's fp32 expected count of it, and at the
    prefixes it was drawn from (all records) the median of its place in the law."""
    expected, drawn = [], []
    for outputs in records:
        outs = outputs[prompt * PER_PROMPT : (prompt + 1) * PER_PROMPT]
        rows = laws.rows(prompt, outs, k)
        expected.append(float(laws.law["probs"][rows, token].sum()))
        drawn += [int(r) for r, o in zip(rows, outs, strict=True) if o[k] == token]
    places = [law_place(laws, r, token) for r in drawn]
    median = {key: float(np.median([p[key] for p in places])) for key in ("rank", "p_raw", "mass_above", "support", "kept", "core")}
    return {"expected": expected, "drawn": len(drawn)} | median


def homogeneity_cells(reference: dict, arm: dict, prompts: int) -> list[dict]:
    """The check's pooled χ² per (prompt, position), with each token's part of it."""
    from ddtree_overlay.bench import sampled

    cells = []
    for k in range(1, POSITIONS):
        ours, theirs = sampled.by_prompt(reference, PER_PROMPT, k), sampled.by_prompt(arm, PER_PROMPT, k)
        for i in range(prompts):
            a, b = Counter(ours[i]), Counter(theirs[i])
            rows = sampled._table(a, b)
            if len(rows[0]) < 2:
                continue
            stat, dof = sampled.pearson(*rows)
            n_a, n_b = len(ours[i]), len(theirs[i])
            parts = []
            for t in sorted(set(a) | set(b)):
                col = a[t] + b[t]
                if col < sampled.RARE:
                    continue
                ea, eb = n_a * col / (n_a + n_b), n_b * col / (n_a + n_b)
                parts.append({"token": t, "reference": a[t], "arm": b[t], "chi2": (a[t] - ea) ** 2 / ea + (b[t] - eb) ** 2 / eb})
            parts.sort(key=lambda r: -r["chi2"])
            cells.append({"prompt": i, "position": k, "chi2": stat, "dof": dof, "excess": stat - dof, "tokens": parts})
    return sorted(cells, key=lambda c: -c["excess"])


def pair_of(arms: dict) -> tuple[str | None, str | None]:
    """The record's target-only arm (on triton) and its DDTREE arm, the pair its check compares."""
    plain = next((a for a in arms if a.startswith("plain") and not a.endswith("flashinfer")), None)
    return plain, next((a for a in arms if a.startswith("ddtree")), None)


def has_pair(arms: dict) -> bool:
    return None not in pair_of(arms)


def run_seed(run: str, n: int, laws: Laws, args, rng) -> dict:
    from ddtree_overlay.bench import sampled

    arms = load_arms(run)
    result: dict = {"run": run, "arms": {}}
    for name, record in arms.items():
        assert len(record["outputs"]) == n * PER_PROMPT
        result["arms"][name] = test_arm(laws, record["outputs"], n, args.rounds, rng)
    plain, ddtree = pair_of(arms)
    ref, arm = arms[plain], arms[ddtree]
    combined = sampled.combined_test(ref, arm, PER_PROMPT, POSITIONS - 1)
    core = laws.law["core"]

    def collapsed(record: dict) -> dict:
        outs = record["outputs"]
        return {"outputs": collapse(outs, lambda d, k: bool(core[laws.index[(d // PER_PROMPT, tuple(outs[d][:k]))], outs[d][k]]))}

    combined_core = sampled.combined_test(collapsed(ref), collapsed(arm), PER_PROMPT, POSITIONS - 1)
    cells = homogeneity_cells(ref, arm, n)
    for cell in cells[: args.top]:
        for part in cell["tokens"][:3]:
            part["fp32"] = token_info(laws, cell["prompt"], [ref["outputs"], arm["outputs"]], cell["position"], part["token"])
    excess = Counter()
    for cell in cells:
        excess[cell["prompt"]] += cell["excess"]
    result |= {
        "plain": plain, "ddtree": ddtree,
        "homogeneity_combined": combined, "homogeneity_combined_edge_collapsed": combined_core,
        "homogeneity_cells_total": sum(c["chi2"] for c in cells), "top_cells": cells[: args.top],
        "homogeneity_excess_by_prompt": excess.most_common(),
    }
    return result


def cell_report(laws: Laws, laws16: Laws | None, records: dict, prompt: int, k: int, rounds: int, rng) -> list[dict]:
    """One (prompt, position) in every arm of every seed: the core fit, the tokens furthest from
    their fp32 expectation (and the bf16 CPU law's), and the draws outside the core."""
    rows_out = []
    for seed, arms in records.items():
        for name, record in arms.items():
            outs = record["outputs"][prompt * PER_PROMPT : (prompt + 1) * PER_PROMPT]
            rows, tokens = laws.rows(prompt, outs, k), np.array([o[k] for o in outs])
            p, core = laws.law["probs"][rows], laws.law["core"][rows]
            in_core = core[np.arange(len(tokens)), tokens]
            q = np.where(core, p, 0.0)[in_core]
            stat, null, _ = conditional_gof(q / q.sum(axis=1, keepdims=True), tokens[in_core], rounds, rng)
            observed, expected = np.bincount(tokens, minlength=p.shape[1]), p.sum(axis=0)
            expected16 = laws16.law["probs"][rows].sum(axis=0) if laws16 else None
            tokens_far = [
                {"token": int(t), "observed": int(observed[t]), "fp32": float(expected[t]),
                 **({"bf16_cpu": float(expected16[t])} if laws16 else {})}
                for t in np.argsort(-np.abs(observed - expected))[:3]
            ]
            outside = Counter((int(r), int(t)) for r, t in zip(rows[~in_core], tokens[~in_core], strict=True))
            places = [law_place(laws, r, t) | {"drawn": n, **({"bf16_cpu_kept": bool(laws16.law["kept"][r, t])} if laws16 else {})}
                      for (r, t), n in outside.most_common(3)]
            rows_out.append({"seed": seed, "arm": name, "prefixes": len(set(rows.tolist())), "core_chi2": stat,
                             "core_null_mean": float(null.mean()), "core_p": mc_p(stat, null), "tokens": tokens_far, "outside_core": places})
    return rows_out


def bf16_shift(laws: Laws, laws16: Laws, report: dict) -> dict:
    """How the law moves when the same model runs in bf16 on the CPU (another kernel's rounding,
    not the GPU's): prefixes whose support changes, core tokens it drops, and how many of the
    arms' off-support draws it keeps."""
    assert list(laws.index) == list(laws16.index)
    a, b = laws.law, laws16.law
    z = (np.log(a["raw"]) - np.log(b["raw"])) * 1.0
    z -= z.mean(axis=1, keepdims=True)
    tv = 0.5 * np.abs(a["probs"] - b["probs"]).sum(axis=1)
    kept = {}
    for seed, s in report["seeds"].items():
        for name, arm in s["arms"].items():
            draws = arm["off_support_draws"]
            kept[f"{seed}/{name}"] = [sum(bool(b["kept"][d["row"], d["token"]]) for d in draws), len(draws)]
    return {
        "laws": len(laws.index),
        "support_differs": int((a["kept"] != b["kept"]).any(axis=1).sum()),
        "core_tokens_bf16_drops": int((a["core"] & ~b["kept"]).sum()),
        "max_abs_log_prob_diff_centered": float(np.abs(z).max()),
        "max_abs_mass_above_diff_over_kept": float(np.abs(np.where(a["kept"] | b["kept"], a["above"] - b["above"], 0)).max()),
        "tv_mean": float(tv.mean()), "tv_p99": float(np.quantile(tv, 0.99)), "tv_max": float(tv.max()),
        "off_support_draws_bf16_keeps": kept,
    }


def print_report(report: dict) -> None:
    print(f"law: T {report['sampling']['temperature']}, top-p {report['sampling']['top_p']}, top-k {report['sampling']['top_k']}; "
          f"core margins eps {report['eps']}, delta {report['delta']}; {report['rounds']} Monte Carlo rounds; {report['laws']} distinct prefixes")
    print("\nper arm against the fp32 law (Monte Carlo p; Fisher over positions 1-8)")
    print(f"{'seed':>4} {'arm':34} {'pos':>3} {'full χ²':>8} {'full p':>7} {'off':>4} {'core χ²':>8} {'null':>7} {'core p':>7} {'edge':>5} {'exp':>6} {'edge p':>7}")
    for seed, s in report["seeds"].items():
        for name, a in s["arms"].items():
            for r in a["positions"]:
                print(f"{seed:>4} {name:34} {r['position']:>3} {r['full_chi2']:8.1f} {r['full_p']:7.4f} {r['off_support']:>4} {r['core_chi2']:8.1f} "
                      f"{r['core_null_mean']:7.1f} {r['core_p']:7.4f} {r['edge']:>5} {r['edge_expected']:6.1f} {r['edge_p']:7.4f}")
            print(f"{seed:>4} {name:34} 1-8: full p {a['fisher_full_1_8']:.2g}, core p {a['fisher_core_1_8']:.4f}, edge p {a['fisher_edge_1_8']:.4f}; "
                  f"off-support draws {a['off_support_1_8']}, edge draws {a['edge_1_8']} (fp32 expects {a['edge_expected_1_8']:.1f})")
            worst = a["by_prompt"][:3]
            print("     prompts with the smallest core p (Fisher over 1-8): " + ", ".join(f"{w['prompt']} ({w['fisher_core_1_8']:.2g})" for w in worst))
            places = a["off_support_draws"]
            if places:
                gaps = [d["mass_above"] - report["sampling"]["top_p"] for d in places]
                print(f"     off-support draws (all positions): rank {sorted(Counter(d['rank'] for d in places).items())}, "
                      f"fp32 p_raw median {np.median([d['p_raw'] for d in places]):.4f}, mass above - top_p median {np.median(gaps):.4f} max {max(gaps):.4f}")
    print("\nthe check's homogeneity test (plain against DDTREE), raw and with non-core tokens as one EDGE category")
    for seed, s in report["seeds"].items():
        c, e = s["homogeneity_combined"], s["homogeneity_combined_edge_collapsed"]
        print(f"seed {seed}: χ² {c['chi2']:.1f} (null mean {c['null_mean']:.1f}) p {c['p_value']:.4f}; "
              f"edge-collapsed χ² {e['chi2']:.1f} (null mean {e['null_mean']:.1f}) p {e['p_value']:.4f}; "
              f"excess by prompt: {[(p, round(x, 1)) for p, x in s['homogeneity_excess_by_prompt'][:5]]}")
    for seed, s in report["seeds"].items():
        print(f"\nseed {seed}: the largest (prompt, position) cells of the homogeneity χ² (excess = χ² - dof); fp32 expected plain / ddtree")
        for cell in s["top_cells"]:
            print(f"  prompt {cell['prompt']:>2} pos {cell['position']}: χ² {cell['chi2']:.1f}, dof {cell['dof']}, excess {cell['excess']:.1f}")
            for part in cell["tokens"][:3]:
                f = part["fp32"]
                print(f"    token {part['token']:>3} {chr(part['token']) if 32 <= part['token'] < 127 else '?'!r}: plain {part['reference']}, ddtree {part['arm']}, "
                      f"χ² {part['chi2']:.1f}; fp32 expects {f['expected'][0]:.1f} / {f['expected'][1]:.1f}; where drawn: rank {f['rank']:g}, "
                      f"p_raw {f['p_raw']:.3f}, mass above {f['mass_above']:.3f}, support {f['support']:g}, core {f['core']:g}")
    for cell in report.get("cells", []):
        print(f"\nprompt {cell['prompt']} position {cell['position']}, every arm (core fit with {report['cell_rounds']} rounds; observed vs fp32 [bf16 CPU] expected)")
        for r in cell["arms"]:
            far = ", ".join(f"{chr(t['token'])!r} {t['observed']} vs {t['fp32']:.1f}" + (f" [{t['bf16_cpu']:.1f}]" if "bf16_cpu" in t else "") for t in r["tokens"])
            out = "; ".join(f"{chr(d['token'])!r} x{d['drawn']} rank {d['rank']} p_raw {d['p_raw']:.4f} mass above {d['mass_above']:.4f} fp32 kept {d['kept']}"
                            + (f" bf16 kept {d['bf16_cpu_kept']}" if "bf16_cpu_kept" in d else "") for d in r["outside_core"])
            print(f"  seed {r['seed']} {r['arm']:34} core χ² {r['core_chi2']:5.1f} (null {r['core_null_mean']:4.1f}) p {r['core_p']:.4f} | {far}" + (f" | outside core: {out}" if out else ""))
    if "bf16" in report:
        print("\nbf16 on the CPU against fp32:", json.dumps(report["bf16"]))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", help="the seeds to test, comma-separated (default: every record's)")
    parser.add_argument(
        "--run", action="append", default=[], metavar="SEED=RECORD",
        help="a sample's record under docs/bench, added or in place of that seed's (e.g. 3=DIR); repeatable",
    )
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--eps", type=float, default=0.01, help="core margin on the nucleus mass")
    parser.add_argument("--delta", type=float, default=0.1, help="core margin on the scaled logit against the (k+1)-th")
    parser.add_argument("--top", type=int, default=8, help="homogeneity cells to show per seed")
    parser.add_argument("--bf16", action="store_true", help="also run the model in bf16 on the CPU and report how the law moves")
    parser.add_argument("--cells", default="22:1,10:1,22:2,10:2,14:8", help="prompt:position cells to show in every arm")
    parser.add_argument("--cell-rounds", type=int, default=20000)
    parser.add_argument("--rng", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("/tmp/sampling_exact_law.json"))
    args = parser.parse_args(argv)
    import torch

    runs = dict(RUNS)
    for pair in args.run:
        seed, sep, record = pair.partition("=")
        if not (sep and seed.strip().isdigit() and (BENCH / record / "arms.jsonl.xz").is_file()):
            parser.error(f"--run takes SEED=RECORD with RECORD/arms.jsonl.xz under docs/bench, got {pair!r}")
        if not has_pair(load_arms(record)):
            parser.error(f"--run {pair}: the record has no target-only and DDTREE arms to compare; a control-only sample has no pair")
        runs[int(seed)] = record
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else sorted(runs)
    if unknown := [s for s in seeds if s not in runs]:
        parser.error(f"no record for seed {unknown[0]}: name it with --run {unknown[0]}=RECORD")
    prompts = load_prompts(runs[seeds[0]])
    assert all(load_prompts(runs[s]) == prompts for s in seeds), "the records' prompts differ"
    prefixes: list[set] = [set() for _ in prompts]
    sampling = None
    for s in seeds:
        for record in load_arms(runs[s]).values():
            sampling = sampling or record["sampling"]
            assert all(record["sampling"][key] == sampling[key] for key in ("temperature", "top_p", "top_k"))
            for d, out in enumerate(record["outputs"]):
                prefixes[d // PER_PROMPT].add(tuple(out[: POSITIONS - 1]))
    laws = Laws(logits_by_prefix(prompts, prefixes, torch.float32), sampling, args.eps, args.delta)
    rng = np.random.default_rng(args.rng)
    report = {
        "sampling": {k: sampling[k] for k in ("temperature", "top_p", "top_k")},
        "eps": args.eps, "delta": args.delta, "rounds": args.rounds, "cell_rounds": args.cell_rounds, "laws": len(laws.index),
        "seeds": {s: run_seed(runs[s], len(prompts), laws, args, rng) for s in seeds},
    }
    laws16 = Laws(logits_by_prefix(prompts, prefixes, torch.bfloat16), sampling, args.eps, args.delta) if args.bf16 else None
    if laws16:
        report["bf16"] = bf16_shift(laws, laws16, report)
    records = {s: load_arms(runs[s]) for s in seeds}
    report["cells"] = [
        {"prompt": i, "position": k, "arms": cell_report(laws, laws16, records, i, k, args.cell_rounds, rng)}
        for i, k in (tuple(map(int, c.split(":"))) for c in filter(None, args.cells.split(",")))
    ]
    print_report(report)
    args.json.write_text(json.dumps(report, separators=(",", ":"), default=float))
    print(f"\nwrote {args.json}")
    return report


if __name__ == "__main__":
    main()
