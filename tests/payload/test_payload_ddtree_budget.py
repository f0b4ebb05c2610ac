"""The budget policy (overlay/.../ddtree_budget.py): the flags' grammar with the chain, and what a
round asks of it (its shape, its trees, its verify width), on CPU."""

from __future__ import annotations

import pytest
from payload_modules import load_payload_module

db = load_payload_module("sglang.srt.speculative.ddtree_budget")
CHAIN, Policy = db.CHAIN, db.BudgetPolicy
BLOCK = 16


def test_widths():
    assert db.num_verify_tokens_for(4, 16) == 16
    assert db.num_verify_tokens_for(32, 16) == 33
    assert db.max_accept_width(4, 16) == 5
    assert db.max_accept_width(64, 16) == 16


def test_a_one_step_schedule_is_the_fixed_shape():
    assert Policy.parse_schedule("1:chain") == Policy.fixed(CHAIN)
    assert (Policy.fixed(CHAIN).label, Policy.fixed(32).label) == ("chain", "32")


def test_the_chain_verifies_the_block_as_dflash_does():
    # block 16: the root and 15 drafted nodes, every path up to the block's end accepted
    assert db.drafted_nodes(CHAIN, BLOCK) == 15
    assert db.shape_verify_tokens(CHAIN, BLOCK) == 16
    fixed_chain = Policy.fixed(CHAIN)
    assert (fixed_chain.widest_nodes(BLOCK), fixed_chain.widest_verify_tokens(BLOCK)) == (15, 16)
    assert fixed_chain.accept_width(BLOCK) == 16
    assert fixed_chain.drafts_at(1) == db.DraftStage(tree_budget=0, chain=True)
    assert fixed_chain.top_k(1000) == 1  # the chain reads the top-1 only


@pytest.mark.parametrize(
    ("bs", "shape"), [(1, 256), (7, 256), (8, 64), (15, 64), (16, CHAIN), (512, CHAIN)]
)
def test_a_schedule_gives_a_batch_the_last_step_at_or_below_it(bs, shape):
    policy = Policy.parse_schedule("1:256, 8:64, 16:chain")
    assert policy.shape_at(bs) == shape
    assert policy.shapes == (CHAIN, 64, 256)
    assert policy.label == "1:256,8:64,16:chain"


def test_a_schedules_widths_and_trees_follow_its_steps():
    policy = Policy.parse_schedule("1:8,4:chain,16:64")
    assert [policy.drafts_at(bs) for bs in (1, 4, 16)] == [(8, False), (0, True), (64, False)]
    assert policy.widest_verify_tokens(BLOCK) == 65 and policy.widest_nodes(BLOCK) == 64
    assert policy.accept_width(BLOCK) == 16  # the chain's and B = 64's paths reach the block's end
    assert Policy.parse_schedule("1:8,4:4").accept_width(BLOCK) == 9
    assert policy.top_k(1000) == 64 and policy.top_k(40) == 40


def test_a_policys_rounds_are_each_shape_with_the_tree_stage_it_is_verified_from():
    adaptive = Policy.parse_adaptive("32,chain,16")
    both = db.DraftStage(32, True)
    assert adaptive.rounds() == ((both, CHAIN), (both, 16), (both, 32))
    schedule = Policy.parse_schedule("1:64,4:chain,8:64,16:8")
    assert schedule.rounds() == (
        (db.DraftStage(64, False), 64), (db.DraftStage(0, True), CHAIN), (db.DraftStage(8, False), 8)
    )
    assert Policy.fixed(CHAIN).rounds() == ((db.DraftStage(0, True), CHAIN),)


@pytest.mark.parametrize("text", ["", "256", "1:", "1:64,x:8", "1:64,8:-1", "1:chains"])
def test_a_malformed_schedule_is_refused_naming_the_bad_step(text):
    with pytest.raises(ValueError, match="is not BATCH_SIZE:BUDGET"):
        Policy.parse_schedule(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [("4:64", "must start at batch size 1"), ("1:64,8:8,4:2", "must ascend"), ("1:64,8:0", "must be >= 1")],
)
def test_a_schedule_starts_at_one_ascends_and_has_budgets_of_a_node(text, message):
    with pytest.raises(ValueError, match=message):
        Policy.parse_schedule(text)


