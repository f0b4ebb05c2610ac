"""The payload's tree math (overlay/.../ddtree_utils.py) on CPU.

The module is a whole new file we ship into sglang; it imports only torch, so
it is loaded here straight from the overlay tree, without sglang.
"""

from __future__ import annotations

import heapq
import math
import sys
import types

import pytest

torch = pytest.importorskip("torch")
from payload_modules import load_payload_module  # noqa: E402
from tree_oracle import (  # noqa: E402
    DEGENERATE,
    ancestors_or_self,
    budgets_for,
    check_best_tree,
    check_chain,
    degenerate_logits,
    draft_log_probs,
    linked_children,
    row_nodes,
)

du = load_payload_module("sglang.srt.speculative.ddtree_utils")
db = load_payload_module("sglang.srt.speculative.ddtree_budget")
ts = load_payload_module("sglang.srt.speculative.ddtree_tree_stage")


def heap_reference_tree(log_probs, token_ids, budget):
    """liranringel/ddtree build_ddtree_tree, transcribed: pops in heap order."""
    depth_limit, k = log_probs.shape
    heap = [(-float(log_probs[0, 0]), (0,), 0, 1, 0, float(log_probs[0, 0]))]
    tokens, parents, depths = [], [], []
    while heap and len(tokens) < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        tokens.append(int(token_ids[depth - 1, rank]))
        parents.append(parent)
        depths.append(depth)
        node = len(tokens)
        if rank + 1 < k:
            sib = logw - float(log_probs[depth - 1, rank]) + float(log_probs[depth - 1, rank + 1])
            heapq.heappush(heap, (-sib, (*ranks[:-1], rank + 1), parent, depth, rank + 1, sib))
        if depth < depth_limit:
            child = logw + float(log_probs[depth, 0])
            heapq.heappush(heap, (-child, (*ranks, 0), node, depth + 1, 0, child))
    return tokens, parents, depths


def random_topk(bs, depth_limit, vocab, budget, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, depth_limit, vocab, generator=g) * 2.0
    return logits, du.compute_draft_topk(logits, min(budget, vocab))


@pytest.mark.parametrize("seed", range(40))
def test_tree_is_exactly_the_top_b_prefixes(seed):
    vocab, depth_limit = 4, 3
    budget = 1 + seed % 20
    logits, topk = random_topk(2, depth_limit, vocab, budget, seed)
    tree = du.build_ddtree_tree(topk, budget)
    for b in range(2):
        check_best_tree(row_nodes(tree, b), draft_log_probs(logits[b]), budget, padded=True)


@pytest.mark.parametrize("kind", sorted(DEGENERATE))
@pytest.mark.parametrize("seed", range(6))
def test_degenerate_rows_give_the_best_reachable_prefixes_then_padding(kind, seed):
    logits = degenerate_logits(kind, seed, bs=3)
    for budget in sorted({b for row in logits for b in budgets_for(draft_log_probs(row))}):
        tree = du.build_ddtree_tree(du.compute_draft_topk(logits, budget), budget)
        for b in range(3):
            check_best_tree(row_nodes(tree, b), draft_log_probs(logits[b]), budget, padded=True)


def test_a_row_of_only_minus_inf_logits_has_minus_inf_log_probs():
    logits = torch.randn(2, 3, 10)
    logits[1, 2] = float("-inf")
    topk = du.compute_draft_topk(logits, 4)
    assert torch.isfinite(topk.log_probs[0]).all() and torch.isfinite(topk.log_probs[1, :2]).all()
    assert (topk.log_probs[1, 2] == float("-inf")).all()


@pytest.mark.parametrize("seed", range(20))
def test_tree_matches_heap_reference_in_pop_order(seed):
    vocab, depth_limit, budget = 50, 15, 8 + 7 * seed
    _, topk = random_topk(1, depth_limit, vocab, budget, 1000 + seed)
    tree = du.build_ddtree_tree(topk, budget)
    tokens, parents, depths = heap_reference_tree(
        topk.log_probs[0], topk.token_ids[0], budget
    )
    assert tree.tokens[0].tolist() == tokens
    assert tree.parent_indices[0].tolist() == parents
    assert tree.depths[0].tolist() == depths


