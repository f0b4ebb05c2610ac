"""ddtree_cuda_graph_runner: which graph a batch replays, padding, capture order.

CUDA graphs need a GPU; here a fake graph re-runs the captured stage on replay, which is what a
graph does for a shape-static, sync-free stage. The stages are the real torch top-K + tree build,
and a prefix-valid writer in the shape of DFlash's draft-KV commit, on CPU.
"""

from __future__ import annotations

import contextlib
import types

import pytest

torch = pytest.importorskip("torch")

from payload_modules import load_payload_module  # noqa: E402

du = load_payload_module("sglang.srt.speculative.ddtree_utils")
db = load_payload_module("sglang.srt.speculative.ddtree_budget")
gr = load_payload_module("sglang.srt.speculative.ddtree_cuda_graph_runner")
from fake_graphs import FakeGraph, make_graphs  # noqa: E402

DEPTH, HIDDEN, VOCAB, BUDGET = 15, 8, 40, 12
TREE_FIELDS = ("tokens", "parent_indices", "depths", "log_scores")


def tree_stage(log):
    weight = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(0))

    def build(hidden):
        log.append(("build", hidden.shape[0]))
        return du.build_ddtree_tree(du.compute_draft_topk(hidden @ weight.T, BUDGET), BUDGET)

    return build


def refill_tree(out, fresh):
    for field in TREE_FIELDS:
        getattr(out, field).copy_(getattr(fresh, field))


def tree_graphs(batch_sizes, log):
    build = tree_stage(log)
    graphs, pools = make_graphs(
        build, batch_sizes, {"hidden": gr.StaticInput((DEPTH, HIDDEN), torch.float32)}, log, refill_tree
    )
    return graphs, build, pools


def hidden_states(bs: int, seed: int) -> torch.Tensor:
    return torch.randn(bs, DEPTH, HIDDEN, generator=torch.Generator().manual_seed(seed))


def test_sizes_are_captured_largest_first_in_the_first_graphs_pool() -> None:
    graphs, _, pools = tree_graphs([4, 1, 2, 2], [])
    assert graphs.batch_sizes == [1, 2, 4]
    assert list(graphs.graphs) == [4, 2, 1]
    assert pools == [None, graphs.graphs[4].pool(), graphs.graphs[4].pool()]


def test_each_size_is_warmed_up_eagerly_right_before_its_capture() -> None:
    events = []

    @contextlib.contextmanager
    def capture(graph, pool):
        events.append("capture-start")
        yield
        events.append("capture-end")

    def stage(x):
        events.append(("stage", x.shape[0]))
        return x + 1

    graphs = gr.DDTreeStageCudaGraphs(
        stage, batch_sizes=[1, 2], inputs={"x": gr.StaticInput((3,), torch.float32)},
        device=torch.device("cpu"), graph_factory=lambda: FakeGraph([]), capture=capture,
    )
    graphs.capture_all()
    assert events == [
        ("stage", 2), "capture-start", ("stage", 2), "capture-end",
        ("stage", 1), "capture-start", ("stage", 1), "capture-end",
    ]


@pytest.mark.parametrize("bs, graph_bs", [(1, 1), (2, 2), (3, 4), (4, 4)])
def test_a_batch_replays_the_smallest_graph_that_fits_and_equals_the_eager_stage(bs, graph_bs) -> None:
    log: list = []
    graphs, build, _ = tree_graphs([1, 2, 4], log)
    for seed in range(3):  # the static inputs and outputs are reused round after round
        hidden = hidden_states(bs, seed)
        want = build(hidden)
        log.clear()
        graphs.inputs_for(bs)["hidden"].copy_(hidden)
        got = graphs.replay(bs)
        assert log == ["replay", ("build", graph_bs)]
        assert graphs.graph_bs(bs) == graph_bs
        for field in TREE_FIELDS:
            assert torch.equal(getattr(got, field)[:bs], getattr(want, field)), field


