"""scripts/grammar_host_cost.py's own pieces (the timing needs sglang and xgrammar: it is a
benchmark, recorded in docs/BENCHMARKS.md): SGLang's tree links from parents, the vocabulary,
the drafter's tree and the logits that lead the path mask down it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from payload_modules import load_payload_module  # noqa: E402

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


class AllowAll:
    """A grammar that allows every token."""

    def __init__(self):
        self.accepted = 0

    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return torch.zeros(batch_size, (vocab_size + 31) // 32, dtype=torch.int32)

    def fill_vocab_mask(self, mask, row):
        mask[row] = -1

    def is_terminated(self):
        return False

    def accept_token(self, token):
        self.accepted += 1

    def rollback(self, count):
        self.accepted -= count


@pytest.mark.parametrize("accepted", [0, 3, 7, 15, 20])
def test_the_path_logits_lead_the_path_mask_down_the_confident_chain(accepted: int) -> None:
    module = load()
    vocab = module.vocabulary(3000)
    digits = [i for i, piece in enumerate(vocab) if piece.isdigit()]
    tree = module.draft_tree(len(vocab), digits, 32, seed=1)
    first_child = module.tree_links(tree.parents)[0]
    chain = [0]
    while first_child[chain[-1]] != -1:
        chain.append(first_child[chain[-1]])
    assert len(chain) == module.DEPTHS + 1  # the confident token of every depth
    logits = module.path_logits(tree, digits, len(vocab), accepted)
    grammar = AllowAll()
    request = type("Req", (), {"grammar": grammar})()
    path = load_payload_module("sglang.srt.speculative.ddtree_grammar_path")
    rows = path.PathRows.allocate([request], len(vocab))
    mask = path.path_grammar_mask([request], module._Tree(tree), module._VerifyLogits(logits, path.TOP_K), rows, None)
    assert mask.rows.tolist() == chain[: min(accepted, module.DEPTHS) + 1] and grammar.accepted == 0
    assert (mask.vocab_mask == -1).all()