def test_parents_precede_children_and_depths_follow_parents():
    _, topk = random_topk(4, 15, 300, 64, 7)
    tree = du.build_ddtree_tree(topk, 64)
    for b in range(4):
        parents = tree.parent_indices[b].tolist()
        depths = tree.depths[b].tolist()
        for i, (par, dep) in enumerate(zip(parents, depths, strict=True), start=1):
            assert 0 <= par < i
            assert dep == (1 if par == 0 else depths[par - 1] + 1)


def test_budget_zero_gives_an_empty_tree_and_a_root_only_verify():
    _, topk = random_topk(3, 15, 10, 1, 0)
    tree = du.build_ddtree_tree(topk, 0)
    assert tree.tokens.shape == (3, 0)
    buf = du.tree_to_verify_buffers(
        tree, torch.tensor([5, 6, 7]), torch.tensor([10, 0, 3]), 1, max_depth=15
    )
    assert buf.draft_token.tolist() == [[5], [6], [7]]
    assert buf.positions.tolist() == [[10], [0], [3]]
    assert buf.retrieve_next_token.tolist() == [[-1]] * 3
    assert buf.ancestor_mask.all()


def test_budget_one_is_the_top1_token_at_depth_one():
    logits, topk = random_topk(2, 15, 30, 1, 3)
    tree = du.build_ddtree_tree(topk, 1)
    assert tree.tokens[:, 0].tolist() == logits[:, 0].argmax(-1).tolist()
    assert tree.parent_indices.tolist() == [[0], [0]]
    assert tree.depths.tolist() == [[1], [1]]


def test_budget_beyond_reachable_prefixes_marks_the_rest_unreachable():
    # vocab 2, depth 2: 2 + 4 = 6 prefixes exist; ask for 10.
    _, topk = random_topk(1, 2, 2, 10, 5)
    tree = du.build_ddtree_tree(topk, 10)
    reachable = tree.parent_indices[0] >= 0
    assert int(reachable.sum()) == 6
    assert (tree.depths[0][~reachable] == 0).all()
    buf = du.tree_to_verify_buffers(
        tree, torch.tensor([1]), torch.tensor([4]), 11, max_depth=2
    )
    for node in range(7, 11):  # unreachable: sees only itself, no links
        assert buf.ancestor_mask[0, node].nonzero().flatten().tolist() == [node]
        assert buf.retrieve_next_sibling[0, node] == -1


def test_verify_buffers_encode_the_same_tree():
    _, topk = random_topk(3, 15, 100, 40, 11)
    tree = du.build_ddtree_tree(topk, 40)
    prefix = torch.tensor([7, 100, 0])
    buf = du.tree_to_verify_buffers(tree, torch.tensor([1, 2, 3]), prefix, 48, max_depth=15)
    n = 48
    for b in range(3):
        parents = [0] + tree.parent_indices[b].tolist() + [-1] * 7
        depths = [0] + tree.depths[b].tolist() + [0] * 7
        assert buf.positions[b].tolist() == [int(prefix[b]) + d for d in depths]
        assert buf.retrieve_index[b].tolist() == list(range(b * n, (b + 1) * n))
        for i in range(n):
            expect = ancestors_or_self([-1, *parents[1:]], i)
            assert set(buf.ancestor_mask[b, i].nonzero().flatten().tolist()) == expect
        # Left-child / right-sibling links enumerate each node's children in index order.
        first_child, next_sibling = buf.retrieve_next_token[b].tolist(), buf.retrieve_next_sibling[b].tolist()
        for i in range(n):
            kids = [c for c in range(1, n) if parents[c] == i]
            assert linked_children(first_child, next_sibling, i) == kids


def test_custom_mask_blocks_follow_sglang_full_layout():
    _, topk = random_topk(2, 15, 20, 6, 2)
    tree = du.build_ddtree_tree(topk, 6)
    buf = du.tree_to_verify_buffers(tree, torch.tensor([1, 2]), torch.tensor([3, 5]), 16, max_depth=15)
    seq_lens = torch.tensor([3, 5])
    exact = 16 * (3 + 16) + 16 * (5 + 16)
    mask = du.build_tree_custom_mask(buf.ancestor_mask, seq_lens, exact + 37)
    assert mask.shape == (exact + 37,)
    offset = 0
    for b, seq_len in enumerate([3, 5]):
        block = mask[offset : offset + 16 * (seq_len + 16)].view(16, seq_len + 16)
        assert block[:, :seq_len].all()
        assert torch.equal(block[:, seq_len:], buf.ancestor_mask[b])
        offset += block.numel()


