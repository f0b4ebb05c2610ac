"""DDTREE: fixed-shape stages of the round captured in CUDA graphs, one per batch size.

At small batch a round is bound by host time: each stage's GPU work is tiny next
to the Python and launches that issue it (torch-profiler trace on the H200,
fixture pair). Stages whose shapes depend only on the batch size replay from
a graph instead:

- the tree stage: draft hidden states -> lm_head top-K with its fp32
  normaliser -> best-first tree and/or the top-1 chain, as the budget policy
  asks at that batch size (~16 launches and ~0.5 ms of host time eager);
- the commit stage: the accepted rows'
  target features -> DFlash's draft-KV writer (projection, then per layer K/V,
  norm, rope and a prefix-valid store; ~10 launches and DFlash's Python).

The verify tensors and the FULL-layout mask stay eager: the mask's length
follows the requests' prefix lengths.

A batch between two captured sizes runs in the next larger graph. Each input
declares what its padding rows hold: stale rows are harmless where every step
is row-independent and nothing is written from them (the tree stage); the
commit stage pads ``commit_lens`` with 0 so padded requests write no KV.
Outputs are static buffers, valid until the next replay; the round consumes
them on the same stream before then.

With a budget schedule (``--speculative-ddtree-budget-schedule``) or adaptive
budgets (``--speculative-ddtree-adaptive-budgets``) the target's verify also
comes in several widths: ``VerifyWidths`` keeps, per shape of the budget
policy (ddtree_budget), the target attention backend and TARGET_VERIFY graphs
of its width, and the round swaps them into the target's model runner for its
verify only. ``SGLANG_DDTREE_TREE_GRAPH`` / ``SGLANG_DDTREE_COMMIT_GRAPH``
(ddtree_envs) = 0 run a stage eagerly.
"""

from __future__ import annotations

import bisect
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import torch

from sglang.srt.speculative.ddtree_budget import (
    BudgetPolicy,
    DraftStage,
    Shape,
    shape_verify_tokens,
)

logger = logging.getLogger(__name__)

# The tree graphs' pool holds the largest batch's draft logits (model dtype plus an fp32 copy);
# above this, batches run eagerly, where the GPU work outweighs the launches anyway.
MAX_GRAPH_LOGITS_BYTES = 256 << 20


@dataclass(frozen=True)
class StaticInput:
    """A graph input: ``shape`` per request, and what padding requests' rows hold
    (``pad``: written before each padded replay; None: whatever is there)."""

    shape: Tuple[int, ...]
    dtype: torch.dtype
    pad: Optional[Union[int, float]] = None


class DDTreeStageCudaGraphs:
    """One CUDA graph per batch size of ``stage(**inputs)``.

    Args:
        stage: the eager stage; called with each input as a [bs, *shape] tensor.
        batch_sizes: the batch sizes to capture (the target's decode graphs').
        inputs: name -> StaticInput.
        graph_factory: ``torch.cuda.CUDAGraph``; injectable for CPU tests.
        capture: ``torch.cuda.graph``-like context manager factory (graph, pool).

    Use: write the round's values into ``inputs_for(bs)``, then ``replay(bs)``.
    """

    def __init__(
        self,
        stage: Callable[..., Any],
        *,
        batch_sizes: Sequence[int],
        inputs: Mapping[str, StaticInput],
        device: torch.device,
        graph_factory: Optional[Callable[[], Any]] = None,
        capture: Optional[Callable[..., Any]] = None,
    ):
        self.stage = stage
        self.batch_sizes = sorted({int(b) for b in batch_sizes if int(b) > 0})
        if not self.batch_sizes:
            raise ValueError("DDTREE stage graphs need at least one batch size.")
        self.max_bs = self.batch_sizes[-1]
        self.specs = dict(inputs)
        self.buffers = {
            name: torch.zeros((self.max_bs, *spec.shape), dtype=spec.dtype, device=device)
            for name, spec in self.specs.items()
        }
        self._graph_factory = graph_factory or torch.cuda.CUDAGraph
        self._capture = capture or (lambda graph, pool: torch.cuda.graph(graph, pool=pool))
        self.graphs: Dict[int, Any] = {}
        self.outputs: Dict[int, Any] = {}

    def capture_all(self) -> None:
        """Warm up (compiles kernels, sets up workspaces) and capture, largest batch first, in
        one memory pool."""
        pool = None
        for bs in reversed(self.batch_sizes):
            views = self._views(bs)
            self.stage(**views)  # nothing may compile or allocate a workspace inside capture
            graph = self._graph_factory()
            with self._capture(graph, pool):
                out = self.stage(**views)
            pool = graph.pool() if pool is None else pool
            self.graphs[bs] = graph
            self.outputs[bs] = out

    def can_run(self, bs: int) -> bool:
        return 0 < bs <= self.max_bs and bool(self.graphs)

    def inputs_for(self, bs: int) -> Dict[str, torch.Tensor]:
        """The static inputs' first ``bs`` requests, to be written before ``replay(bs)``."""
        return self._views(bs)

    def replay(self, bs: int) -> Any:
        """Run the smallest graph that fits ``bs``; its outputs cover ``graph_bs(bs)`` requests."""
        graph_bs = self.graph_bs(bs)
        if graph_bs != bs:
            for name, spec in self.specs.items():
                if spec.pad is not None:
                    self.buffers[name][bs:graph_bs].fill_(spec.pad)
        self.graphs[graph_bs].replay()
        return self.outputs[graph_bs]

    def graph_bs(self, bs: int) -> int:
        return self.batch_sizes[bisect.bisect_left(self.batch_sizes, bs)]

    def _views(self, bs: int) -> Dict[str, torch.Tensor]:
        return {name: buffer[:bs] for name, buffer in self.buffers.items()}