@pytest.mark.parametrize(
    ("text", "choices"),
    [("16,64,256", (16, 64, 256)), (" 64, 8 ,64,32", (8, 32, 64)), ("32,chain,8", (CHAIN, 8, 32))],
)
def test_adaptive_choices_parse_chain_first_then_ascending_without_repeats(text, choices):
    policy = Policy.parse_adaptive(text)
    assert policy.choices == policy.shapes == choices and policy.is_adaptive


def test_adaptive_trees_are_the_widest_tree_and_the_chain_when_chosen_from():
    policy = Policy.parse_adaptive("chain,8,32")
    assert {policy.drafts_at(bs) for bs in (1, 5, 64)} == {db.DraftStage(32, True)}
    assert policy.widest_verify_tokens(BLOCK) == 33 and policy.accept_width(BLOCK) == 16
    assert policy.label == "adaptive chain/8/32"
    assert Policy.parse_adaptive("8,15").drafts_at(1) == (15, False)
    with pytest.raises(ValueError, match="per round"):
        policy.shape_at(1)


@pytest.mark.parametrize(
    ("text", "message"),
    [("16;64", "separated by commas"), ("16,x", "separated by commas"), ("0,16", "must be >= 1"),
     ("64", "at least two budgets"), ("64,64", "at least two budgets"), ("chain,chain", "at least two")],
)
def test_malformed_adaptive_budgets_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        Policy.parse_adaptive(text)


def flags(**given):
    return {"budget": None, "schedule": None, "adaptive": None, "default_budget": 15, **given}


def test_the_flags_name_one_policy():
    assert Policy.from_flags(**flags()) == Policy.fixed(15)
    assert Policy.from_flags(**flags(budget=32)) == Policy.fixed(32)
    assert Policy.from_flags(**flags(schedule="1:64,17:chain")).shape_at(17) == CHAIN
    assert Policy.from_flags(**flags(adaptive="chain,8,32")).choices == (CHAIN, 8, 32)
    with pytest.raises(ValueError, match="takes one of --speculative-ddtree-budget / "):
        Policy.from_flags(**flags(budget=8, adaptive="8,32"))
    with pytest.raises(ValueError, match="requires --speculative-ddtree-budget >= 1, got 0"):
        Policy.from_flags(**flags(budget=0))


def test_the_tree_shape_switch_makes_every_round_the_chain_after_checking_the_flags():
    for given in ({}, {"budget": 64}, {"schedule": "1:64,8:8"}, {"adaptive": "8,32"}):
        assert Policy.from_flags(**flags(**given), tree_shape="chain") == Policy.fixed(CHAIN)
    with pytest.raises(ValueError, match="not several"):
        Policy.from_flags(**flags(budget=8, schedule="1:8"), tree_shape="chain")


def test_resolved_flags_read_the_schedule_or_adaptive_list_over_the_widest_budget():
    # the spec hook leaves the widest shape's nodes in --speculative-ddtree-budget
    resolved = dict(budget=64, schedule=None, adaptive=None)
    assert Policy.of_resolved_flags(**resolved) == Policy.fixed(64)
    assert Policy.of_resolved_flags(**{**resolved, "schedule": "1:64,8:chain"}).shapes == (CHAIN, 64)
    assert Policy.of_resolved_flags(**{**resolved, "adaptive": "chain,64"}).choices == (CHAIN, 64)
    assert Policy.of_resolved_flags(**resolved, tree_shape="chain") == Policy.fixed(CHAIN)


def test_a_policy_is_steps_or_choices():
    with pytest.raises(ValueError, match="steps or choices"):
        Policy()


@pytest.mark.parametrize("text", ["1:64,17:chain", "1:256,8:64,16:32"])
def test_a_schedule_reads_back_from_its_label_as_the_tool_side_writes_it(text):
    from ddtree_overlay.bench import arms

    policy = Policy.parse_schedule(text)
    assert Policy.parse_schedule(policy.label) == policy
    assert policy.label == arms.BudgetPolicy.parse_schedule(text).schedule_text


@pytest.mark.parametrize("text", ["chain,8,32", "32,chain", "16,64,256"])
def test_adaptive_budgets_parse_and_label_the_same_on_both_sides(text):
    from ddtree_overlay.bench import arms

    tool = arms.BudgetPolicy.parse_adaptive(text)
    assert Policy.parse_adaptive(text).choices == tool.adaptive
    assert Policy.parse_adaptive(text).label == tool.policy_label
    assert Policy.parse_adaptive(tool.engine_args()["speculative_ddtree_adaptive_budgets"]).choices == tool.adaptive