@pytest.mark.parametrize("seed", range(30))
def test_sglang_greedy_walk_over_links_equals_the_reference_walk(seed):
    """What verify_tree_greedy does over retrieve_next_* equals the paper's walk."""
    g = torch.Generator().manual_seed(seed)
    vocab = 6
    _, topk = random_topk(1, 6, vocab, 12, seed)
    tree = du.build_ddtree_tree(topk, 12)
    buf = du.tree_to_verify_buffers(tree, torch.tensor([0]), torch.tensor([0]), 16, max_depth=6)
    target = torch.randint(0, vocab, (16,), generator=g).tolist()
    draft = buf.draft_token[0].tolist()
    # LCRS walk, as the kernel does it: at most one hop per node.
    first_child, next_sibling = buf.retrieve_next_token[0].tolist(), buf.retrieve_next_sibling[0].tolist()
    path = [0]
    for _ in range(len(draft)):
        match = [c for c in linked_children(first_child, next_sibling, path[-1]) if draft[c] == target[path[-1]]]
        if not match:
            break
        path.append(match[0])
    parents = [0] + tree.parent_indices[0].tolist() + [-1] * 3
    ref_path, bonus = du.follow_verified_tree_cpu(draft, parents, target)
    assert path == ref_path
    assert bonus == target[path[-1]]


def test_topk_uses_the_full_vocabulary_normaliser():
    logits = torch.randn(1, 2, 1000)
    topk = du.compute_draft_topk(logits, 5)
    expect = torch.log_softmax(logits.float(), -1).topk(5, -1)
    assert torch.allclose(topk.log_probs, expect.values, atol=1e-6)
    assert torch.equal(topk.token_ids, expect.indices)
    assert math.isclose(float(topk.log_probs.exp().sum()), float(expect.values.exp().sum()), rel_tol=1e-6)


def test_write_verify_inputs_is_buffers_then_mask():
    logits = torch.randn(2, 15, 40, generator=torch.Generator().manual_seed(3))
    tree = du.build_ddtree_tree(du.compute_draft_topk(logits, 8), 8)
    roots, prefix = torch.tensor([5, 9]), torch.tensor([3, 7])
    tensors, mask = du.write_verify_inputs(tree, roots, prefix, 16, 15, 16 * (10 + 2 * 16) + 5)
    buffers = du.tree_to_verify_buffers(
        tree, root_tokens=roots, prefix_lens=prefix, num_verify_tokens=16, max_depth=15
    )
    for field in ("draft_token", "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        assert torch.equal(getattr(tensors, field), getattr(buffers, field)), field
    assert torch.equal(mask, du.build_tree_custom_mask(buffers.ancestor_mask, prefix, mask.numel()))


def test_the_tail_only_mask_is_each_nodes_ancestors_or_self_with_no_prefix_columns():
    """Checked against the parents by walking them, not against ancestor_mask."""
    logits = torch.randn(2, 15, 40, generator=torch.Generator().manual_seed(4))
    tree = du.build_ddtree_tree(du.compute_draft_topk(logits, 8), 8)
    _, mask = du.write_verify_inputs(tree, torch.tensor([5, 9]), torch.tensor([3, 700]), 12, 15, 0, tail_only=True)
    assert mask.dtype == torch.bool and mask.shape == (2 * 12 * 12,)
    for b in range(2):
        parents = [-1] + tree.parent_indices[b].tolist() + [-1] * 3
        for node in range(12):
            seen, hop = set(), node
            while hop >= 0 and hop not in seen:
                seen.add(hop)
                hop = parents[hop]
            row = mask.view(2, 12, 12)[b, node]
            assert set(torch.nonzero(row).flatten().tolist()) == seen, (b, node)


def test_tree_stage_is_triton_by_default_torch_on_request_and_a_typo_is_refused(monkeypatch):
    kernels = types.ModuleType("sglang.srt.speculative.ddtree_kernels")  # no triton needed here
    parts = ("draft_topk", "build_tree", "build_chain", "write_verify_inputs")
    for name in parts:
        setattr(kernels, name, object())
    monkeypatch.setitem(sys.modules, kernels.__name__, kernels)
    package = sys.modules.get("sglang.srt.speculative") or types.ModuleType("sglang.srt.speculative")
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setattr(package, "ddtree_kernels", kernels, raising=False)
    monkeypatch.delenv("SGLANG_DDTREE_TREE_KERNEL", raising=False)
    assert ts.select_tree_stage() == ("triton", *(getattr(kernels, name) for name in parts))
    monkeypatch.setenv("SGLANG_DDTREE_TREE_KERNEL", "torch")
    assert ts.select_tree_stage() == (
        "torch", du.compute_draft_topk, du.build_ddtree_tree, du.build_chain_tree,
        du.write_verify_inputs,
    )
    monkeypatch.setenv("SGLANG_DDTREE_TREE_KERNEL", "trition")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_TREE_KERNEL must be"):
        ts.select_tree_stage()


@pytest.mark.parametrize("seed", range(10))
def test_a_narrower_budgets_tree_is_the_first_nodes_of_the_widest(seed):
    # What adaptive budgets rely on: one tree at the widest budget serves every narrower one.
    widest = 128
    logits, topk = random_topk(3, 15, 300, widest, 2000 + seed)
    tree = du.build_ddtree_tree(topk, widest)
    for budget in (8, 15, 32, 64):
        narrow = du.build_ddtree_tree(du.compute_draft_topk(logits, budget), budget)
        for field in ("tokens", "parent_indices", "depths", "log_scores"):
            assert torch.equal(getattr(tree, field)[:, :budget], getattr(narrow, field)), field


def chain_logits(kind: str, seed: int) -> torch.Tensor:
    """[3, 4, 5] drafter logits: random, or of one degenerate kind."""
    if kind == "random":
        return torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(seed)) * 2.0
    return degenerate_logits(kind, seed, bs=3, depth_limit=4, vocab=5)


