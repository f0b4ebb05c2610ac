from __future__ import annotations

import random
from pathlib import Path

import pytest

from ddtree_overlay.bench import check_presets, checks, sampled

scipy_stats = pytest.importorskip("scipy.stats")
np = pytest.importorskip("numpy")


def test_pearson_is_scipys_statistic_without_continuity_correction():
    reference, arm = [30, 12, 7, 1], [22, 18, 9, 3]
    stat, dof = sampled.pearson(reference, arm)
    expected = scipy_stats.chi2_contingency([reference, arm], correction=False)
    assert stat == pytest.approx(expected[0]) and dof == expected[2] == 3


def draws(rng: random.Random, weights, prompts: int, n: int) -> list[list[int]]:
    return [rng.choices(range(len(weights)), weights, k=n) for _ in range(prompts)]


def test_the_pooled_test_adds_the_prompts_and_tells_a_shifted_law():
    rng = random.Random(1)
    base = draws(rng, [5, 3, 2, 1], 8, 400)
    same = sampled.pooled_test(base, draws(rng, [5, 3, 2, 1], 8, 400))
    shifted = sampled.pooled_test(base, draws(rng, [3, 5, 2, 1], 8, 400))
    assert same["dof"] == 8 * 3 and same["draws"] == [3200, 3200] and same["n_eff"] == pytest.approx(8 * 200)
    assert same["p_value"] > 1e-3 and shifted["p_value"] < 1e-12
    one_token = sampled.pooled_test([[7] * 50], [[7] * 50])  # every draw the same token: no test
    assert (one_token["dof"], one_token["p_value"], one_token["n_eff"]) == (0, 1.0, 0.0)


def test_rare_tokens_are_pooled_into_one_category():
    reference = [0] * 40 + [1] * 40 + [2, 3]
    arm = [0] * 40 + [1] * 40 + [4, 5]
    assert sampled.pooled_test([reference], [arm])["dof"] == 2  # tokens 0, 1 and the rare pool


def simulated_power(p, q, n: int, alpha: float, trials: int, seed: int) -> float:
    """Share of `trials` two-sample tables (n draws from p, n from q) Pearson's test rejects."""
    rng = np.random.default_rng(seed)
    a, b = rng.multinomial(n, p, size=trials), rng.multinomial(n, q, size=trials)
    column = a + b
    expected = column / 2  # n draws on each side
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(column > 0, ((a - expected) ** 2 + (b - expected) ** 2) / expected, 0.0)
    stat = terms.sum(axis=1)
    dof = (column > 0).sum(axis=1) - 1
    return float(np.mean(scipy_stats.chi2.sf(stat, dof) < alpha))


def test_the_detectable_tv_is_detected_with_80_percent_power_in_simulation():
    """At the TV `detectable_tv` names, the hardest alternative (the difference proportional to
    the pooled law) is rejected in about 80 % of simulated tables; any other alternative at that
    TV, more often."""
    n, alpha, m = 2000, 0.01, np.array([0.4, 0.3, 0.2, 0.1])
    tv = sampled.detectable_tv(n / 2, 3, alpha)
    sign = np.array([1, -1, -1, 1])  # halves of equal mass: 0.4 + 0.1 and 0.3 + 0.2
    hardest_p, hardest_q = m * (1 + tv * sign), m * (1 - tv * sign)
    assert 0.5 * np.abs(hardest_p - hardest_q).sum() == pytest.approx(tv)
    assert simulated_power(hardest_p, hardest_q, n, alpha, 4000, seed=0) == pytest.approx(0.8, abs=0.03)
    lumped_p, lumped_q = m + np.array([tv, 0, 0, -tv]) / 2, m - np.array([tv, 0, 0, -tv]) / 2
    assert simulated_power(lumped_p, lumped_q, n, alpha, 4000, seed=1) > 0.85


def test_power_grows_with_draws_and_shrinks_with_categories_and_a_stricter_level():
    assert sampled.detectable_tv(4000, 10, 0.01) < sampled.detectable_tv(1000, 10, 0.01)
    assert sampled.detectable_tv(1000, 10, 0.01) < sampled.detectable_tv(1000, 100, 0.01)
    assert sampled.detectable_tv(1000, 10, 0.01) < sampled.detectable_tv(1000, 10, 0.001)
    assert sampled.detectable_tv(0, 0, 0.01) is None
    assert sampled.detectable_tv(1.0, 50, 1e-6) is None  # not even TV 1 with one draw a side
    assert sampled.planned_tv(32, 256, 20, 0.01) == pytest.approx(sampled.detectable_tv(32 * 128, 32 * 19, 0.01))


