"""The payload's Triton tree kernels (overlay/.../ddtree_kernels.py) against the torch oracle.

No GPU here: the kernels run in Triton's CPU interpreter and their sm_86 / 90 / 120 builds are
checked by compiling them ahead of time in a subprocess. TRITON_INTERPRET=1 is set only while triton is
first imported, the kernels module loads and a kernel runs, so no other test (nor any
subprocess) sees it; triton itself does stay in interpreter mode in this process, and no other
test uses it.
"""

from __future__ import annotations

import heapq
import importlib.util
import textwrap

import pytest
from aot_build import run_aot_script
from payload_modules import (
    OVERLAY,
    load_payload_module,
    skip_unless_interpreted,
    triton_interpreter,
)
from tree_oracle import (
    DEGENERATE,
    budgets_for,
    check_best_tree,
    check_chain,
    degenerate_logits,
    draft_log_probs,
    row_nodes,
)

NEG_INF = float("-inf")


torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")

skip_unless_interpreted(triton)

du = load_payload_module("sglang.srt.speculative.ddtree_utils")
KERNELS_PATH = OVERLAY / "sglang/srt/speculative/ddtree_kernels.py"


@pytest.fixture(scope="module")
def dk():
    """The kernels module, decorated for the interpreter, under a private name."""
    spec = importlib.util.spec_from_file_location("ddtree_kernels_interpreted", KERNELS_PATH)
    module = importlib.util.module_from_spec(spec)
    with triton_interpreter():
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def interpret(dk):
    with triton_interpreter():
        yield dk


def random_topk(bs, depth_limit, vocab, budget, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, depth_limit, vocab, generator=g) * 2.0
    return du.compute_draft_topk(logits, min(budget, vocab))


def truncated_topk(bs, depth_limit, k, seed, max_finite=3):
    """Sorted log-probs with 1..max_finite finite ranks per position, -inf after."""
    g = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand(bs, depth_limit, k, generator=g).mul(4.0).sort(-1).values
    finite = torch.randint(1, max_finite + 1, (bs, depth_limit, 1), generator=g)
    log_probs = torch.where(torch.arange(k) < finite, log_probs, NEG_INF)
    token_ids = torch.stack([torch.randperm(1000, generator=g)[:k] for _ in range(bs * depth_limit)])
    return du.DDTreeDraftTopK(log_probs=log_probs, token_ids=token_ids.view(bs, depth_limit, k))


def tied_topk(bs, depth_limit, k, seed):
    """Log-probs from a few small integers: many prefixes with exactly the same fp32 score."""
    g = torch.Generator().manual_seed(seed)
    values = -torch.randint(0, 3, (bs, depth_limit, k), generator=g).float()
    log_probs = values.sort(-1, descending=True).values
    token_ids = torch.stack([torch.randperm(1000, generator=g)[:k] for _ in range(bs * depth_limit)])
    return du.DDTreeDraftTopK(log_probs=log_probs, token_ids=token_ids.view(bs, depth_limit, k))


def f32_add(a, b):
    return float(np.float32(a) + np.float32(b))


def tie_rule_heap(log_probs, token_ids, budget):
    """Best-first heap with the kernels' tie rule: (score desc, depth, parent node, rank)."""
    depth_limit, k = log_probs.shape
    lp = log_probs.tolist()
    heap = [(-lp[0][0], 1, 0, 0, 0.0)]  # (-score, depth, parent, rank, parent score)
    tokens, parents, depths, scores = [], [], [], []
    while heap and len(tokens) < budget and heap[0][0] != -NEG_INF:
        neg, depth, parent, rank, parent_score = heapq.heappop(heap)
        score = -neg
        tokens.append(int(token_ids[depth - 1, rank]))
        parents.append(parent)
        depths.append(depth)
        scores.append(score)
        if rank + 1 < k:
            sib = f32_add(parent_score, lp[depth - 1][rank + 1])
            heapq.heappush(heap, (-sib, depth, parent, rank + 1, parent_score))
        if depth < depth_limit:
            heapq.heappush(heap, (-f32_add(score, lp[depth][0]), depth + 1, len(tokens), 0, score))
    missing = budget - len(tokens)
    return tokens + [0] * missing, parents + [-1] * missing, depths + [0] * missing, scores + [NEG_INF] * missing