def test_padded_requests_get_their_pad_value_so_a_prefix_valid_writer_writes_nothing() -> None:
    """The commit stage's shape: rows [bs, W, D], slots [bs, W], lengths [bs]; a request writes
    its first commit_lens rows into a KV pool."""
    width, dim = 4, 3
    pool = torch.zeros(64, dim)

    def commit(hidden, cache_loc, positions, commit_lens):
        valid = torch.arange(width).view(1, -1) < commit_lens.view(-1, 1)
        pool[cache_loc[valid]] = hidden[valid] + positions[valid].unsqueeze(-1)

    inputs = {
        "hidden": gr.StaticInput((width, dim), torch.float32),
        "cache_loc": gr.StaticInput((width,), torch.int64),
        "positions": gr.StaticInput((width,), torch.int64),
        "commit_lens": gr.StaticInput((), torch.int32, pad=0),
    }
    graphs, _ = make_graphs(commit, [4], inputs, [])
    # An earlier round of 4 requests leaves non-zero lengths and slots in every static row.
    first = graphs.inputs_for(4)
    first["cache_loc"].copy_(torch.arange(16).view(4, 4) + 40)
    first["commit_lens"].fill_(4)
    first["hidden"].fill_(1.0)
    graphs.replay(4)
    pool.zero_()
    # Now 3 requests: the fourth (padding) must write nothing.
    inputs_3 = graphs.inputs_for(3)
    inputs_3["hidden"].copy_(torch.full((3, width, dim), 2.0))
    inputs_3["cache_loc"].copy_(torch.arange(12).view(3, 4))
    inputs_3["positions"].copy_(torch.zeros(3, width, dtype=torch.int64))
    inputs_3["commit_lens"].copy_(torch.tensor([1, 4, 2], dtype=torch.int32))
    graphs.replay(3)
    written = pool.abs().sum(-1) > 0
    assert written.nonzero().view(-1).tolist() == [0, 4, 5, 6, 7, 8, 9]
    assert graphs.buffers["commit_lens"].tolist() == [1, 4, 2, 0]


def test_batches_beyond_the_largest_graph_run_eagerly() -> None:
    graphs, _, _ = tree_graphs([1, 2, 4], [])
    assert [graphs.can_run(bs) for bs in (0, 1, 4, 5)] == [False, True, True, False]


def test_no_batch_sizes_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one batch size"):
        gr.DDTreeStageCudaGraphs(lambda: None, batch_sizes=[0], inputs={}, device=torch.device("cpu"))