def test_draws_are_grouped_by_prompt_as_the_runner_repeats_them():
    record = {"outputs": [[9, 1, 2], [9, 1, 3], [8, 4], [8, 5, 6]]}
    assert sampled.by_prompt(record, 2, 1) == [[1, 1], [4, 5]]
    assert sampled.by_prompt(record, 2, 2) == [[2, 3], [6]]


def test_the_sampling_preset_draws_many_prompts_at_two_temperatures_with_top_p_and_top_k():
    arms = {arm.name: arm for arm in check_presets.PRESETS["sampling"]}
    assert set(arms) == {"plain-t0.6-draws", "ddtree-b32-t0.6-draws", "plain-t1-draws", "ddtree-b32-t1-draws"}
    runner = arms["ddtree-b32-t0.6-draws"].runner_arm(256)
    assert runner["sampling"] == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_new_tokens": 9, "ignore_eos": True}
    assert (runner["repeat"], runner["prompts"], runner["engine"]["max_running_requests"]) == (256, 32, 32)
    assert runner["engine"]["speculative_ddtree_budget"] == 32
    assert arms["ddtree-b32-t1-draws"].baseline == "plain-t1-draws"


def sampled_record(name: str, weights, draws: check_presets.Draws, seed: int) -> dict:
    rng = random.Random(seed)
    outputs = [[0, *rng.choices(range(len(weights)), weights, k=draws.positions)]
               for _ in range(draws.prompts) for _ in range(draws.per_prompt)]
    meta = [{"completion_tokens": len(o), "spec_verify_ct": 3} for o in outputs]
    return {"arm": name, "ok": True, "outputs": outputs, "meta": meta, "tok_per_s": 100.0}


def test_the_summary_tests_every_position_at_the_presets_level_and_fails_a_shifted_law():
    arms = check_presets.PRESETS["sampling"]
    draws = arms[0].draws
    plain = sampled_record("plain-t0.6-draws", [5, 3, 2, 1], draws, seed=0)
    same = sampled_record("ddtree-b32-t0.6-draws", [5, 3, 2, 1], draws, seed=1)
    summary = checks.summarize([plain, same], arms, None)
    verdicts = summary["sampling"]
    assert [v["position"] for v in verdicts] == list(range(1, 9))
    assert all(v["alpha"] == pytest.approx(0.01 / 16) for v in verdicts)  # 8 positions x 2 settings
    assert all(v["passed"] and v["detectable_tv"] < 0.07 for v in verdicts) and summary["problems"] == []
    assert verdicts[0]["detectable_tv_one_prompt"] == pytest.approx(verdicts[0]["detectable_tv"] * 32**0.5)
    assert "detects TV ≥ 0.0" in verdicts[0]["text"] and "32 prompts, 8192 / 8192 draws" in verdicts[0]["text"]
    shifted = sampled_record("ddtree-b32-t0.6-draws", [3, 5, 2, 1], draws, seed=1)
    failed = checks.summarize([plain, shifted], arms, None)
    assert len(failed["problems"]) == 8 and "FAILED" in failed["problems"][0]
    assert summary["lossless"] == []  # sampled arms are not judged token for token


def test_a_run_of_one_half_of_the_preset_keeps_the_presets_level():
    """The T = 0.6 and T = 1 halves run in separate device calls; each must still be tested at
    0.01 / 16, not at 0.01 / 8 for the eight tests its own arms make."""
    half = [arm for arm in check_presets.PRESETS["sampling"] if arm.draws.temperature == 1.0]
    draws = half[0].draws
    plain = sampled_record("plain-t1-draws", [5, 3, 2, 1], draws, seed=0)
    same = sampled_record("ddtree-b32-t1-draws", [5, 3, 2, 1], draws, seed=1)
    verdicts = checks.summarize([plain, same], half, None)["sampling"]
    assert len(verdicts) == 8 and all(v["alpha"] == pytest.approx(0.01 / 16) for v in verdicts)


def test_power_against_a_given_change_matches_simulation():
    p, q, n, alpha = [0.4, 0.3, 0.2, 0.1], [0.34, 0.33, 0.2, 0.13], 1500, 0.01
    assert sampled.power_against([p], [q], n, alpha) == pytest.approx(
        simulated_power(np.array(p), np.array(q), n, alpha, 4000, seed=2), abs=0.03
    )
    assert sampled.power_against([p, p], [p, p], n, alpha) == pytest.approx(alpha)


