"""CUDA graphs stood in for on CPU: a fake graph re-runs the stage captured into it on replay,
which is what a graph does for a shape-static, sync-free stage."""

from __future__ import annotations

import contextlib

import torch
from payload_modules import load_payload_module

load_payload_module("sglang.srt.speculative.ddtree_utils")  # the runner imports it
gr = load_payload_module("sglang.srt.speculative.ddtree_cuda_graph_runner")


class FakeGraph:
    """Replays the stage captured into it; a graph's outputs are the same tensors every replay."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.rerun = None

    def replay(self) -> None:
        self.log.append("replay")
        self.rerun()

    def pool(self) -> str:
        return f"pool-of-{id(self)}"


def make_graphs(stage, batch_sizes, inputs, log, refill=None):
    """Capture with fake graphs; ``refill(out, fresh)`` copies a rerun's result into the captured
    outputs (a real graph writes into the same memory)."""
    pools = []

    @contextlib.contextmanager
    def capture(graph, pool):
        pools.append(pool)
        yield

    graphs = gr.DDTreeStageCudaGraphs(
        stage,
        batch_sizes=batch_sizes,
        inputs=inputs,
        device=torch.device("cpu"),
        graph_factory=lambda: FakeGraph(log),
        capture=capture,
    )
    graphs.capture_all()
    for bs, graph in graphs.graphs.items():

        def rerun(bs=bs):
            fresh = stage(**{name: buffer[:bs] for name, buffer in graphs.buffers.items()})
            if refill is not None:
                refill(graphs.outputs[bs], fresh)

        graph.rerun = rerun
    log.clear()
    return graphs, pools