def capture_batch_sizes(model_runner, bytes_per_request: int = 0, budget: int = 0) -> Optional[list]:
    """The target's decode-graph batch sizes, those with ``bytes_per_request`` * bs within
    ``budget`` when one is given; None without decode graphs or when none fits."""
    runner = getattr(model_runner, "decode_cuda_graph_runner", None)
    sizes = [
        int(b)
        for b in getattr(runner, "capture_bs", None) or ()
        if not budget or int(b) * bytes_per_request <= budget
    ]
    return sizes or None


@dataclass(frozen=True)
class VerifyWidth:
    """What a round of this shape verifies on: the width, and the target's attention backend
    and decode-graph runner built for it."""

    shape: Shape
    num_verify_tokens: int
    attn_backend: Any
    graph_runner: Any


class VerifyWidths:
    """The target's verify resources per shape of the budget policy.

    The target's own backend and decode graphs, made at startup for every captured batch size at
    the policy's widest verify width, serve the shapes of that width. Each narrower width gets
    its own, from ``build(num_verify_tokens, batch_sizes)`` -> (attn_backend, graph_runner), with
    graphs for the captured batch sizes a schedule gives it, or for all of them when a round may
    pick any shape (adaptive). Shapes of one width share them (the chain's is the block, as a
    budget below the block's). A batch's shape and tree stage are the policy's at the graph
    batch size it pads to, so the verify graph, the tree graph and the shape always agree.
    """

    def __init__(
        self,
        model_runner,
        *,
        policy: BudgetPolicy,
        block_size: int,
        build: Optional[Callable[[int, list], Tuple[Any, Any]]] = None,
    ):
        self.model_runner = model_runner
        self.policy = policy
        self.capture_bs = capture_batch_sizes(model_runner) or []
        widest = policy.widest_verify_tokens(block_size)
        by_width = {widest: (model_runner.attn_backend, model_runner.decode_cuda_graph_runner)}
        self.by_shape: Dict[Shape, VerifyWidth] = {}
        for shape in policy.shapes:
            width = shape_verify_tokens(shape, block_size)
            if width not in by_width:
                sizes = [  # a schedule's width serves its batch sizes; a choice serves them all
                    bs
                    for bs in self.capture_bs
                    if policy.is_adaptive
                    or shape_verify_tokens(policy.shape_at(bs), block_size) == width
                ]
                by_width[width] = build(width, sizes)
            self.by_shape[shape] = VerifyWidth(shape, width, *by_width[width])

    def graph_bs(self, bs: int) -> int:
        """The captured batch size ``bs`` pads to (itself past the largest)."""
        i = bisect.bisect_left(self.capture_bs, bs)
        return self.capture_bs[i] if i < len(self.capture_bs) else bs

    def shape_for(self, bs: int) -> Shape:
        """A fixed policy's or schedule's shape for a batch of ``bs`` requests."""
        return self.policy.shape_at(self.graph_bs(bs))

    def drafts_for(self, bs: int) -> DraftStage:
        """What the tree stage builds for a batch of ``bs`` requests."""
        return self.policy.drafts_at(self.graph_bs(bs))

    def width_for(self, bs: int) -> VerifyWidth:
        return self.by_shape[self.shape_for(bs)]

    @contextmanager
    def verifying(self, width: VerifyWidth):
        """The target's backend and decode graphs are ``width``'s for the verify inside, and
        its own again after: prefill graphs and every other forward keep reading its own."""
        runner = self.model_runner
        saved = runner.attn_backend, runner.decode_cuda_graph_runner
        runner.attn_backend, runner.decode_cuda_graph_runner = width.attn_backend, width.graph_runner
        try:
            yield
        finally:
            runner.attn_backend, runner.decode_cuda_graph_runner = saved