def assert_same_tree(got, want):
    reachable = want.parent_indices >= 0
    assert torch.equal(got.parent_indices, want.parent_indices)
    assert torch.equal(got.depths, want.depths)
    assert torch.equal(got.log_scores, want.log_scores)
    assert torch.equal(got.tokens[reachable], want.tokens[reachable])
    assert (got.tokens[~reachable] == 0).all()


def assert_valid_best_tree(tree, topk, reference):
    """Prefix-closed, parents before children, scores summed along the path, best-B scores."""
    bs, budget = tree.tokens.shape
    lp = topk.log_probs
    for b in range(bs):
        parents, depths = tree.parent_indices[b].tolist(), tree.depths[b].tolist()
        tokens, scores = tree.tokens[b].tolist(), tree.log_scores[b].tolist()
        seen = set()
        for i in range(budget):
            if parents[i] < 0:
                assert depths[i] == 0 and scores[i] == NEG_INF
                continue
            p = parents[i]
            assert 0 <= p <= i
            parent_depth = 0 if p == 0 else depths[p - 1]
            parent_score = 0.0 if p == 0 else scores[p - 1]
            assert depths[i] == parent_depth + 1
            rank = topk.token_ids[b, depths[i] - 1].tolist().index(tokens[i])
            assert scores[i] == f32_add(parent_score, float(lp[b, depths[i] - 1, rank]))
            prefix = (p, tokens[i])
            assert prefix not in seen
            seen.add(prefix)
        assert scores == reference.log_scores[b].tolist()  # the best-B score multiset, sorted


CASES = [
    # bs, L, V, B, N, seed
    pytest.param(2, 15, 272, 1, 16, 0, id="B1"),
    pytest.param(3, 15, 272, 4, 16, 1, id="B4-padding"),
    pytest.param(4, 15, 272, 32, 33, 2, id="B32"),
    pytest.param(2, 15, 272, 256, 257, 3, id="B256-K256"),
    pytest.param(2, 15, 151936, 64, 65, 4, id="V151936"),
    pytest.param(3, 15, 3, 64, 70, 5, id="B-beyond-K"),
    pytest.param(2, 2, 2, 10, 16, 6, id="unreachable-small-vocab"),
    pytest.param(64, 15, 272, 8, 16, 7, id="bs64"),
    pytest.param(2, 6, 16, 24, 25, 8, id="L6"),
]


def prefix_lens_for(bs, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 300, (bs,), generator=g)
    lens[0] = 0
    return lens


def exact_mask_len(prefix_lens, n):
    return int((n * (prefix_lens + n)).sum())


@pytest.mark.parametrize(("bs", "depth_limit", "vocab", "budget", "n", "seed"), CASES)
def test_tree_kernel_equals_build_ddtree_tree(interpret, bs, depth_limit, vocab, budget, n, seed):
    topk = random_topk(bs, depth_limit, vocab, budget, seed)
    assert_same_tree(interpret.build_tree(topk, budget), du.build_ddtree_tree(topk, budget))


@pytest.mark.parametrize("seed", range(4))
def test_tree_kernel_with_minus_inf_log_probs_marks_the_rest_unreachable(interpret, seed):
    topk = truncated_topk(3, 2 + seed % 2, 6, 100 + seed)
    budget = 40  # more than the 3 + 9 + 27 prefixes with finite scores
    got = interpret.build_tree(topk, budget)
    want = du.build_ddtree_tree(topk, budget)
    assert_same_tree(got, want)
    assert (got.parent_indices < 0).any()


@pytest.mark.parametrize(("depth_limit", "k", "budget", "seed"), [(4, 3, 12, 0), (15, 8, 64, 1), (3, 4, 80, 2)])
def test_tree_kernel_on_exact_ties_follows_its_tie_rule_and_stays_a_best_tree(
    interpret, depth_limit, k, budget, seed
):
    topk = tied_topk(3, depth_limit, k, 200 + seed)
    got = interpret.build_tree(topk, budget)
    assert_valid_best_tree(got, topk, du.build_ddtree_tree(topk, budget))
    for b in range(3):
        tokens, parents, depths, scores = tie_rule_heap(topk.log_probs[b], topk.token_ids[b], budget)
        assert got.tokens[b].tolist() == tokens
        assert got.parent_indices[b].tolist() == parents
        assert got.depths[b].tolist() == depths
        assert got.log_scores[b].tolist() == scores


