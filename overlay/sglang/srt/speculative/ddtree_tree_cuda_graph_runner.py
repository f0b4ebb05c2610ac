"""DDTREE: the draft top-K and the best-first tree build, captured in CUDA graphs.

Draft hidden states in, tree out: the lm_head matmul, the fp32 top-K with its
full-vocabulary normaliser and the tree kernel are ~16 launches and ~0.5 ms of
host time per round (torch-profiler trace on the H200, fixture pair), while
their GPU work is tiny at small batch. Their shapes depend only on the batch
size, so one graph per captured batch size replays them in one launch.

The verify tensors and the FULL-layout mask stay eager: the mask's length
follows the requests' prefix lengths.

A batch between two captured sizes runs in the next larger graph; the padding
rows compute a tree from stale hidden states that nobody reads, since every
stage is row-independent. Outputs are static buffers, valid until the next
replay; the round consumes them on the same stream before then.
"""

from __future__ import annotations

import bisect
import logging
import os
from typing import Callable, Dict, Optional, Sequence

import torch
from sglang.srt.speculative.ddtree_utils import DDTreeDraftTree

logger = logging.getLogger(__name__)

TREE_GRAPH_ENV = "SGLANG_DDTREE_TREE_GRAPH"  # 0: run the top-K and tree build eagerly
# The graphs' pool holds the largest batch's draft logits (model dtype plus an fp32 copy);
# above this, batches run eagerly, where the GPU work outweighs the launches anyway.
MAX_GRAPH_LOGITS_BYTES = 256 << 20


def tree_graphs_enabled() -> bool:
    value = os.environ.get(TREE_GRAPH_ENV, "1")
    if value not in ("0", "1"):
        raise ValueError(f"{TREE_GRAPH_ENV} must be 0 or 1, got {value!r}.")
    return value == "1"


class DDTreeTreeCudaGraphRunner:
    """One CUDA graph per batch size of ``build(hidden) -> DDTreeDraftTree``.

    Args:
        build: the eager stage, draft hidden states [bs, L, H] -> tree [bs, B].
        batch_sizes: the batch sizes to capture (the target's decode graphs').
        depth, hidden_size, dtype, device: the draft hidden states' shape and type.
        graph_factory: ``torch.cuda.CUDAGraph``; injectable for CPU tests.
        capture: ``torch.cuda.graph``-like context manager factory (graph, pool).
    """

    def __init__(
        self,
        build: Callable[[torch.Tensor], DDTreeDraftTree],
        *,
        batch_sizes: Sequence[int],
        depth: int,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        graph_factory: Callable[[], object] = None,
        capture: Callable[..., object] = None,
    ):
        self.build = build
        self.batch_sizes = sorted({int(b) for b in batch_sizes if int(b) > 0})
        if not self.batch_sizes:
            raise ValueError("DDTREE tree graphs need at least one batch size.")
        self.max_bs = self.batch_sizes[-1]
        self.hidden = torch.zeros((self.max_bs, depth, hidden_size), dtype=dtype, device=device)
        self._graph_factory = graph_factory or torch.cuda.CUDAGraph
        self._capture = capture or (lambda graph, pool: torch.cuda.graph(graph, pool=pool))
        self.graphs: Dict[int, object] = {}
        self.outputs: Dict[int, DDTreeDraftTree] = {}

    def capture_all(self) -> None:
        """Warm up (compiles the kernels) and capture, largest batch first, in one pool."""
        pool = None
        for bs in reversed(self.batch_sizes):
            hidden = self.hidden[:bs]
            self.build(hidden)  # Triton compiles and cuBLAS workspaces must not happen in capture
            graph = self._graph_factory()
            with self._capture(graph, pool):
                out = self.build(hidden)
            pool = graph.pool() if pool is None else pool
            self.graphs[bs] = graph
            self.outputs[bs] = out

    def can_run(self, bs: int) -> bool:
        return 0 < bs <= self.max_bs and bool(self.graphs)

    def replay(self, draft_hidden: torch.Tensor) -> DDTreeDraftTree:
        """The tree of ``draft_hidden`` [bs, L, H], from the smallest graph that fits bs."""
        bs = int(draft_hidden.shape[0])
        graph_bs = self.batch_sizes[bisect.bisect_left(self.batch_sizes, bs)]
        self.hidden[:bs].copy_(draft_hidden)
        self.graphs[graph_bs].replay()
        out = self.outputs[graph_bs]
        if graph_bs == bs:
            return out
        return DDTreeDraftTree(
            tokens=out.tokens[:bs],
            parent_indices=out.parent_indices[:bs],
            depths=out.depths[:bs],
            log_scores=out.log_scores[:bs],
        )


def capture_batch_sizes(model_runner, logits_bytes_per_request: int) -> Optional[list]:
    """The target's decode-graph batch sizes whose draft logits fit MAX_GRAPH_LOGITS_BYTES;
    None without decode graphs or when none fits."""
    runner = getattr(model_runner, "decode_cuda_graph_runner", None)
    sizes = [
        int(b)
        for b in getattr(runner, "capture_bs", None) or ()
        if int(b) * logits_bytes_per_request <= MAX_GRAPH_LOGITS_BYTES
    ]
    return sizes or None
