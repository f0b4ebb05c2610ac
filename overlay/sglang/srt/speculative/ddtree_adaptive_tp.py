"""DDTREE adaptive budgets under tensor parallelism: every rank verifies rank 0's choice.

The ranks of a TP group run one graph each per round, and their collectives must match, so every
rank must verify the same shape every round. Each rank's own policy would time its own rounds
and could choose differently; instead only rank 0 runs the policy (``AdaptiveBudget``), and the
others follow it.

The choice travels on the round's one collective: each rank appends one float64 to its draft
top-K pieces (``ddtree_tp.gather_topk_pieces_with_tail``; rank 0's is the index of the shape its
policy chose for this round's batch size), so no second collective pays its latency (tens of µs
between PCIe-linked GPUs). After the all-gather every rank copies rank 0's value to pinned memory
behind an event, and the round ``LAG`` rounds later takes it in: from then on, rounds at that
batch size (its graph bucket, and as many grammar-constrained requests: ``Bucket``) verify that
shape; before any choice arrives, the widest.

Every rank counts the same decode rounds at the same batch sizes (the scheduler's batches are
the same on every rank), so every rank applies the same choices at the same rounds. Two rounds
is enough for the read never to wait: the scheduler takes a round's results (waiting for its
last copy, which follows the all-gather) before it launches the round after next, with overlap
or without. Where the value has still not arrived the host waits for it (``Event.synchronize``):
what the ranks verify must not depend on how fast each one's host runs. Nothing is added inside
a CUDA graph: the all-gather already runs eagerly between the round's two top-K graphs.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import torch

from sglang.srt.speculative.ddtree_adaptive import AdaptiveBudget, Bucket, round_bucket
from sglang.srt.speculative.ddtree_budget import Shape, shape_order

LAG = 2  # rounds from rank 0's choice to the first round that verifies it


class RankZeroBudget:
    """The per-round shape under TP: rank 0's policy's choice, ``LAG`` rounds late, the same on
    every rank.

    Args:
        policy: rank 0's ``AdaptiveBudget``; None on the other ranks.
        budgets / batch_sizes: the policy's shapes and captured graph batch sizes (every rank
            passes the same).
        device: where the top-K pieces are.
        new_event / new_host_buffer: ``torch.cuda.Event()`` and a pinned float64 host tensor of
            one value; injectable for CPU tests.

    Use per decode round as ``AdaptiveBudget`` (``begin_round``, ``end_round``, ``interrupt``),
    and around the round's all-gather: send ``tail()``, then hand every rank's tails to
    ``received``.
    """

    def __init__(
        self,
        policy: Optional[AdaptiveBudget],
        budgets: Sequence[Shape],
        batch_sizes: Sequence[int],
        *,
        device: torch.device,
        new_event: Optional[Callable[[], Any]] = None,
        new_host_buffer: Optional[Callable[[], torch.Tensor]] = None,
    ):
        self.policy = policy
        self.budgets: List[Shape] = sorted(set(budgets), key=shape_order)
        self.batch_sizes = sorted({int(b) for b in batch_sizes})
        self._device = device
        self._new_event = new_event or torch.cuda.Event
        self._new_host_buffer = new_host_buffer or (
            lambda: torch.empty(1, dtype=torch.float64, pin_memory=True)
        )
        self._chosen: Dict[Bucket, Shape] = {}  # per bucket: rank 0's latest choice applied
        # (round, bucket, pinned slot, event) of each round whose choice has not been applied
        self._in_flight: Deque[Tuple[int, Bucket, torch.Tensor, Any]] = deque()
        self._free: List[Tuple[torch.Tensor, Any]] = []
        self._round = 0
        self._bucket = Bucket(0)  # this round's
        self._proposal = -1.0  # what this rank sends: rank 0's choice's index

    def begin_round(self, bs: int, *, grammar_requests: int = 0) -> Shape:
        """This round's shape, the same on every rank."""
        self._round += 1
        while self._in_flight and self._in_flight[0][0] <= self._round - LAG:
            self._apply(*self._in_flight.popleft()[1:])
        self._bucket = round_bucket(self.batch_sizes, bs, grammar_requests)
        shape = self._chosen.get(self._bucket, self.budgets[-1])
        if self.policy is not None:
            self._proposal = float(self.budgets.index(self.policy.begin_round(bs, shape, grammar_requests=grammar_requests)))
        return shape

    def tail(self) -> torch.Tensor:
        """What this rank appends to the round's all-gather: float64 [1]."""
        return torch.full((1,), self._proposal, dtype=torch.float64, device=self._device)

    def received(self, tails: torch.Tensor) -> None:
        """Every rank's tails, [world, 1], after the all-gather: rank 0's on its way to the host."""
        slot, event = (
            self._free.pop() if self._free else (self._new_host_buffer(), self._new_event())
        )
        slot.copy_(tails[0], non_blocking=True)
        event.record()
        self._in_flight.append((self._round, self._bucket, slot, event))

    def end_round(
        self,
        log_scores: torch.Tensor,
        accept_lens: torch.Tensor,
        chain_log_scores: Optional[torch.Tensor] = None,
    ) -> None:
        """``AdaptiveBudget.end_round`` on rank 0."""
        if self.policy is not None:
            self.policy.end_round(log_scores, accept_lens, chain_log_scores)

    def interrupt(self) -> None:
        """``AdaptiveBudget.interrupt`` on rank 0; not a round."""
        if self.policy is not None:
            self.policy.interrupt()

    def _apply(self, bucket: Bucket, slot: torch.Tensor, event: Any) -> None:
        if not event.query():
            event.synchronize()  # see the module docstring: agreement over speed
        self._chosen[bucket] = self.budgets[int(slot[0])]
        self._free.append((slot, event))