def test_capture_sizes_come_from_the_targets_decode_graphs_within_a_byte_budget() -> None:
    runner = types.SimpleNamespace(capture_bs=[1, 2, 4, 8, 16, 32])
    model_runner = types.SimpleNamespace(decode_cuda_graph_runner=runner)
    budget = gr.MAX_GRAPH_LOGITS_BYTES
    assert gr.capture_batch_sizes(model_runner, budget // 10, budget) == [1, 2, 4, 8]
    assert gr.capture_batch_sizes(model_runner, budget + 1, budget) is None
    assert gr.capture_batch_sizes(model_runner) == [1, 2, 4, 8, 16, 32]
    assert gr.capture_batch_sizes(types.SimpleNamespace(decode_cuda_graph_runner=None)) is None


def target_runner(capture_bs):
    """The target's model runner as VerifyWidths sees it: its backend and decode graphs."""
    graphs = types.SimpleNamespace(name="target-graphs", capture_bs=capture_bs) if capture_bs else None
    return types.SimpleNamespace(attn_backend="target-attn", decode_cuda_graph_runner=graphs)


def recording_build(calls):
    def build(num_verify_tokens, batch_sizes):
        calls.append((num_verify_tokens, batch_sizes))
        return f"attn-{num_verify_tokens}", f"graphs-{num_verify_tokens}"

    return build


def test_each_narrower_width_is_built_once_for_the_captured_sizes_its_shapes_serve() -> None:
    calls = []
    policy = db.BudgetPolicy.parse_schedule("1:256,4:64,8:32,16:8,32:15,48:chain")
    widths = gr.VerifyWidths(
        target_runner([1, 2, 4, 8, 16, 32, 48]), policy=policy, block_size=16,
        build=recording_build(calls),
    )
    # B = 8, B = 15 and the chain all verify 16 tokens (the draft block): one backend, one graph set
    assert sorted(calls) == [(16, [16, 32, 48]), (33, [8]), (65, [4])]
    same = [widths.by_shape[s] for s in (8, 15, db.CHAIN)]
    assert {w.attn_backend for w in same} == {"attn-16"}
    assert [w.shape for w in same] == [8, 15, db.CHAIN]
    assert widths.by_shape[256].graph_runner.name == "target-graphs"  # the target's own


@pytest.mark.parametrize(
    ("bs", "shape"),
    # a batch's shape is the schedule's at the graph size it pads to: 3 -> 4, 9 -> 16;
    # past the largest graph, at its own size
    [(1, 256), (2, 256), (3, 64), (4, 64), (5, 32), (8, 32), (9, 8), (16, 8), (33, 32), (64, "chain")],
)
def test_a_batch_takes_the_shape_of_the_graph_size_it_pads_to(bs, shape) -> None:
    policy = db.BudgetPolicy.parse_schedule("1:256,4:64,5:32,9:8,33:32,64:chain")
    widths = gr.VerifyWidths(
        target_runner([1, 2, 4, 8, 16, 32]), policy=policy, block_size=16,
        build=recording_build([]),
    )
    assert widths.shape_for(bs) == shape
    if shape == db.CHAIN:
        assert widths.drafts_for(bs) == db.DraftStage(tree_budget=0, chain=True)
    else:
        assert widths.drafts_for(bs) == db.DraftStage(tree_budget=shape, chain=False)


def test_a_verify_runs_on_its_widths_backend_and_graphs_and_the_target_gets_its_own_back() -> None:
    model_runner = target_runner([1, 2, 4, 8, 16])
    widths = gr.VerifyWidths(
        model_runner, policy=db.BudgetPolicy.parse_schedule("1:64,4:32,8:8,16:chain"),
        block_size=16, build=recording_build([]),
    )
    seen = []
    for bs in (1, 4, 8, 16):
        width = widths.width_for(bs)
        with widths.verifying(width):
            seen.append((width.shape, width.num_verify_tokens, model_runner.attn_backend))
            assert model_runner.decode_cuda_graph_runner == width.graph_runner
        assert model_runner.attn_backend == "target-attn"  # prefill and the rest see the target's
        assert model_runner.decode_cuda_graph_runner.name == "target-graphs"
    assert seen == [
        (64, 65, "target-attn"), (32, 33, "attn-33"), (8, 16, "attn-16"), ("chain", 16, "attn-16"),
    ]
    with pytest.raises(RuntimeError), widths.verifying(widths.width_for(4)):
        raise RuntimeError("verify failed")
    assert model_runner.attn_backend == "target-attn"


def test_a_fixed_budget_verifies_every_batch_at_the_targets_own_width() -> None:
    model_runner = target_runner([1, 2, 4])
    widths = gr.VerifyWidths(model_runner, policy=db.BudgetPolicy.fixed(32), block_size=16)
    for bs in (1, 3, 100):
        width = widths.width_for(bs)
        assert (width.shape, width.num_verify_tokens, width.attn_backend) == (32, 33, "target-attn")


def test_the_fixed_chain_verifies_the_block_on_the_targets_own_width() -> None:
    model_runner = target_runner([1, 2, 4])
    widths = gr.VerifyWidths(model_runner, policy=db.BudgetPolicy.fixed(db.CHAIN), block_size=16)
    width = widths.width_for(3)
    assert (width.shape, width.num_verify_tokens, width.attn_backend) == ("chain", 16, "target-attn")
    assert widths.drafts_for(3) == (0, True)


def test_without_decode_graphs_the_narrower_widths_get_no_batch_sizes() -> None:
    calls = []
    widths = gr.VerifyWidths(
        target_runner(None), policy=db.BudgetPolicy.parse_schedule("1:64,8:15"), block_size=16,
        build=recording_build(calls),
    )
    assert calls == [(16, [])]
    assert widths.shape_for(7) == 64 and widths.shape_for(8) == 15


def test_adaptive_budgets_get_every_captured_size_at_every_width_and_trees_at_the_widest() -> None:
    calls = []
    widths = gr.VerifyWidths(
        target_runner([1, 2, 4, 8]), policy=db.BudgetPolicy.parse_adaptive("chain,8,15,32,128"),
        block_size=16, build=recording_build(calls),
    )
    assert sorted(calls) == [(16, [1, 2, 4, 8]), (33, [1, 2, 4, 8])]
    shapes = (db.CHAIN, 8, 15, 32, 128)
    assert [widths.by_shape[s].num_verify_tokens for s in shapes] == [16, 16, 16, 33, 129]
    assert widths.by_shape[128].attn_backend == "target-attn"
    # the tree graphs build the widest tree and the chain at every batch size
    assert {widths.drafts_for(bs) for bs in (1, 3, 8, 20)} == {db.DraftStage(128, True)}
