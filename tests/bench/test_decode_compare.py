from __future__ import annotations

import random

import pytest

from ddtree_overlay.bench import decode_compare as dc


def arm(name, outputs, margins=None, meta=None):
    rec = {"arm": name, "outputs": outputs, "meta": meta or [{} for _ in outputs]}
    if margins is not None:
        rec["top2_margins"] = margins
    return rec


def test_first_divergence_finds_the_first_differing_token_or_a_length_mismatch():
    assert dc.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert dc.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert dc.first_divergence([1, 2, 3], [1, 2]) == 2


def test_divergence_at_a_near_tie_is_explained_and_a_wide_margin_is_not():
    plain = arm("plain", [[1, 2, 3], [4, 5, 6], [7, 8, 9]], margins=[[3.0, 0.01, 2.0], [1.0] * 3, [1.0, 2.0, 4.0]])
    tree = arm("ddtree", [[1, 9, 9], [4, 5, 6], [7, 8, 0]])
    report = dc.lossless_report(plain, tree)
    assert report["identical"] == 1
    assert [(d["prompt"], d["index"], d["explained"]) for d in report["divergences"]] == [
        (0, 1, True),
        (2, 2, False),
    ]
    assert report["unexplained"] == 1
    assert not report["passed"]


def test_prompts_a_cell_never_decoded_are_not_counted_identical():
    # The margins run decoded 4 prompts; the cell only its first 2, one of them diverging.
    margins = arm("plain", [[1, 2], [3, 4], [5, 6], [7, 8]], margins=[[1.0, 1.0]] * 4)
    cell = arm("ddtree/bs1", [[1, 2], [3, 9]])
    report = dc.lossless_report(margins, cell)
    assert (report["prompts"], report["identical"], report["undecoded"]) == (2, 1, 2)
    assert report["unexplained"] == 1
    longer = dc.lossless_report(arm("plain", [[1, 2]], margins=[[1.0, 1.0]]), cell)
    assert (longer["prompts"], longer["identical"], longer["undecoded"]) == (1, 1, 1)


def test_logprobs_are_compared_where_the_tokens_agree_and_must_stay_within_bf16_noise():
    plain = arm("plain", [[1, 2, 3], [4, 5]]) | {"token_logprobs": [[-0.1, -0.2, -0.3], [-1.0, -2.0]]}
    # prompt 0 diverges at its third token, whose logprob is not compared
    tree = arm("ddtree", [[1, 2, 7], [4, 5]]) | {"token_logprobs": [[-0.1, -0.3, -9.0], [-1.0625, -2.0]]}
    report = dc.logprob_report(plain, tree)
    assert (report["tokens"], report["passed"]) == (4, True) and report["max_abs_diff"] == pytest.approx(0.1)
    off = dc.logprob_report(plain, arm("ddtree", [[1, 2, 3], [4, 5]]) | {"token_logprobs": [[-0.1, -0.2, -0.3], [-1.5, -2.0]]})
    assert not off["passed"] and off["max_abs_diff"] == pytest.approx(0.5)
    none = dc.logprob_report(plain, arm("ddtree", [[9], [9]]) | {"token_logprobs": [[], []]})
    assert (none["tokens"], none["passed"]) == (0, False)


def test_acceptance_excludes_the_prefill_token_and_counts_the_bonus():
    rec = arm(
        "ddtree",
        [[0] * 9, [0] * 5],
        meta=[{"completion_tokens": 9, "spec_verify_ct": 2}, {"completion_tokens": 5, "spec_verify_ct": 4}],
    )
    assert dc.acceptance_per_prompt(rec) == [4.0, 1.0]
    summary = dc.acceptance_summary(rec)
    assert summary["mean_acceptance_length"] == pytest.approx(12 / 6)
    assert summary["per_prompt_mean"] == pytest.approx(2.5)


def test_distribution_test_accepts_same_law_and_rejects_a_shifted_one():
    pytest.importorskip("scipy")
    rng = random.Random(0)

    def draws(weights, n):
        return [[0, rng.choices(range(len(weights)), weights)[0]] for _ in range(n)]

    base = arm("plain-t1", draws([5, 3, 2, 1], 3000))
    same = arm("ddtree-t1", draws([5, 3, 2, 1], 3000))
    shifted = arm("ddtree-t1", draws([3, 5, 2, 1], 3000))
    assert dc.distribution_test(base, same, 1)["p_value"] > 1e-3
    assert dc.distribution_test(base, shifted, 1)["p_value"] < 1e-6


def test_acceptance_parity_compares_each_prompt_with_the_reference_run():
    # prompt 0: 9 tokens after prefill in 3 rounds = 3.0 vs 3.0; prompt 1: 8 in 2 = 4.0 vs 5.0
    arm = {
        "arm": "ddtree-b32",
        "outputs": [[1] * 10, [2] * 9],
        "meta": [{"completion_tokens": 10, "spec_verify_ct": 3}, {"completion_tokens": 9, "spec_verify_ct": 2}],
    }
    reference = {"prompts": [{"accept_len_mean": 3.0, "tokens": [1] * 10}, {"accept_len_mean": 5.0, "tokens": [3] * 9}]}
    parity = dc.acceptance_parity(arm, reference, tolerance=0.03)
    assert (parity["prompts"], parity["within"]) == (2, 1)
    assert (parity["same_sequence"], parity["same_sequence_within"]) == (1, 1)
    assert parity["mean_rel_diff"] == pytest.approx(3.5 / 4.0 - 1)
    assert [round(p["rel_diff"], 3) for p in parity["per_prompt"]] == [0.0, -0.2]
