"""The SGLang switches a bench run's engines inherit (ddtree_overlay/bench/sglang_env.py)."""

from __future__ import annotations

from ddtree_overlay.bench.sglang_env import env_assignments, env_text, inherited_sglang_env


def test_only_sglangs_variables_are_inherited_sorted_by_name() -> None:
    environ = {"SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1", "PATH": "/bin", "SGLANG_DDTREE_VERIFY_ATTENTION": "extend",
               "FAKE_SGLANG": "{}", "sglang_lower": "x"}
    assert inherited_sglang_env(environ) == (
        ("SGLANG_DDTREE_VERIFY_ATTENTION", "extend"), ("SGLANG_ENABLE_OVERLAP_PLAN_STREAM", "1"),
    )
    assert inherited_sglang_env({"PATH": "/bin"}) == ()


def test_a_ddtree_server_gets_every_switch_and_the_others_sglangs_own() -> None:
    env = {"SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1", "SGLANG_DDTREE_DRAFT_ATTENTION": "splitkv"}
    assert env_assignments(env, ddtree=True) == ["SGLANG_DDTREE_DRAFT_ATTENTION=splitkv", "SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1"]
    assert env_assignments(env, ddtree=False) == ["SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1"]


def test_the_engines_line_names_the_switches_or_nothing() -> None:
    assert env_text({"sglang_env": {"SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1"}}) == (
        " Every engine's environment: `SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1`."
    )
    assert env_text({"sglang_env": {}}) == env_text({}) == ""  # {}: a report from before the field