def test_the_filters_preset_judges_each_control_by_whether_the_test_tells_it_apart():
    arms = check_presets.PRESETS["sampling-filters"]
    assert [arm.name for arm in arms] == [
        "plain-t1.5-draws", "ddtree-b32-t1.5-draws", "ddtree-b32-t1.5-draws-eagle",
        "plain-t1.5-minp0.2-draws", "ddtree-b32-t1.5-minp0.2-draws", "ddtree-b32-t1.5-minp0.2-draws-eagle",
    ]
    control = arms[5]
    assert control.control and control.env == {"SGLANG_DDTREE_SAMPLING_FILTERS": "eagle"}
    assert control.baseline == "plain-t1.5-minp0.2-draws"
    assert control.runner_arm(256)["sampling"] == {
        "temperature": 1.5, "top_p": 0.8, "top_k": 20, "min_p": 0.2, "max_new_tokens": 9, "ignore_eos": True,
    }
    draws = control.draws
    plain = sampled_record("plain-t1.5-minp0.2-draws", [5, 3, 2, 1], draws, seed=0)
    same = sampled_record("ddtree-b32-t1.5-minp0.2-draws", [5, 3, 2, 1], draws, seed=1)
    told_apart = sampled_record(control.name, [3, 5, 2, 1], draws, seed=2)
    summary = checks.summarize([plain, same, told_apart], arms, None)
    assert summary["problems"] == [] and all(v["alpha"] == pytest.approx(0.01 / 16) for v in summary["sampling"])
    assert {v["min_p"] for v in summary["sampling"]} == {0.2} and "min-p 0.2" in summary["sampling"][0]["text"]
    not_told = sampled_record(control.name, [5, 3, 2, 1], draws, seed=3)
    problems = checks.summarize([plain, same, not_told], arms, None)["problems"]
    assert problems == [f"{control.name}: draws from another law than {control.baseline}, and no position's test told them apart"]


def filtered_laws(probs, draws: check_presets.Draws):
    """SGLang's flashinfer sampler's law (in a min-p batch the top k first) and eagle_sample's,
    per row."""
    import torch
    from sampler_laws import eagle_law, sampler_law

    top_ks, top_ps, min_ps = (torch.full(probs.shape[:1], value, dtype=probs.dtype) for value in (draws.top_k, draws.top_p, draws.min_p))
    return [sampler_law(probs, top_ks, top_ps, min_ps, top_k_first=bool(draws.min_p)), eagle_law(probs, top_ks, top_ps)]


@pytest.mark.parametrize(
    ("draws", "power"),
    [
        (check_presets.FILTERS[0], (0.95, 1.0)),
        (check_presets.FILTERS[1], (0.95, 1.0)),
        (check_presets.SAMPLING[1], (0.0, 0.01)),
    ],
    ids=["filters-order", "filters-min-p", "sampling-preset-t1"],
)
def test_eagle_samples_filters_are_told_apart_on_the_fixture_pair_where_they_bind(draws, power):
    """The fixture target's own laws at the check's prompts: position 1 (the first tree depth)
    mixes over the first token, which both arms' prefill samples under the sampler's law. The
    filters preset's settings separate the sampler's law from eagle_sample's; the sampling
    preset's T = 1 setting cannot (its top 50 tokens hold nearly all the mass)."""
    torch = pytest.importorskip("torch")
    import json

    from ddtree_overlay.fixture_paths import PAIRS
    from ddtree_overlay.reference.model import load_target

    target = load_target(PAIRS["dense"] / "target")
    prompts = json.loads((PAIRS["dense"] / "heldout_prompts.json").read_text())[: draws.prompts]

    def laws(ids: list[list[int]]):
        batch = torch.tensor(ids)
        logits = target(batch, torch.arange(batch.shape[1]).expand_as(batch)).logits[:, -1]
        return filtered_laws(torch.softmax(logits.double() / draws.temperature, -1), draws)

    reference, arm = [], []
    with torch.no_grad():
        for prompt in prompts:
            first = laws([prompt])[0][0]
            tokens = first.nonzero().flatten().tolist()
            law, eagle = laws([[*prompt, t] for t in tokens])
            weights = first[tokens].unsqueeze(1)
            reference.append((weights * law).sum(0).tolist())
            arm.append((weights * eagle).sum(0).tolist())
    low, high = power
    found = sampled.power_against(reference, arm, draws.per_prompt, checks.sampling_level(draws))
    assert low <= found <= high
    if draws in check_presets.FILTERS:
        page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md").read_text().split())
        assert f"{draws.label}: power {found:.2f}" in page, f"{draws.label}: power {found:.2f}"


