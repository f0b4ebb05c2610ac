"""bench.arms: one vocabulary for arms and budget policies, from CLI text to engine keywords."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddtree_overlay.bench.arms import (
    DDTREE,
    DFLASH,
    EAGLE3,
    NEXTN,
    TARGET_ONLY,
    Arm,
    BudgetPolicy,
    number_list,
    parse_with_settings,
    policy_label,
    reference_cli_args,
    verify_width,
)


@pytest.mark.parametrize(
    ("name", "arm", "label", "engine"),
    [
        ("target-only", Arm(TARGET_ONLY), "target-only", {}),
        ("dflash-no-overlap", Arm(DFLASH, overlap=False), "DFLASH (no overlap)",
         {"speculative_algorithm": DFLASH, "disable_overlap_schedule": True}),
        ("ddtree-b32", Arm.ddtree(32), "DDTREE B=32",
         {"speculative_algorithm": DDTREE, "speculative_ddtree_budget": 32}),
        ("ddtree-adaptive-8-32-256-no-overlap", Arm.ddtree(BudgetPolicy(adaptive=(8, 32, 256)), overlap=False),
         "DDTREE adaptive 8/32/256 (no overlap)",
         {"speculative_algorithm": DDTREE, "speculative_ddtree_adaptive_budgets": "8,32,256",
          "disable_overlap_schedule": True}),
        ("ddtree-schedule-1x256-8x64", Arm.ddtree(BudgetPolicy(schedule=((1, 256), (8, 64)))),
         "DDTREE schedule 1:256,8:64",
         {"speculative_algorithm": DDTREE, "speculative_ddtree_budget_schedule": "1:256,8:64"}),
        ("dflash-no-overlap@triton", Arm(DFLASH, overlap=False, backend="triton"), "DFLASH on triton (no overlap)",
         {"speculative_algorithm": DFLASH, "disable_overlap_schedule": True, "attention_backend": "triton"}),
        ("target-only@flashinfer", Arm(TARGET_ONLY, backend="flashinfer"), "target-only on flashinfer",
         {"attention_backend": "flashinfer"}),
    ],
)
def test_an_arm_reads_back_from_its_name_with_its_label_and_engine_keywords(name, arm, label, engine) -> None:
    assert Arm.parse(name) == arm and arm.name == name
    assert arm.label == label and arm.engine_args() == engine
    assert Arm.of_row(arm.row()) == arm


def test_plain_is_target_only() -> None:
    assert Arm.parse("plain") == Arm(TARGET_ONLY)


@pytest.mark.parametrize("name", ["eagle", "dflash-overlap", "ddtree-adaptive-8", "ddtree-b", "ddtree-schedule-2x8"])
def test_a_bad_arm_name_says_what_names_exist(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown arm|must start at 1"):
        Arm.parse(name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1=256", "expected BATCH_SIZE:BUDGET steps"),
        ("2:256", "must start at 1 and ascend"),
        ("1:256,8:64,4:8", "must start at 1 and ascend"),
        ("1:256,8:0", "every budget must be >= 1"),
    ],
)
def test_a_bad_schedule_is_refused_with_the_rule_it_breaks(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BudgetPolicy.parse_schedule(text)


def test_adaptive_budgets_are_at_least_two_sorted_budgets() -> None:
    assert BudgetPolicy.parse_adaptive("256,8,32,8").adaptive == (8, 32, 256)
    with pytest.raises(ValueError, match="at least two budgets"):
        BudgetPolicy.parse_adaptive("32")
    with pytest.raises(ValueError, match=">= 1"):
        BudgetPolicy.parse_adaptive("8,0")


def test_a_policy_is_exactly_one_kind_and_only_ddtree_has_one() -> None:
    with pytest.raises(ValueError):
        BudgetPolicy(budget=8, adaptive=(8, 32))
    with pytest.raises(ValueError):
        Arm(DFLASH, BudgetPolicy.fixed(8))
    with pytest.raises(ValueError):
        Arm(DDTREE)


def test_policies_sort_fixed_then_adaptive_then_schedules_and_price_as_their_widest() -> None:
    policies = [BudgetPolicy(schedule=((1, 64),)), BudgetPolicy(adaptive=(8, 256)), BudgetPolicy.fixed(32)]
    assert [p.label for p in sorted(policies, key=lambda p: p.sort_key)] == [
        "B=32", "adaptive 8/256", "schedule 1:64",
    ]
    assert [p.widest for p in policies] == [64, 256, 32]


def test_only_fixed_budgets_dflash_and_eagle3_have_an_offline_reference() -> None:
    assert Arm.ddtree(8, overlap=False).reference_key == "ddtree-b8"
    assert Arm(DFLASH, overlap=False).reference_key == "dflash"
    assert Arm(EAGLE3).reference_key == "eagle3"
    assert Arm.ddtree(BudgetPolicy(adaptive=(8, 32))).reference_key is None
    assert Arm(TARGET_ONLY).reference_key is None and Arm(NEXTN).reference_key is None


def test_each_reference_key_names_its_drafter_and_algorithm() -> None:
    draft, eagle3 = Path("pair/draft"), Path("eagle3")
    assert reference_cli_args("ddtree-b8", draft=draft, eagle3_draft=None) == [
        "--draft", "pair/draft", "--algo", "ddtree", "--budget", "8"]
    assert reference_cli_args("eagle3", draft=draft, eagle3_draft=eagle3) == [
        "--draft", "eagle3", "--algo", "eagle3", "--num-steps", "3"]
    for key, why in (("eagle3", "needs an EAGLE-3 drafter"), ("nextn", "no offline reference is named 'nextn'")):
        with pytest.raises(ValueError, match=why):
            reference_cli_args(key, draft=draft, eagle3_draft=None)


def test_rows_without_a_policy_have_no_policy_label() -> None:
    assert policy_label(Arm(DFLASH).row()) is None
    assert policy_label(Arm.ddtree(16).row()) is None
    assert policy_label(Arm.ddtree(BudgetPolicy(adaptive=(8, 32))).row()) == "adaptive 8/32"


def test_verify_width_is_the_root_and_the_budget_but_at_least_a_block() -> None:
    assert verify_width(4) == 16 and verify_width(32) == 33


def test_number_lists_are_sorted_sets_of_numbers_at_least_the_minimum() -> None:
    assert number_list("16,4,8,4", int, 1) == (4, 8, 16)
    with pytest.raises(ValueError, match="expected comma-separated numbers, got"):
        number_list("4,many", int, 1)


def test_an_arm_with_settings_starts_its_engine_with_them() -> None:
    """scripts/gpu/round_trace.py's arms: an A/B of the payload's switches in one run."""
    arm, env, engine = parse_with_settings("ddtree-b256-no-overlap@SGLANG_DDTREE_COMMIT_GRAPH=1@SGLANG_DDTREE_TREE_GRAPH=0")
    assert arm == Arm.ddtree(256, overlap=False) and engine == {}
    assert env == {"SGLANG_DDTREE_COMMIT_GRAPH": "1", "SGLANG_DDTREE_TREE_GRAPH": "0"}
    assert parse_with_settings("plain") == (Arm(TARGET_ONLY), {}, {})
    assert parse_with_settings("dflash@flashinfer@SGLANG_X=1") == (Arm(DFLASH, backend="flashinfer"), {"SGLANG_X": "1"}, {})
    assert parse_with_settings("ddtree-b32@speculative_draft_attention_backend=flashinfer@SGLANG_X=1") == (
        Arm.ddtree(32), {"SGLANG_X": "1"}, {"speculative_draft_attention_backend": "flashinfer"}
    )


@pytest.mark.parametrize(
    "text",
    ["ddtree-b32@lower=1", "ddtree-b32@NOVALUE", "eagle@SGLANG_X=1", "ddtree-b32@speculative_draft_attention_backend="],
)
def test_a_bad_arm_or_setting_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"is neither ENV_NAME=VALUE nor|unknown arm"):
        parse_with_settings(text)


@pytest.mark.parametrize(
    ("name", "algorithm", "label", "overlap"),
    [("nextn", NEXTN, "NEXTN", True), ("eagle3-no-overlap", EAGLE3, "EAGLE-3 (no overlap)", False)],
)
def test_chain_baselines_run_a_three_token_chain(name: str, algorithm: str, label: str, overlap: bool) -> None:
    arm = Arm.parse(name)
    assert arm == Arm(algorithm, overlap=overlap) and arm.name == name and arm.label == label
    assert arm.reference_key == ("eagle3" if algorithm == EAGLE3 else None) and Arm.of_row(arm.row()) == arm
    assert arm.engine_args() == {
        "speculative_algorithm": algorithm,
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    } | ({} if overlap else {"disable_overlap_schedule": True})


def test_only_ddtree_arms_take_a_budget_policy() -> None:
    with pytest.raises(ValueError, match="only a DDTREE arm"):
        Arm(NEXTN, BudgetPolicy.fixed(8))


def test_only_baseline_arms_name_their_backend() -> None:
    assert Arm(NEXTN, backend="triton").name == "nextn@triton" and Arm(EAGLE3, backend="fa3").label == "EAGLE-3 on fa3"
    assert "backend" not in Arm(DFLASH).row()  # rows of a sweep on one baseline backend stay as they were
    with pytest.raises(ValueError, match="runs --attention-backend"):
        Arm(DDTREE, BudgetPolicy.fixed(8), backend="triton")
    with pytest.raises(ValueError, match="only a baseline arm names its attention backend"):
        Arm.parse("ddtree-b8@triton")


@pytest.mark.parametrize(
    ("name", "policy", "label", "flag"),
    [
        ("ddtree-adaptive-chain-8-32", BudgetPolicy(adaptive=("chain", 8, 32)), "adaptive chain/8/32",
         {"speculative_ddtree_adaptive_budgets": "chain,8,32"}),
        ("ddtree-schedule-1x64-17xchain", BudgetPolicy(schedule=((1, 64), (17, "chain"))), "schedule 1:64,17:chain",
         {"speculative_ddtree_budget_schedule": "1:64,17:chain"}),
    ],
)
def test_the_chain_reads_back_as_a_width_from_names_flags_and_rows(name, policy, label, flag) -> None:
    arm = Arm.ddtree(policy)
    assert Arm.parse(name) == arm and arm.name == name
    assert policy.label == label and policy.engine_args() == flag
    assert Arm.of_row(arm.row()) == arm
    text = next(iter(flag.values()))
    parse = BudgetPolicy.parse_adaptive if policy.adaptive else BudgetPolicy.parse_schedule
    assert parse(text) == policy
    assert policy.widest == (32 if policy.adaptive else 64)


def test_the_chain_sorts_first_and_counts_as_the_blocks_nodes() -> None:
    assert BudgetPolicy.parse_adaptive("32,chain,8,chain").adaptive == ("chain", 8, 32)
    assert BudgetPolicy.of_choices([32, "chain", 8]) == BudgetPolicy(adaptive=("chain", 8, 32))
    assert BudgetPolicy.parse_schedule("1:chain").widest == 15  # block 16: the root and 15 drafted
    policies = [BudgetPolicy.parse_adaptive("8,32"), BudgetPolicy.parse_adaptive("chain,8"), BudgetPolicy.fixed(8)]
    assert [p.label for p in sorted(policies, key=lambda p: p.sort_key)] == ["B=8", "adaptive chain/8", "adaptive 8/32"]
    with pytest.raises(ValueError, match="expected comma-separated numbers >= 1 or"):
        BudgetPolicy.parse_adaptive("chain,chian")
    with pytest.raises(ValueError, match="expected BATCH_SIZE:BUDGET"):
        BudgetPolicy.parse_schedule("1:64,8:chian")
