"""scripts/sampling_exact_law.py's pure statistics: SGLang's filter law, the conditional
goodness-of-fit against per-draw laws and its Monte Carlo null, Fisher's method, the collapse; and
which records it takes."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sampling_exact_law.py"
spec = importlib.util.spec_from_file_location("sampling_exact_law", SCRIPT)
law_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(law_script)


def logits_of(probs):
    return np.log(np.asarray(probs, dtype=np.float64))[None, :]


def test_the_filter_law_cuts_the_nucleus_from_the_unfiltered_law_then_the_top_k():
    # mass above: 0, 0.4, 0.7, 0.9. Top-p 0.5 keeps ranks 0 and 1 (0.4 < 0.5), top-k 2 too;
    # eagle_sample's top k first would renormalise to 4/7, 3/7 and keep rank 0 alone.
    law = law_script.filter_law(logits_of([0.4, 0.3, 0.2, 0.1]), 1.0, 0.5, 2)
    assert law["kept"][0].tolist() == [True, True, False, False]
    assert law["probs"][0] == pytest.approx([4 / 7, 3 / 7, 0, 0])
    assert law["above"][0] == pytest.approx([0, 0.4, 0.7, 0.9])
    assert law["rank"][0].tolist() == [0, 1, 2, 3]
    # the token that crosses top-p is kept; top-k binds where the nucleus is wider
    assert law_script.filter_law(logits_of([0.4, 0.3, 0.2, 0.1]), 1.0, 0.75, 20)["kept"][0].tolist() == [True, True, True, False]
    assert law_script.filter_law(logits_of([0.4, 0.3, 0.2, 0.1]), 1.0, 0.95, 1)["kept"][0].tolist() == [True, False, False, False]


def test_temperature_scales_the_logits_before_the_softmax():
    law = law_script.filter_law(np.array([[2.0, 1.0, 0.0]]), 0.5, 1.0, 3)
    z = np.array([4.0, 2.0, 0.0])
    assert law["raw"][0] == pytest.approx(np.exp(z) / np.exp(z).sum())


def test_the_core_leaves_out_tokens_within_a_margin_of_either_cut():
    probs = logits_of([0.4, 0.3, 0.2, 0.1])
    assert law_script.filter_law(probs, 1.0, 0.5, 2)["core"][0].tolist() == [True, True, False, False]
    # rank 1's mass above (0.4) within eps of top-p 0.5
    assert law_script.filter_law(probs, 1.0, 0.5, 2, eps=0.15)["core"][0].tolist() == [True, False, False, False]
    # rank 1's scaled logit within delta of the third token's (ln 1.5 = 0.405)
    assert law_script.filter_law(probs, 1.0, 0.5, 2, delta=0.5)["core"][0].tolist() == [True, False, False, False]


def test_rare_tokens_share_one_pooled_category():
    cells = law_script.pearson_cells(np.array([100.0, 4.0, 50.0, 0.5, 0.0]))
    assert cells.tolist() == [0, 2, 1, 2, 2]
    assert law_script.pearson_cells(np.array([10.0, 6.0])).tolist() == [0, 1]


def test_the_standardized_statistic_and_its_impossible_categories():
    observed, expected, variance = np.array([12.0, 8.0]), np.array([10.0, 10.0]), np.array([5.0, 5.0])
    assert law_script.standardized_stat(observed, expected, variance) == pytest.approx(1.6)
    assert law_script.standardized_stat(np.array([1.0, 9.0]), np.array([0.0, 10.0]), np.array([0.0, 0.0])) == math.inf
    assert law_script.standardized_stat(np.array([0.0, 10.0]), np.array([0.0, 10.0]), np.array([0.0, 0.0])) == 0.0


def draw(rng, laws):
    return np.array([rng.choice(laws.shape[1], p=law) for law in laws])


def per_draw_laws(rng, n=256):
    # two prefixes' laws, as draws of one prompt at a later position split by their prefix
    base = np.array([[0.6, 0.25, 0.1, 0.04, 0.01], [0.1, 0.2, 0.6, 0.05, 0.05]])
    return base[rng.integers(0, 2, size=n)]


def test_the_conditional_fit_is_calibrated_and_tells_a_shifted_law():
    rng = np.random.default_rng(3)
    p_values = []
    for _ in range(120):
        laws = per_draw_laws(rng)
        stat, null, dof = law_script.conditional_gof(laws, draw(rng, laws), 200, rng)
        assert dof >= 2 and null.shape == (200,)
        p_values.append(law_script.mc_p(stat, null))
    p_values = np.array(p_values)
    assert 0.4 < p_values.mean() < 0.6 and (p_values < 0.05).mean() < 0.12
    laws = per_draw_laws(rng)
    shifted = laws[:, [1, 0, 2, 3, 4]]  # the top two tokens' probabilities swapped
    stat, null, _ = law_script.conditional_gof(laws, draw(rng, shifted), 200, rng)
    assert law_script.mc_p(stat, null) < 0.01


def test_a_token_outside_the_support_is_impossible_under_the_law():
    laws = np.tile([0.5, 0.5, 0.0], (40, 1))
    tokens = np.array([0, 1] * 19 + [2, 2])
    stat, null, _ = law_script.conditional_gof(laws, tokens, 100, np.random.default_rng(0))
    assert law_script.mc_p(stat, null) == pytest.approx(1 / 101)


def test_edge_counts_and_monte_carlo_p_values():
    rng = np.random.default_rng(1)
    chance = np.full(1000, 0.02)
    observed, expected, null = law_script.edge_count(np.arange(1000) < 20, chance, 2000, rng)
    assert observed == 20 and expected == pytest.approx(20) and abs(null.mean() - 20) < 0.5
    assert law_script.mc_p(1e9, null) == pytest.approx(1 / 2001)
    assert law_script.mc_p(-1.0, null) == 1.0
    assert law_script.two_sided_mc_p(20, null) == 1.0
    assert law_script.two_sided_mc_p(45, null) < 0.002


def test_fisher_of_one_p_value_is_itself():
    assert law_script.fisher([0.03]) == pytest.approx(0.03)
    assert law_script.fisher([1.0, 1.0]) == pytest.approx(1.0)
    # -2 Σ ln p = 2 ln 1000, χ² 4 dof survival: e^{-x/2} (1 + x/2)
    assert law_script.fisher([0.01, 0.1]) == pytest.approx(1e-3 * (1 + math.log(1000)))


def test_collapse_keeps_the_prefill_token_and_marks_the_rest_outside_the_core():
    outputs = [[5, 6, 7], [5, 8, 9]]
    collapsed = law_script.collapse(outputs, lambda d, k: (d, k) != (1, 1))
    assert collapsed == [[5, 6, 7], [5, law_script.EDGE, 9]]
    assert law_script.collapse(outputs, lambda d, k: False) == [[5, -1, -1], [5, -1, -1]]


def test_a_record_without_the_target_only_and_ddtree_pair_is_refused_in_one_line(capsys):
    control_only = "2026-12-06-sampling-t0.6-seed2-flashinfer-control-h100"  # target-only on triton and on flashinfer
    assert law_script.pair_of(law_script.load_arms(control_only)) == ("plain-t0.6-draws-seed2", None)
    with pytest.raises(SystemExit) as stop:
        law_script.main(["--run", f"2={control_only}"])
    assert stop.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert f"--run 2={control_only}: the record has no target-only and DDTREE arms to compare" in line
    assert law_script.has_pair(law_script.load_arms("2026-12-06-sampling-t0.6-seed3-0.5.14-h100"))