def test_the_combined_test_keeps_a_same_law_and_tells_a_shifted_one_with_its_statistic_the_positions_sum():
    draws = check_presets.Draws(1.0, top_p=1.0, top_k=10, prompts=6, per_prompt=120, positions=3)
    plain = sampled_record("plain", [5, 3, 2, 1], draws, seed=0)
    same = sampled.combined_test(plain, sampled_record("same", [5, 3, 2, 1], draws, seed=1), 120, 3, rounds=500)
    shifted_record = sampled_record("shifted", [4, 4, 2, 1], draws, seed=2)
    shifted = sampled.combined_test(plain, shifted_record, 120, 3, rounds=500)
    positions_sum = sum(
        sampled.pooled_test(sampled.by_prompt(plain, 120, p), sampled.by_prompt(shifted_record, 120, p))["chi2"]
        for p in (1, 2, 3)
    )
    assert shifted["chi2"] == pytest.approx(positions_sum) and shifted["p_value"] < 0.01
    assert same["p_value"] > 0.05 and same["null_mean"] == pytest.approx(same["chi2"], rel=0.5)
    assert sampled.combined_test(plain, shifted_record, 120, 3, rounds=500) == shifted  # seeded


def test_the_summary_reports_the_combined_test_beside_the_verdicts():
    arms = check_presets.PRESETS["sampling"]
    draws = arms[0].draws
    plain = sampled_record("plain-t0.6-draws", [5, 3, 2, 1], draws, seed=0)
    same = sampled_record("ddtree-b32-t0.6-draws", [5, 3, 2, 1], draws, seed=1)
    (combined,) = checks.summarize([plain, same], arms, None)["sampling_combined"]
    assert combined["arm"] == "ddtree-b32-t0.6-draws" and combined["baseline"] == "plain-t0.6-draws"
    assert "positions 1-8 at once" in combined["text"] and "permutation p =" in combined["text"]


@pytest.mark.parametrize(("preset", "seed"), [("sampling-repeat", 1), ("sampling-third", 2)])
def test_the_repeat_presets_draw_the_sampling_settings_again_at_other_seeds(preset: str, seed: int):
    first = {arm.name: arm for arm in check_presets.PRESETS["sampling"]}
    arms = {arm.name: arm for arm in check_presets.PRESETS[preset] if not arm.name.endswith("-flashinfer")}
    assert set(arms) == {f"{name}-seed{seed}" for name in first}
    for name, arm in first.items():
        repeat = arms[f"{name}-seed{seed}"]
        assert repeat.baseline == (arm.baseline and f"{arm.baseline}-seed{seed}")
        runner, before = repeat.runner_arm(256), arm.runner_arm(256)
        assert runner["sampling"] == before["sampling"] and runner["engine"]["random_seed"] == seed
        assert "random_seed" not in before["engine"]  # the runner's own seed, 0
        assert checks.sampling_level(repeat.draws) == pytest.approx(0.01 / 16)


def test_the_fourth_sample_draws_t06_alone_at_seed_3_with_its_control_at_one_level():
    arms = {arm.name: arm for arm in check_presets.PRESETS["sampling-fourth"]}
    assert set(arms) == {"plain-t0.6-draws-seed3", "ddtree-b32-t0.6-draws-seed3", "plain-t0.6-draws-seed3-flashinfer"}
    runners = {name: arm.runner_arm(256) for name, arm in arms.items()}
    assert runners["ddtree-b32-t0.6-draws-seed3"]["engine"]["random_seed"] == 3
    assert runners["plain-t0.6-draws-seed3-flashinfer"]["engine"]["random_seed"] == 3 + check_presets.CONTROL_SEED_OFFSET
    # one setting, eight positions: its own family, so the level is 0.01 / 8
    assert all(checks.sampling_level(arm.draws) == pytest.approx(0.01 / 8) for arm in arms.values())


def test_the_third_sample_draws_target_only_again_through_other_attention_kernels_as_a_control():
    arms = {arm.name: arm for arm in check_presets.PRESETS["sampling-third"]}
    control = arms["plain-t0.6-draws-seed2-flashinfer"]
    plain = arms["plain-t0.6-draws-seed2"]
    assert control.baseline == plain.name and not control.control  # judged, expected to pass
    runner, baseline = control.runner_arm(256), plain.runner_arm(256)
    assert runner["sampling"] == baseline["sampling"] and baseline["engine"]["random_seed"] == 2
    # its own random stream: at the baseline's seed the two drew mostly the same sequences
    assert runner["engine"]["random_seed"] == 2 + check_presets.CONTROL_SEED_OFFSET
    assert runner["engine"]["attention_backend"] == "flashinfer"
    others = {"attention_backend": None, "random_seed": None}
    assert runner["engine"] | others == baseline["engine"] | others
    assert checks.sampling_level(control.draws) == checks.sampling_level(plain.draws)
