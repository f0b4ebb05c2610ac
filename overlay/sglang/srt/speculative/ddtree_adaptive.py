"""DDTREE: a budget chosen per round (``--speculative-ddtree-adaptive-budgets``), without a
host sync.

Each round builds its tree at the widest budget. If the target accepted a drafted node with the
drafter's own path probability q (the exp of its log score), the first w nodes of that tree
(best-first order, so q never grows along it) would yield 1 + Φ(w) tokens per request, Φ(w) being
the sum of their q. The round verifies the first w nodes for the w that maximises

    θ(w) = (1 + c Φ̄(w)) / (t_between + t_round(bs, w)),

CaDDTree's stopping rule over a few CUDA-graph widths. Φ̄ is the mean Φ per request of the
latest round whose statistics reached the host; c rescales it to the acceptance measured since
(the drafter is not calibrated); t_round(bs, w) is the GPU time of a round at that graph batch
size and width, t_between the GPU time from one round's end to the next one's start.

Nothing waits on the GPU: statistics come back through pinned memory and timings through CUDA
events, both polled, so a round chooses from what rounds one or two before it measured. At a
batch size, widths not timed yet are tried first, and every ``EXPLORE_EVERY``-th round re-times
the width timed longest ago, so the costs follow the growing context. A width's first timings
keep the lower one (a first replay may pay a one-off cost), later ones move an average.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import torch

EXPLORE_EVERY = 64
MIN_SAMPLES = 2  # timings of a width at a batch size before its cost is trusted (the lower one)
COST_EMA = 0.2  # weight of a new round's time in t_round
PHI_EMA = 0.5  # weight of a new round's Φ̄: the draft's confidence moves with the text
SCALE_EMA = 0.05  # weight of a new round in c's numerator and denominator
SCALE_BOUNDS = (0.1, 10.0)
# A longer gap between two rounds is an idle engine or a prefill, not per-round work.
MAX_BETWEEN_MS = 20.0
STATS_SLOTS = 8  # rounds whose statistics may be in flight at once


@dataclass
class _Round:
    key: Tuple[int, int]  # (batch-size bucket, budget)
    start: Any  # CUDA event at the round's first launch
    end: Any = None  # CUDA event after its last
    follows_round: bool = False  # the previous decode round ran right before it
    slot: Optional[torch.Tensor] = None  # its statistics, copied before ``end`` is recorded
    batch_size: int = 0


class AdaptiveBudget:
    """The per-round budget policy; one per worker.

    Args:
        budgets: the widths a round chooses from (each has its verify graphs).
        batch_sizes: the captured graph batch sizes; a batch is timed under the one it pads to.
        device: where the tree's log scores live.
        new_event / new_host_buffer: ``torch.cuda.Event(enable_timing=True)`` and a pinned
            float32 host tensor of a given length; injectable for CPU tests.

    Use per decode round: ``budget = begin_round(bs)`` before the first launch, then
    ``end_round(log_scores, accept_lens)`` after the last; ``interrupt()`` when another batch
    (a prefill) ran in between.
    """

    def __init__(
        self,
        budgets: Sequence[int],
        batch_sizes: Sequence[int],
        *,
        device: torch.device,
        new_event: Optional[Callable[[], Any]] = None,
        new_host_buffer: Optional[Callable[[int], torch.Tensor]] = None,
        explore_every: int = EXPLORE_EVERY,
    ):
        self.budgets = sorted({int(b) for b in budgets})
        self.widest = self.budgets[-1]
        self.batch_sizes = sorted({int(b) for b in batch_sizes})
        self.explore_every = int(explore_every)
        # Φ(w) for every width at once: [widest] summed q @ [widest, widths] prefix indicator.
        nodes = torch.arange(self.widest, device=device)
        self._prefix = (nodes[:, None] < torch.tensor(self.budgets, device=device)).float()
        self._new_event = new_event or (lambda: torch.cuda.Event(enable_timing=True))
        new_host_buffer = new_host_buffer or (
            lambda n: torch.empty(n, dtype=torch.float32, pin_memory=True)
        )
        self._free_slots = [new_host_buffer(len(self.budgets) + 1) for _ in range(STATS_SLOTS)]
        self._free_events: List[Any] = []
        self._pending: Deque[_Round] = deque()
        self._open: Optional[_Round] = None
        self._last_timed: Optional[_Round] = None  # whose end event starts the next gap
        self._follows_round = False
        self.round_ms: Dict[Tuple[int, int], float] = {}
        self._samples: Dict[Tuple[int, int], int] = {}
        self.between_ms = 0.0
        self._timed_at: Dict[Tuple[int, int], int] = {}  # round count when last timed
        self._rounds: Dict[int, int] = {}  # per bucket
        self._round_count = 0
        self.phi: Optional[List[float]] = None  # Φ̄ per width, per request
        self._accepted = 0.0  # EMAs of accepted drafts and of Φ at the widths used, per request
        self._predicted = 0.0

    @property
    def scale(self) -> float:
        """c: accepted drafts per drafted probability mass, measured."""
        if self._predicted <= 0.0:
            return 1.0
        low, high = SCALE_BOUNDS
        return min(max(self._accepted / self._predicted, low), high)

    def bucket(self, bs: int) -> int:
        """The graph batch size ``bs`` pads to; eager batches by powers of two."""
        i = bisect.bisect_left(self.batch_sizes, bs)
        if i < len(self.batch_sizes):
            return self.batch_sizes[i]
        return 1 << (int(bs) - 1).bit_length()

    def begin_round(self, bs: int) -> int:
        """This round's budget; marks its start on the current stream."""
        self._fold()
        bucket = self.bucket(bs)
        budget = self._choose(bucket)
        start = self._event()
        start.record()
        self._open = _Round((bucket, budget), start, follows_round=self._follows_round, batch_size=bs)
        return budget

    def end_round(self, log_scores: torch.Tensor, accept_lens: torch.Tensor) -> None:
        """After the round's last launch: its statistics on their way to the host.

        ``log_scores``: the widest tree's node log scores, [bs, widest] (-inf: unreachable);
        ``accept_lens``: accepted tokens per request, bonus included, [bs]."""
        rnd, self._open = self._open, None
        if rnd is None:
            return
        if self._free_slots:
            bs = int(log_scores.shape[0])
            stats = torch.empty(len(self.budgets) + 1, dtype=torch.float32, device=log_scores.device)
            torch.mv(self._prefix.T, log_scores.float().exp().sum(0), out=stats[:-1])
            stats[-1:].copy_(accept_lens.sum() - bs)
            rnd.slot = self._free_slots.pop()
            rnd.slot.copy_(stats, non_blocking=True)
        rnd.end = self._event()  # once it completes, so has the copy (same stream)
        rnd.end.record()
        self._pending.append(rnd)
        self._follows_round = True

    def interrupt(self) -> None:
        """Another batch ran since the last round: the next gap is not per-round work."""
        self._follows_round = False

    def _choose(self, bucket: int) -> int:
        self._round_count += 1
        count = self._rounds[bucket] = self._rounds.get(bucket, 0) + 1
        untimed = [b for b in self.budgets if self._samples.get((bucket, b), 0) < MIN_SAMPLES]
        if untimed:
            return untimed[0]
        if count % self.explore_every == 0:
            return min(self.budgets, key=lambda b: self._timed_at[(bucket, b)])
        if self.phi is None:
            return self.widest
        scale = self.scale
        return max(
            self.budgets,
            key=lambda b: (1.0 + scale * self.phi[self.budgets.index(b)])
            / (self.between_ms + self.round_ms[(bucket, b)]),
        )

    def _fold(self) -> None:
        """Take in every finished round's timing and statistics, oldest first; never blocks."""
        while self._pending and self._pending[0].end.query():
            rnd = self._pending.popleft()
            ms = rnd.start.elapsed_time(rnd.end)
            old = self.round_ms.get(rnd.key)
            samples = self._samples[rnd.key] = self._samples.get(rnd.key, 0) + 1
            if old is None:
                self.round_ms[rnd.key] = ms
            elif samples <= MIN_SAMPLES:
                self.round_ms[rnd.key] = min(old, ms)
            else:
                self.round_ms[rnd.key] = old + COST_EMA * (ms - old)
            self._timed_at[rnd.key] = self._round_count
            previous, self._last_timed = self._last_timed, rnd
            if previous is not None and rnd.follows_round:
                gap = previous.end.elapsed_time(rnd.start)
                if 0.0 <= gap <= MAX_BETWEEN_MS:
                    self.between_ms += COST_EMA * (gap - self.between_ms)
            if previous is not None:
                self._free_events += [previous.start, previous.end]
            if rnd.slot is not None:
                self._take_stats(rnd)

    def _take_stats(self, rnd: _Round) -> None:
        values = rnd.slot.tolist()  # complete: the copy preceded the end event
        self._free_slots.append(rnd.slot)
        bs = max(rnd.batch_size, 1)
        phi = [v / bs for v in values[:-1]]
        self.phi = phi if self.phi is None else [
            old + PHI_EMA * (new - old) for old, new in zip(self.phi, phi, strict=True)
        ]
        used = self.budgets.index(rnd.key[1])
        self._accepted += SCALE_EMA * (values[-1] / bs - self._accepted)
        self._predicted += SCALE_EMA * (phi[used] - self._predicted)

    def _event(self):
        return self._free_events.pop() if self._free_events else self._new_event()