@pytest.mark.parametrize("kind", sorted(DEGENERATE))
def test_tree_kernel_on_degenerate_rows_gives_the_best_reachable_prefixes_then_padding(interpret, kind):
    for seed in range(2):  # small: every pop is a Python step in the interpreter
        logits = degenerate_logits(kind, seed, bs=2, vocab=3)
        for budget in sorted({b for row in logits for b in budgets_for(draft_log_probs(row))}):
            tree = interpret.build_tree(du.compute_draft_topk(logits, budget), budget)
            for b in range(2):
                check_best_tree(row_nodes(tree, b), draft_log_probs(logits[b]), budget, padded=True)


def assert_verify_inputs_match(got, mask, tree, root_tokens, prefix_lens, n, max_depth, capacity):
    want = du.tree_to_verify_buffers(tree, root_tokens, prefix_lens, n, max_depth=max_depth)
    for field in ("draft_token", "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        got_t, want_t = getattr(got, field), getattr(want, field)
        assert got_t.dtype == torch.int64, field
        assert torch.equal(got_t, want_t), field
    assert mask.dtype == torch.bool and mask.shape == (capacity,)
    assert torch.equal(mask, du.build_tree_custom_mask(want.ancestor_mask, prefix_lens, capacity))


@pytest.mark.parametrize(("bs", "depth_limit", "vocab", "budget", "n", "seed"), CASES)
def test_verify_kernel_equals_the_torch_buffers_and_mask(interpret, bs, depth_limit, vocab, budget, n, seed):
    topk = random_topk(bs, depth_limit, vocab, budget, seed)
    tree = interpret.build_tree(topk, budget)
    root_tokens = torch.arange(bs) + 7
    prefix_lens = prefix_lens_for(bs, seed)
    capacity = exact_mask_len(prefix_lens, n) + 37 * seed
    got, mask = interpret.write_verify_inputs(tree, root_tokens, prefix_lens, n, depth_limit, capacity)
    assert_verify_inputs_match(got, mask, tree, root_tokens, prefix_lens, n, depth_limit, capacity)


@pytest.mark.parametrize("seed", range(3))
def test_verify_kernel_on_trees_with_unreachable_nodes_and_ties(interpret, seed):
    topk = truncated_topk(2, 4, 5, 300 + seed) if seed != 1 else tied_topk(2, 6, 4, 300)
    budget, n = 30, 34
    tree = interpret.build_tree(topk, budget)
    root_tokens = torch.tensor([11, 12], dtype=torch.int32)
    prefix_lens = torch.tensor([5, 260], dtype=torch.int32)
    capacity = exact_mask_len(prefix_lens.long(), n) + 1000
    got, mask = interpret.write_verify_inputs(tree, root_tokens, prefix_lens, n, 15, capacity)
    assert_verify_inputs_match(got, mask, tree, root_tokens.long(), prefix_lens.long(), n, 15, capacity)


def test_build_tree_then_write_verify_inputs_is_the_whole_torch_tree_stage(interpret):
    bs, depth_limit, budget, n = 3, 15, 20, 24
    topk = random_topk(bs, depth_limit, 272, budget, 9)
    root_tokens, prefix_lens = torch.tensor([1, 2, 3]), torch.tensor([17, 0, 64])
    capacity = exact_mask_len(prefix_lens, n)
    got, mask = interpret.write_verify_inputs(
        interpret.build_tree(topk, budget), root_tokens, prefix_lens, n, depth_limit, capacity
    )
    tree = du.build_ddtree_tree(topk, budget)
    assert_verify_inputs_match(got, mask, tree, root_tokens, prefix_lens, n, depth_limit, capacity)


@pytest.mark.parametrize("seed", range(2))
def test_verify_kernel_writes_the_tail_only_mask_as_the_torch_stage(interpret, seed):
    """SGLANG_DDTREE_VERIFY_ATTENTION=splitkv: the flat [bs, N, N] ancestor mask, whatever the
    prefixes and the capacity passed; the verify tensors unchanged."""
    bs, depth_limit, budget, n = 3, 6, 12, 17
    topk = truncated_topk(bs, depth_limit, 5, 400 + seed) if seed else random_topk(bs, depth_limit, 40, budget, 4)
    tree = interpret.build_tree(topk, budget)
    root_tokens, prefix_lens = torch.tensor([1, 2, 3]), torch.tensor([300, 0, 9])
    got, mask = interpret.write_verify_inputs(tree, root_tokens, prefix_lens, n, depth_limit, 10**6, tail_only=True)
    want, want_mask = du.write_verify_inputs(tree, root_tokens, prefix_lens, n, depth_limit, 10**6, tail_only=True)
    for field in ("draft_token", "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    assert mask.dtype == torch.bool and mask.shape == (bs * n * n,)
    assert torch.equal(mask, want_mask)


def test_budget_zero_is_a_root_only_verify(interpret):
    topk = random_topk(2, 15, 10, 1, 0)
    got, mask = interpret.write_verify_inputs(
        interpret.build_tree(topk, 0), torch.tensor([5, 6]), torch.tensor([3, 0]), 1, 15, 3 + 1 + 1 + 4
    )
    assert got.draft_token.tolist() == [[5], [6]]
    assert got.positions.tolist() == [[3], [0]]
    assert got.retrieve_next_token.tolist() == [[-1], [-1]]
    assert mask.all()


def test_num_verify_tokens_below_budget_plus_one_is_refused(interpret):
    topk = random_topk(1, 15, 10, 4, 0)
    with pytest.raises(ValueError, match="num_verify_tokens"):
        interpret.write_verify_inputs(interpret.build_tree(topk, 4), torch.tensor([0]), torch.tensor([0]), 4, 15, 100)


AOT_SCRIPT = textwrap.dedent(
    """
    import json
    from aot_build import CAPABILITIES, compile_for
    from payload_modules import load_payload_module
    load_payload_module("sglang.srt.speculative.ddtree_utils")
    dk = load_payload_module("sglang.srt.speculative.ddtree_kernels")
    tree_sig = {
        "log_probs_ptr": "*fp32", "token_ids_ptr": "*i64", "tokens_ptr": "*i64",
        "parents_ptr": "*i64", "depths_ptr": "*i64", "scores_ptr": "*fp32",
        "depth_limit": "i32", "topk_width": "i32", "budget": "i32", "BUDGET_BLOCK": "constexpr",
    }
    verify_sig = {
        "tree_tokens_ptr": "*i64", "tree_parents_ptr": "*i64", "tree_depths_ptr": "*i64",
        "root_tokens_ptr": "*i64", "prefix_lens_ptr": "*i64", "draft_token_ptr": "*i64",
        "positions_ptr": "*i64", "retrieve_index_ptr": "*i64", "next_token_ptr": "*i64",
        "next_sibling_ptr": "*i64", "mask_ptr": "*i1", "batch_size": "i32", "budget": "i32",
        "num_verify_tokens": "i32", "num_hops": "i32", "mask_capacity": "i64",
        "NODE_BLOCK": "constexpr", "ROW_BLOCK": "constexpr", "PREFIX_BLOCK": "constexpr",
        "BATCH_BLOCK": "constexpr", "TAIL_ONLY": "constexpr",
    }
    draft_block_sig = {
        "root_tokens_ptr": "*i64", "prefix_lens_ptr": "*i64", "req_pool_indices_ptr": "*i64",
        "req_to_token_ptr": "*i32", "req_to_token_stride": "i32", "block_ids_ptr": "*i64",
        "positions_ptr": "*i64", "cache_loc_ptr": "*i64", "mask_token_id": "i32",
        "block_size": "i32", "num_verify_tokens": "i32", "BLOCK": "constexpr",
    }
    accepted_sig = {
        "predict_ptr": "*i32", "accept_index_ptr": "*i32", "accept_lens_ptr": "*i32",
        "prefix_lens_ptr": "*i64", "cache_loc_ptr": "*i64", "node_index_ptr": "*i64",
        "tokens_ptr": "*i64", "bonus_ptr": "*i64", "new_seq_lens_ptr": "*i64",
        "kv_target_ptr": "*i64", "kv_source_ptr": "*i64", "width": "i32",
        "num_verify_tokens": "i32", "BLOCK": "constexpr",
    }
    lse_sig = {"logits_ptr": "*bf16", "out_ptr": "*fp32", "vocab": "i32", "row_stride": "i32",
               "BLOCK": "constexpr"}
    chain_sig = {name: kind for name, kind in tree_sig.items() if name not in ("budget", "BUDGET_BLOCK")}
    # Triton's launcher turns an int argument equal to 1 into a constant: build that too.
    ones = {"budget": 1, "topk_width": 1, "batch_size": 1, "num_hops": 1}

    def build(kernel, signature, constexprs, num_warps, specialise_ones=False):
        signature, constexprs = dict(signature), dict(constexprs)
        if specialise_ones:
            for name in set(ones) & set(signature):
                signature[name] = "constexpr"
                constexprs[name] = ones[name]
        return [kernel.fn.__name__, capability, *compile_for(kernel, signature, constexprs, capability, num_warps=num_warps)]

    built = []
    for capability in CAPABILITIES:
        for block, ones_too in ((1, True), (16, False), (256, False)):
            built.append(build(dk._best_first_tree_kernel, tree_sig, {"BUDGET_BLOCK": block}, 1, ones_too))
        for node_block, int32_inputs, tail_only in ((16, True, False), (512, False, False), (32, False, True)):
            rows = max(1, min(node_block, dk._VERIFY_TILE_ELEMS // node_block))
            consts = {"NODE_BLOCK": node_block, "ROW_BLOCK": rows,
                      "PREFIX_BLOCK": dk._PREFIX_BLOCK, "BATCH_BLOCK": dk._BATCH_BLOCK,
                      "TAIL_ONLY": tail_only}
            sig = dict(verify_sig)
            if int32_inputs:  # SGLang's verified_id and seq_lens may be int32
                sig.update(root_tokens_ptr="*i32", prefix_lens_ptr="*i32")
            built.append(build(dk._verify_inputs_kernel, sig, consts, 4, int32_inputs))
        for dtype in ("*bf16", "*fp32"):
            built.append(build(dk._row_logsumexp_kernel, dict(lse_sig, logits_ptr=dtype),
                               {"BLOCK": dk._LSE_BLOCK}, 8))
        built.append(build(dk._chain_kernel, chain_sig, {}, 1))
        built.append(build(dk._chain_kernel, chain_sig, {}, 1, specialise_ones=True))  # top-1 only
        built.append(build(dk._draft_block_kernel, draft_block_sig, {"BLOCK": 64}, 4))
        built.append(build(dk._accepted_kernel, accepted_sig, {"BLOCK": 16}, 4))
    print(json.dumps(built))
    """
)


@pytest.mark.slow
def test_kernels_compile_ahead_of_time_for_sm86_sm90_and_sm120():
    """The tree kernels for the RTX A6000, the H200 and the RTX PRO 6000: ptxas ships inside
    the triton wheel, so the cubins build without a GPU or a driver; none spills registers."""
    built = run_aot_script(AOT_SCRIPT, timeout=600)
    assert len(built) == 3 * 12 and all(size > 0 and stack == 0 for *_, size, stack in built), built


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_draft_block_is_root_then_masks_at_prefix_positions_with_the_verify_slots(interpret, dtype):
    block_size, n, mask_id = 16, 33, 258
    g = torch.Generator().manual_seed(4)
    req_to_token = torch.randint(0, 10_000, (6, 200), generator=g, dtype=torch.int32)
    roots = torch.tensor([7, 65, 9], dtype=dtype)
    prefix = torch.tensor([0, 120, 31], dtype=dtype)
    rows = torch.tensor([5, 0, 2], dtype=dtype)
    block_ids, positions, cache_loc = interpret.prepare_draft_block(
        roots, prefix, rows, req_to_token, mask_token_id=mask_id, block_size=block_size, num_verify_tokens=n
    )
    want_ids = torch.full((3, block_size), mask_id, dtype=torch.int64)
    want_ids[:, 0] = roots
    offsets = torch.arange(n)
    assert torch.equal(block_ids, want_ids)
    assert torch.equal(positions, prefix.long().view(3, 1) + offsets[:block_size])
    assert torch.equal(cache_loc, req_to_token[rows.long().view(3, 1), prefix.long().view(3, 1) + offsets].long())
    assert block_ids.is_contiguous() and positions.is_contiguous() and cache_loc.is_contiguous()


def test_draft_block_of_an_empty_batch(interpret):
    empty = torch.empty((0,), dtype=torch.int64)
    outs = interpret.prepare_draft_block(
        empty, empty, empty, torch.zeros((1, 8), dtype=torch.int32), mask_token_id=3, block_size=4, num_verify_tokens=5
    )
    assert [tuple(t.shape) for t in outs] == [(0, 4), (0, 4), (0, 5)]


def test_accepted_paths_are_the_round_bookkeeping_in_one_launch(interpret):
    # Two requests, N = 5 verify rows each, W = 4: request 0 accepts nodes 0, 2, 3 (bonus last),
    # request 1 only its root.
    predict = torch.tensor([10, 11, 12, 13, 14, 20, 21, 22, 23, 24], dtype=torch.int32)
    accept_index = torch.tensor([[0, 2, 3, -1], [5, -1, -1, -1]], dtype=torch.int32)
    accept_lens = torch.tensor([3, 1], dtype=torch.int32)
    prefix = torch.tensor([7, 40])
    cache_loc = torch.tensor([[100, 101, 102, 103, 104], [200, 201, 202, 203, 204]])
    got = interpret.accepted_paths(predict, accept_index, accept_lens, prefix, cache_loc)
    assert got.node_index.tolist() == [[0, 2, 3, 0], [5, 0, 0, 0]]
    assert got.tokens.tolist() == [[10, 12, 13, 0], [20, 0, 0, 0]]
    assert got.bonus.tolist() == [13, 20]
    assert got.new_seq_lens.tolist() == [10, 41] and got.new_seq_lens.dtype == prefix.dtype
    # depth r's node moves to slot r; past the path a slot moves onto itself
    assert got.kv_target.tolist() == [100, 101, 102, 103, 200, 201, 202, 203]
    assert got.kv_source.tolist() == [100, 102, 103, 103, 200, 201, 202, 203]


def test_accepted_paths_match_the_torch_bookkeeping_on_random_paths(interpret):
    g = torch.Generator().manual_seed(11)
    bs, n, width = 6, 33, 16
    predict = torch.randint(0, 259, (bs * n,), generator=g, dtype=torch.int32)
    accept_lens = torch.randint(1, width + 1, (bs,), generator=g, dtype=torch.int32)
    accept_index = torch.full((bs, width), -1, dtype=torch.int32)
    for b in range(bs):
        nodes = torch.randperm(n - 1, generator=g)[: int(accept_lens[b]) - 1].sort().values + 1
        accept_index[b, : int(accept_lens[b])] = b * n + torch.cat([torch.tensor([0]), nodes]).int()
    prefix = torch.randint(0, 1000, (bs,), generator=g, dtype=torch.int64)
    cache_loc = torch.randint(1, 10_000, (bs, n), generator=g, dtype=torch.int64)
    got = interpret.accepted_paths(predict, accept_index, accept_lens, prefix, cache_loc)
    safe = accept_index.long().clamp(min=0)
    on_path = torch.arange(width).view(1, -1) < accept_lens.view(-1, 1)
    assert torch.equal(got.node_index, torch.where(on_path, safe, 0))
    assert torch.equal(got.tokens, torch.where(on_path, predict.long()[safe], 0))
    assert torch.equal(got.bonus, predict.long()[safe].gather(1, (accept_lens.long() - 1).view(-1, 1)).view(-1))
    assert torch.equal(got.new_seq_lens, prefix + accept_lens)
    moves = {int(t): int(s) for t, s in zip(got.kv_target, got.kv_source, strict=True)}
    for b in range(bs):
        for r in range(int(accept_lens[b])):
            assert moves[int(cache_loc[b, r])] == int(cache_loc.view(-1)[safe[b, r]])


# --- the chain (build_chain) ------------------------------------------------------------------


def assert_same_chain(got, want):
    for field in ("tokens", "parent_indices", "depths", "log_scores"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field


@pytest.mark.parametrize("seed", range(3))
def test_chain_kernel_equals_build_chain_tree_bit_for_bit(interpret, seed):
    for topk in (random_topk(3, 15, 50, 8, seed), truncated_topk(3, 15, 4, seed), tied_topk(2, 6, 3, seed)):
        assert_same_chain(interpret.build_chain(topk), du.build_chain_tree(topk))


@pytest.mark.parametrize("kind", sorted(DEGENERATE))
def test_the_triton_stages_chain_is_the_drafters_top1_path(interpret, kind):
    logits = degenerate_logits(kind, 3, bs=3, depth_limit=4, vocab=5)
    chain = interpret.build_chain(interpret.draft_topk(logits, 1))
    for b in range(3):
        check_chain(row_nodes(chain, b), draft_log_probs(logits[b]))


def test_the_chains_verify_inputs_from_the_kernel_equal_the_torch_ones(interpret):
    topk = truncated_topk(3, 15, 2, 4)
    topk.log_probs[1, 6:] = NEG_INF  # request 1's chain ends after six nodes
    chain = interpret.build_chain(topk)
    roots, prefix_lens = torch.tensor([3, 4, 5]), prefix_lens_for(3, 4)
    capacity = exact_mask_len(prefix_lens, 16) + 9
    tensors, mask = interpret.write_verify_inputs(chain, roots, prefix_lens, 16, 15, capacity)
    assert_verify_inputs_match(tensors, mask, chain, roots, prefix_lens, 16, 15, capacity)
    assert tensors.retrieve_next_sibling.eq(-1).all()  # a path: no siblings for hybrid targets' walk
    assert tensors.retrieve_next_token[1].tolist() == [*range(1, 7), *[-1] * 10]


# --- the draft top-K (draft_topk) -------------------------------------------------------------


@pytest.fixture
def small_lse_blocks(interpret, monkeypatch):
    """Steps of 64 vocabulary entries, so a row takes several and a ragged last one."""
    monkeypatch.setattr(interpret, "_LSE_BLOCK", 64)
    return interpret


@pytest.mark.parametrize(("bs", "depth", "vocab", "k"), [(1, 1, 300, 1), (2, 3, 300, 8), (3, 2, 193, 32), (1, 2, 40, 40)])
def test_draft_topk_equals_compute_draft_topk(small_lse_blocks, bs, depth, vocab, k):
    g = torch.Generator().manual_seed(vocab + k)
    logits = torch.randn(bs, depth, vocab, generator=g) * 3.0  # fp32: no exact ties
    want = du.compute_draft_topk(logits, k)
    got = small_lse_blocks.draft_topk(logits, k)
    assert torch.equal(got.token_ids, want.token_ids)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=0, atol=1e-5)


def test_draft_topk_reads_bf16_logits_and_keeps_each_ids_own_value(small_lse_blocks):
    g = torch.Generator().manual_seed(7)
    logits = (torch.randn(2, 4, 400, generator=g) * 3.0).to(torch.bfloat16)  # bf16: ties likely
    want = du.compute_draft_topk(logits, 16)
    got = small_lse_blocks.draft_topk(logits, 16)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=0, atol=1e-5)
    log_z = torch.logsumexp(logits.float(), dim=-1, keepdim=True)
    picked = torch.gather(logits.float(), -1, got.token_ids) - log_z
    torch.testing.assert_close(got.log_probs, picked, rtol=0, atol=1e-5)


def test_draft_topk_normaliser_ignores_masked_out_entries(small_lse_blocks):
    logits = torch.full((1, 2, 150), NEG_INF)
    logits[0, 0, [5, 140]] = torch.tensor([1.0, 2.0])  # two finite entries, 64-entry steps apart
    logits[0, 1, 70] = -3.0
    got = small_lse_blocks.draft_topk(logits, 2)
    want = du.compute_draft_topk(logits, 2)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=0, atol=1e-6)
    assert got.token_ids[0, 0].tolist() == [140, 5] and got.token_ids[0, 1, 0].item() == 70


@pytest.mark.parametrize("kind", sorted(DEGENERATE))
def test_draft_topk_on_degenerate_rows_feeds_the_tree_kernel_a_best_tree(small_lse_blocks, kind):
    # vocab 150: rows span three logsumexp steps of 64, the last one ragged
    logits = torch.cat([degenerate_logits(kind, 7, bs=2, vocab=4), torch.full((2, 3, 146), NEG_INF)], dim=-1)
    want = du.compute_draft_topk(logits, 8)
    got = small_lse_blocks.draft_topk(logits, 8)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=0, atol=1e-6)
    assert ((got.token_ids >= 0) & (got.token_ids < 150)).all()
    tree = small_lse_blocks.build_tree(got, 8)
    for b in range(2):
        check_best_tree(row_nodes(tree, b), draft_log_probs(logits[b, :, :4]), 8, padded=True)


def test_draft_topk_refuses_logits_without_a_position_axis(interpret):
    with pytest.raises(ValueError, match=r"\[bs, L, V\]"):
        interpret.draft_topk(torch.zeros(2, 10), 4)