@pytest.mark.parametrize("kind", ["random", *sorted(DEGENERATE)])
@pytest.mark.parametrize("seed", range(4))
def test_the_chain_is_the_drafters_top1_path_through_the_block(kind, seed):
    logits = chain_logits(kind, seed)
    for k in (1, 3):  # the top-1 alone, or the top-K a wider tree reads as well
        chain = du.build_chain_tree(du.compute_draft_topk(logits, k))
        for b in range(3):
            check_chain(row_nodes(chain, b), draft_log_probs(logits[b]))


def prefix_scores(tree, b: int) -> dict:
    """Request b's nodes of a fixed-shape tree: prefix (tokens from the root) -> fp32 score."""
    tokens, parents = tree.tokens[b].tolist(), tree.parent_indices[b].tolist()
    prefixes, scores = [()], {}
    for node, (token, parent) in enumerate(zip(tokens, parents, strict=True), start=1):
        prefixes.append((*prefixes[parent], token) if parent >= 0 else None)
        if parent >= 0:
            scores[prefixes[node]] = float(tree.log_scores[b, node - 1])
    return scores


@pytest.mark.parametrize("seed", range(6))
def test_the_chain_scores_its_prefixes_bit_for_bit_as_the_best_first_tree(seed):
    logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed)) * 3.0
    topk = du.compute_draft_topk(logits, 4)
    every_prefix = du.build_ddtree_tree(topk, 4 + 16 + 64)
    chain = du.build_chain_tree(topk)
    for b in range(2):
        tree_scores, chain_scores = prefix_scores(every_prefix, b), prefix_scores(chain, b)
        assert len(chain_scores) == 3
        assert all(tree_scores[prefix] == score for prefix, score in chain_scores.items())


def test_the_best_first_tree_cut_to_the_chains_size_is_not_the_chain():
    # Position 1: two tokens of near-equal mass; position 2: a sure token. The best three
    # prefixes are (0), (0, 0), (1): a branch at the root, where the chain goes three deep.
    log_probs = torch.log(torch.tensor([[[0.5, 0.45, 0.05], [1.0, 0.0, 0.0], [0.5, 0.3, 0.2]]]))
    topk = du.DDTreeDraftTopK(*torch.sort(log_probs, dim=-1, descending=True))
    tree, chain = du.build_ddtree_tree(topk, 3), du.build_chain_tree(topk)
    assert tree.parent_indices.tolist() == [[0, 1, 0]] and tree.depths.tolist() == [[1, 2, 1]]
    assert chain.parent_indices.tolist() == [[0, 1, 2]] and chain.tokens.tolist() == [[0, 0, 0]]


