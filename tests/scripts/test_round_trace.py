"""scripts/gpu/round_trace.py's arm names: algorithm, scheduling, TP and per-arm environment."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def round_trace():
    spec = importlib.util.spec_from_file_location("round_trace", ROOT / "scripts" / "gpu" / "round_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SETTING = SimpleNamespace(target="/m/target", draft="/m/draft", engine={"context_length": 1024})


def test_an_arm_with_settings_starts_its_engine_with_them(round_trace):
    arm = "ddtree-b256-no-overlap@SGLANG_DDTREE_COMMIT_GRAPH=1@SGLANG_DDTREE_TREE_GRAPH=0"
    kwargs = round_trace.engine_kwargs(arm, SETTING, tp_size=2)
    assert kwargs["speculative_algorithm"] == "DDTREE"
    assert kwargs["speculative_ddtree_budget"] == 256
    assert kwargs["disable_overlap_schedule"] is True
    assert kwargs["tp_size"] == 2
    assert kwargs["context_length"] == 1024
    assert round_trace.arm_env(arm) == {"SGLANG_DDTREE_COMMIT_GRAPH": "1", "SGLANG_DDTREE_TREE_GRAPH": "0"}


def test_an_adaptive_arm_chooses_among_its_budgets(round_trace):
    kwargs = round_trace.engine_kwargs("ddtree-adaptive-8-32-256", SETTING)
    assert kwargs["speculative_ddtree_adaptive_budgets"] == "8,32,256"
    assert "speculative_ddtree_budget" not in kwargs and "disable_overlap_schedule" not in kwargs
    kwargs = round_trace.engine_kwargs("ddtree-adaptive-8-256-no-overlap", SETTING)
    assert kwargs["speculative_ddtree_adaptive_budgets"] == "8,256" and kwargs["disable_overlap_schedule"]


def test_a_plain_arm_has_no_draft_and_no_settings(round_trace):
    kwargs = round_trace.engine_kwargs("plain", SETTING)
    assert "speculative_algorithm" not in kwargs and kwargs["tp_size"] == 1
    assert round_trace.arm_env("plain") == {}


@pytest.mark.parametrize("arm", ["ddtree-b32@lower=1", "ddtree-b32@NOVALUE", "eagle", "dflash-overlap", "ddtree-adaptive-8"])
def test_a_bad_arm_is_refused_before_any_engine_starts(round_trace, arm):
    with pytest.raises(SystemExit, match="round_trace: "):
        round_trace.engine_kwargs(arm, SETTING)
