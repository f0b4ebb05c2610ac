"""scripts/grammar_host_cost.py's own pieces (the timing needs sglang and xgrammar: it is a
benchmark, recorded in docs/BENCHMARKS.md): SGLang's tree links from parents, the vocabulary."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "grammar_host_cost.py"


def load():
    spec = importlib.util.spec_from_file_location("grammar_host_cost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_are_first_child_and_next_sibling_in_node_order() -> None:
    #        0
    #      / | \
    #     1  2  4
    #     |
    #     3
    first_child, next_sibling = load().tree_links([-1, 0, 0, 1, 0])
    assert first_child == [1, 3, -1, -1, -1]
    assert next_sibling == [-1, 2, 4, -1, -1]


def test_the_walked_tree_is_the_reference_builders_at_the_budget_and_all_its_tokens_allowed() -> None:
    module = load()
    vocab = module.vocabulary(3000)
    assert len(vocab) == len(set(vocab)) == 3000 and vocab[-1] == "</s>"
    digits = [i for i, piece in enumerate(vocab) if piece.isdigit()]
    tree = module.draft_tree(len(vocab), digits, 32, seed=0)
    assert tree.num_nodes == 33 and set(tree.tokens) <= set(digits)
    first_child, next_sibling = module.tree_links(tree.parents)
    reached, stack = [], [0]
    while stack:  # every node reachable from the root through the links, once
        node = stack.pop()
        reached.append(node)
        stack += [n for n in (next_sibling[node], first_child[node]) if n != -1]
    assert sorted(reached) == list(range(33))