def test_the_chains_verify_inputs_link_one_path_and_stop_where_the_draft_has_no_mass():
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(1))
    logits[1, 2] = float("-inf")  # request 1's chain ends after two nodes
    chain = du.build_chain_tree(du.compute_draft_topk(logits, 1))
    prefix = torch.tensor([4, 9])
    n = 6  # the chain's verify width: the block
    buf = du.tree_to_verify_buffers(chain, torch.tensor([1, 2]), prefix, n, max_depth=5)
    for b, real in ((0, 5), (1, 2)):
        first_child, next_sibling = buf.retrieve_next_token[b].tolist(), buf.retrieve_next_sibling[b].tolist()
        assert first_child == [*range(1, real + 1), -1, *[-1] * (n - 1 - real)]
        assert next_sibling == [-1] * n  # one path: no node has a sibling
        depths = [*range(real + 1), *[0] * (n - 1 - real)]
        assert buf.positions[b].tolist() == [int(prefix[b]) + d for d in depths]
        for i in range(n):
            visible = set(buf.ancestor_mask[b, i].nonzero().flatten().tolist())
            assert visible == (set(range(i + 1)) if i <= real else {i})


def test_a_tree_stage_builds_what_its_draft_stage_asks_and_a_shape_picks_its_tree():
    logits = torch.randn(3, 6, 30, generator=torch.Generator().manual_seed(5))
    topk = du.compute_draft_topk(logits, 8)
    stage = ts.select_tree_stage("torch")
    both = stage.build_drafts(topk, db.DraftStage(tree_budget=8, chain=True))
    assert_same(both.tree, du.build_ddtree_tree(topk, 8))
    assert_same(both.chain, du.build_chain_tree(topk))
    assert both.verified(db.CHAIN) is both.chain
    assert_same(both.verified(5), du.build_ddtree_tree(topk, 5))
    assert stage.build_drafts(topk, db.DraftStage(0, True)).tree is None
    assert stage.build_drafts(topk, db.DraftStage(8, False)).chain is None
    rows = both.first_rows(2)
    assert_same(rows.chain, du.build_chain_tree(du.compute_draft_topk(logits[:2], 8)))
    assert rows.tree.tokens.shape == (2, 8)


def assert_same(got, want):
    for field in ("tokens", "parent_indices", "depths", "log_scores"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_the_reference_walk_refuses_a_parent_after_its_child():
    # nodes 1 and 2 each other's parent: a walk over them would never end
    with pytest.raises(ValueError, match="node 1 has parent 2; parents must come first"):
        du.follow_verified_tree_cpu([0, 5, 6], [0, 2, 1], [5, 6, 5])


class _RecordsProducts(torch.overrides.TorchFunctionMode):
    """Every matrix product called inside, as (name, operand dims)."""

    def __init__(self):
        super().__init__()
        self.products = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in {"mm", "matmul", "bmm", "__matmul__"}:
            self.products.append((name, tuple(a.dim() for a in args[:2])))
        return func(*args, **(kwargs or {}))


def test_draft_logits_of_the_block_s_strided_draft_slots_are_one_2d_product():
    # The worker passes draft slots 1..L of the block, a slice no 2-D view reaches: matmul
    # would run one product per request, each reading the whole lm_head.
    g = torch.Generator().manual_seed(3)
    block = torch.randn(4, 16, 24, generator=g)
    weight = torch.randn(50, 24, generator=g)
    slots = block[:, 1:, :]
    assert not slots.is_contiguous()
    with _RecordsProducts() as recorded:
        logits = du.draft_logits(slots, weight)
    assert recorded.products == [("mm", (2, 2))]
    assert logits.shape == (4, 15, 50)
    expected = torch.stack([slots[r] @ weight.T for r in range(4)])
    torch.testing.assert_close(logits, expected)
