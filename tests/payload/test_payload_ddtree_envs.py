"""The payload's SGLANG_DDTREE_* switches (overlay/.../ddtree_envs.py): one declaration each, read
strictly, and every one in docs/serving.md's table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from payload_modules import load_payload_module

de = load_payload_module("sglang.srt.speculative.ddtree_envs")
envs = de.envs
SERVING = Path(__file__).resolve().parents[2] / "docs/serving.md"
OVERLAY_CODE = Path(__file__).resolve().parents[2] / "overlay"


def test_unset_switches_read_their_defaults(monkeypatch):
    for name in de.declared():
        monkeypatch.delenv(name, raising=False)
    assert envs.SGLANG_DDTREE_TREE_KERNEL.get() == "triton"
    assert envs.SGLANG_DDTREE_TREE_SHAPE.get() == "tree"
    assert envs.SGLANG_DDTREE_TREE_GRAPH.get() is True and envs.SGLANG_DDTREE_COMMIT_GRAPH.get() is True
    assert envs.SGLANG_DDTREE_PROFILE.get() == "" and envs.SGLANG_DDTREE_PROFILE_EVERY.get() == 1
    assert envs.SGLANG_DDTREE_SYNC_DEBUG.get() == ""
    assert envs.SGLANG_DDTREE_HYBRID_STATE.get() == "flat"
    assert envs.SGLANG_DDTREE_SERVE_FEWER_REQUESTS.get() is False
    assert envs.SGLANG_DDTREE_VERIFY_ATTENTION.get() == "auto"
    assert envs.SGLANG_DDTREE_DRAFT_ATTENTION.get() == "auto"


def test_set_switches_parse(monkeypatch):
    for name, value in (
        ("SGLANG_DDTREE_TREE_SHAPE", "chain"), ("SGLANG_DDTREE_TREE_GRAPH", "0"),
        ("SGLANG_DDTREE_PROFILE_EVERY", "8"), ("SGLANG_DDTREE_SYNC_DEBUG", "warn"),
    ):
        monkeypatch.setenv(name, value)
    assert envs.SGLANG_DDTREE_TREE_SHAPE.get() == "chain"
    assert envs.SGLANG_DDTREE_TREE_GRAPH.get() is False
    assert envs.SGLANG_DDTREE_PROFILE_EVERY.get() == 8
    assert envs.SGLANG_DDTREE_SYNC_DEBUG.get() == "warn"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SGLANG_DDTREE_TREE_SHAPE", "chains", "SGLANG_DDTREE_TREE_SHAPE must be 'tree' or 'chain', got 'chains'"),
        ("SGLANG_DDTREE_TREE_GRAPH", "off", "SGLANG_DDTREE_TREE_GRAPH must be 0 or 1"),
        ("SGLANG_DDTREE_COMMIT_GRAPH", "true", "SGLANG_DDTREE_COMMIT_GRAPH must be 0 or 1"),
        ("SGLANG_DDTREE_PROFILE_EVERY", "0", "SGLANG_DDTREE_PROFILE_EVERY must be a whole number >= 1"),
        ("SGLANG_DDTREE_TREE_KERNEL", "trition", "SGLANG_DDTREE_TREE_KERNEL must be 'triton' or 'torch'"),
    ],
)
def test_a_malformed_switch_raises_naming_it_instead_of_falling_back(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        de.declared()[name].get()


def test_every_switch_is_declared_once_and_read_only_through_the_declarations():
    declared = set(de.declared())
    assert all(name.startswith("SGLANG_DDTREE_") for name in declared)
    sources = {path.name: path.read_text() for path in OVERLAY_CODE.rglob("*.py")}
    named = {name for text in sources.values() for name in re.findall(r"SGLANG_DDTREE_[A-Z_]+", text)}
    assert named <= declared, named - declared
    readers = {name for name, text in sources.items() if re.search(r"os\.(environ|getenv)", text)}
    assert readers == {"ddtree_envs.py"}


def test_the_serving_docs_table_lists_every_switch_with_its_default():
    table = {
        m[1]: m[2] for m in re.finditer(r"^\| `(SGLANG_DDTREE_[A-Z_]+)` \| ([^|]*) \|", SERVING.read_text(), re.M)
    }
    assert set(table) == set(de.declared())
