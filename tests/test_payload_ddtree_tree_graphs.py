"""ddtree_tree_cuda_graph_runner: which graph a batch replays, padding, capture order.

CUDA graphs need a GPU; here a fake graph re-runs the captured callable on replay, which is
what a graph does for a shape-static, sync-free stage. The stage itself is the real torch
top-K + tree build on CPU.
"""

from __future__ import annotations

import contextlib
import types

import pytest

torch = pytest.importorskip("torch")

from payload_modules import load_payload_module  # noqa: E402

du = load_payload_module("sglang.srt.speculative.ddtree_utils")
gr = load_payload_module("sglang.srt.speculative.ddtree_tree_cuda_graph_runner")

DEPTH, HIDDEN, VOCAB, BUDGET = 15, 8, 40, 12


class FakeGraph:
    """Replays the stage captured into it: the outputs are refilled in place."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.rerun = None

    def replay(self) -> None:
        self.log.append("replay")
        self.rerun()

    def pool(self) -> str:
        return f"pool-of-{id(self)}"


def make_runner(batch_sizes, log):
    weight = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(0))

    def build(hidden):
        log.append(("build", hidden.shape[0]))
        return du.build_ddtree_tree(du.compute_draft_topk(hidden @ weight.T, BUDGET), BUDGET)

    pools = []

    @contextlib.contextmanager
    def capture(graph, pool):
        pools.append(pool)
        log.append("capture")
        yield

    runner = gr.DDTreeTreeCudaGraphRunner(
        build,
        batch_sizes=batch_sizes,
        depth=DEPTH,
        hidden_size=HIDDEN,
        dtype=torch.float32,
        device=torch.device("cpu"),
        graph_factory=lambda: FakeGraph(log),
        capture=capture,
    )
    runner.capture_all()
    for bs, graph in runner.graphs.items():
        out = runner.outputs[bs]

        def rerun(bs=bs, out=out):
            fresh = build(runner.hidden[:bs])
            for field in ("tokens", "parent_indices", "depths", "log_scores"):
                getattr(out, field).copy_(getattr(fresh, field))

        graph.rerun = rerun
    log.clear()
    return runner, build, pools


def hidden_states(bs: int, seed: int) -> torch.Tensor:
    return torch.randn(bs, DEPTH, HIDDEN, generator=torch.Generator().manual_seed(seed))


def assert_same_tree(got, want) -> None:
    for field in ("tokens", "parent_indices", "depths", "log_scores"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_sizes_are_captured_largest_first_in_the_first_graphs_pool() -> None:
    runner, _, pools = make_runner([4, 1, 2, 2], [])
    assert runner.batch_sizes == [1, 2, 4]
    assert list(runner.graphs) == [4, 2, 1]
    first = runner.graphs[4]
    assert pools == [None, first.pool(), first.pool()]


def test_capture_order_is_warm_up_before_each_capture() -> None:
    log: list = []
    weight = torch.zeros(VOCAB, HIDDEN)
    events = []

    @contextlib.contextmanager
    def capture(graph, pool):
        events.append("capture-start")
        yield
        events.append("capture-end")

    def build(hidden):
        events.append(("build", hidden.shape[0]))
        return du.build_ddtree_tree(du.compute_draft_topk(hidden @ weight.T, BUDGET), BUDGET)

    runner = gr.DDTreeTreeCudaGraphRunner(
        build, batch_sizes=[1, 2], depth=DEPTH, hidden_size=HIDDEN, dtype=torch.float32,
        device=torch.device("cpu"), graph_factory=lambda: FakeGraph(log), capture=capture,
    )
    runner.capture_all()
    assert events == [
        ("build", 2), "capture-start", ("build", 2), "capture-end",
        ("build", 1), "capture-start", ("build", 1), "capture-end",
    ]


@pytest.mark.parametrize("bs, graph_bs", [(1, 1), (2, 2), (3, 4), (4, 4)])
def test_a_batch_replays_the_smallest_graph_that_fits_and_equals_the_eager_stage(bs, graph_bs) -> None:
    log: list = []
    runner, build, _ = make_runner([1, 2, 4], log)
    for seed in range(3):  # static buffers are overwritten round after round
        hidden = hidden_states(bs, seed)
        want = build(hidden)
        log.clear()
        got = runner.replay(hidden)
        assert log == ["replay", ("build", graph_bs)]
        assert got.tokens.shape == (bs, BUDGET)
        assert_same_tree(got, want)


def test_a_strided_view_of_the_draft_block_is_copied_in() -> None:
    runner, build, _ = make_runner([2], [])
    block = torch.randn(2, DEPTH + 1, HIDDEN, generator=torch.Generator().manual_seed(5))
    assert_same_tree(runner.replay(block[:, 1:, :]), build(block[:, 1:, :]))


def test_batches_beyond_the_largest_graph_run_eagerly() -> None:
    runner, _, _ = make_runner([1, 2, 4], [])
    assert [runner.can_run(bs) for bs in (0, 1, 4, 5)] == [False, True, True, False]


def test_no_batch_sizes_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one batch size"):
        gr.DDTreeTreeCudaGraphRunner(
            lambda h: None, batch_sizes=[0], depth=DEPTH, hidden_size=HIDDEN,
            dtype=torch.float32, device=torch.device("cpu"),
        )


def test_capture_sizes_come_from_the_targets_decode_graphs_within_the_logits_cap() -> None:
    runner = types.SimpleNamespace(capture_bs=[1, 2, 4, 8, 16, 32])
    per_request = gr.MAX_GRAPH_LOGITS_BYTES // 10  # 10 requests' draft logits fit
    model_runner = types.SimpleNamespace(decode_cuda_graph_runner=runner)
    assert gr.capture_batch_sizes(model_runner, per_request) == [1, 2, 4, 8]
    assert gr.capture_batch_sizes(model_runner, gr.MAX_GRAPH_LOGITS_BYTES + 1) is None
    assert gr.capture_batch_sizes(types.SimpleNamespace(decode_cuda_graph_runner=None), 1) is None


def test_the_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gr.TREE_GRAPH_ENV, raising=False)
    assert gr.tree_graphs_enabled()
    monkeypatch.setenv(gr.TREE_GRAPH_ENV, "0")
    assert not gr.tree_graphs_enabled()
    monkeypatch.setenv(gr.TREE_GRAPH_ENV, "off")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_TREE_GRAPH must be 0 or 1"):
        gr.tree_graphs_enabled()
