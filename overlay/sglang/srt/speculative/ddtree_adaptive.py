"""DDTREE: a shape chosen per round (``--speculative-ddtree-adaptive-budgets``), without a
host sync.

Each round builds its tree at the widest budget. If the target accepted a drafted node with the
drafter's own path probability q (the exp of its log score), the first w nodes of that tree
(best-first order, so q never grows along it) would yield 1 + Φ(w) tokens per request, Φ(w) being
the sum of their q. With the chain among the choices the round also builds the chain (the
drafter's top-1 path through the block, what DFLASH verifies): its Φ is the sum of its nodes' q,
its width the block. It is no prefix of the tree, and the tree's first block - 1 nodes hold at
least its mass (they are the most probable prefix-closed set of that size) at the same verify
width: the chain wins where the choices' trees are wider than the block, or narrower than
block - 1 nodes, or where the drafter's q misjudges how deep paths are accepted (c is one scale
for every shape). The round verifies the shape w that maximises

    θ(w) = (1 + c Φ̄(w)) / t(bs, w),

CaDDTree's stopping rule over a few CUDA-graph widths (a width here is a shape: a budget, or the
chain). Φ̄ is the mean Φ per request of the latest measured round whose statistics reached the
host; c rescales it to the acceptance measured since (the drafter is not calibrated). t(bs, w) = r(bs, w) + g(bs): r is the GPU time
from a round's start to its end at that graph batch size and width, g the gap the host leaves
before the next round starts. The gap is the scheduler's work between rounds (requests
finishing, new ones joining), the same whatever the width and noisier than a round, so it is
averaged over every measured round of the batch size, not per width: a width that happened to
be timed before a long gap must not lose for it.

Nothing waits on the GPU: statistics come back through pinned memory and timings through CUDA
events, both polled, so a choice rests on rounds a few before it. Only every
``SAMPLE_EVERY``-th round is measured (three events and a few small launches), because a small
model's round is host-bound and every launch shows in its step time; the other rounds cost a
dictionary lookup. At a batch size, widths not timed yet are tried (and measured) first, and every
``EXPLORE_EVERY``-th round re-times the width timed longest ago, so the costs follow the growing
context. A width's first timings keep the lower one (a first replay may pay a one-off cost), later
ones move an average.

A batch holding grammar-constrained requests is timed in tables of its own, per power of two of
such requests (``Bucket``): SGLang's grammar bitmask walk runs on the host beside the verify, at
0.17 - 0.24 ms per tree node and constrained request on a 2-core host (2026-12-05, 5.55 ms at
B = 32, 43.75 at B = 256), so where it outlasts the verify it lengthens the round, the more the
wider the tree. Timed with the unconstrained rounds, those rounds would sit above the running
cost by more than ``MAX_EXCESS_MS`` and be dropped as stalls, and the widths would keep the cost
of rounds without a walk.

Under tensor parallelism only rank 0 runs the policy, and every rank verifies its choice a
couple of rounds later (ddtree_adaptive_tp): a round then verifies a shape chosen earlier
(``begin_round``'s ``shape``), and is timed as that shape.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import torch

from sglang.srt.speculative.ddtree_budget import CHAIN, Shape, shape_order

SAMPLE_EVERY = 8
EXPLORE_EVERY = 64
MIN_SAMPLES = 2  # timings of a width at a batch size before its cost is trusted (the lower one)
COST_EMA = 0.2  # weight of a new timing in r(bs, w) and g(bs)
PHI_EMA = 0.5  # weight of a new round's Φ̄: the draft's confidence moves with the text
SCALE_EMA = 0.05  # weight of a new round in c's numerator and denominator
SCALE_BOUNDS = (0.1, 10.0)
# A round or gap this far above its running cost spans an idle engine or a stall.
MAX_EXCESS_MS = 20.0
STATS_SLOTS = 8  # measured rounds whose statistics may be in flight at once


def graph_bucket(batch_sizes: Sequence[int], bs: int) -> int:
    """The graph batch size ``bs`` pads to (``batch_sizes`` ascending); eager batches by powers
    of two."""
    i = bisect.bisect_left(batch_sizes, bs)
    if i < len(batch_sizes):
        return batch_sizes[i]
    return 1 << (int(bs) - 1).bit_length()


class Bucket(NamedTuple):
    """The rounds one cost table times: the graph batch size the batch pads to, and its
    grammar-constrained requests rounded up to a power of two (0: none)."""

    batch_size: int
    grammar: int = 0

    def __str__(self) -> str:
        return f"{self.batch_size}" + (f" grammar {self.grammar}" if self.grammar else "")


def grammar_requests(batch) -> int:
    """How many of a ScheduleBatch's requests the grammar bitmask walk constrains this round."""
    return sum(req.grammar is not None for req in batch.reqs) if batch.has_grammar else 0


def round_bucket(batch_sizes: Sequence[int], bs: int, grammar_requests: int = 0) -> Bucket:
    grammar = 1 << (int(grammar_requests) - 1).bit_length() if grammar_requests > 0 else 0
    return Bucket(graph_bucket(batch_sizes, bs), grammar)


@dataclass
class _Round:
    key: Tuple[Bucket, Shape]
    start: Any  # CUDA event at the round's first launch
    batch_size: int
    done: Any = None  # CUDA event after the round's last launch (``end_round``)
    end: Any = None  # CUDA event at the next round's start, or before another batch
    timed: bool = False  # end is the next decode round's start: done -> end is the gap
    slot: Optional[torch.Tensor] = None  # its statistics, copied before ``done`` is recorded


class AdaptiveBudget:
    """The per-round shape policy; one per worker.

    Args:
        budgets: the shapes a round chooses from, tree budgets and maybe ``CHAIN`` (each has its
            verify graphs).
        batch_sizes: the captured graph batch sizes; a batch is timed under the one it pads to.
        device: where the tree's log scores live.
        new_event / new_host_buffer: ``torch.cuda.Event(enable_timing=True)`` and a pinned
            float32 host tensor of a given length; injectable for CPU tests.

    Use per decode round: ``shape = begin_round(bs, grammar_requests=n)`` before the first
    launch, then ``end_round(log_scores, accept_lens, chain_log_scores)`` after the last;
    ``interrupt()`` before another batch (a prefill) runs.
    """

    def __init__(
        self,
        budgets: Sequence[Shape],
        batch_sizes: Sequence[int],
        *,
        device: torch.device,
        new_event: Optional[Callable[[], Any]] = None,
        new_host_buffer: Optional[Callable[[int], torch.Tensor]] = None,
        sample_every: int = SAMPLE_EVERY,
        explore_every: int = EXPLORE_EVERY,
    ):
        self.budgets: List[Shape] = sorted(set(budgets), key=shape_order)  # the chain first
        self.widest = self.budgets[-1]  # a tree: a choice of only the chain is no choice
        self._has_chain = CHAIN in self.budgets
        trees = self.budgets[1:] if self._has_chain else self.budgets
        self.batch_sizes = sorted({int(b) for b in batch_sizes})
        self.sample_every = int(sample_every)
        self.explore_every = int(explore_every)
        # Φ(w) for every tree width at once: [widest] summed q @ [widest, widths] prefix indicator.
        nodes = torch.arange(self.widest, device=device)
        self._prefix = (nodes[:, None] < torch.tensor(trees, device=device)).float()
        self._new_event = new_event or (lambda: torch.cuda.Event(enable_timing=True))
        new_host_buffer = new_host_buffer or (
            lambda n: torch.empty(n, dtype=torch.float32, pin_memory=True)
        )
        self._free_slots = [new_host_buffer(len(self.budgets) + 1) for _ in range(STATS_SLOTS)]
        self._pending: Deque[_Round] = deque()
        self._open: Optional[_Round] = None  # the measured round awaiting its end event
        self.round_ms: Dict[Tuple[Bucket, Shape], float] = {}  # r(bs, w)
        self.gap_ms: Dict[Bucket, float] = {}  # g(bs), per bucket
        self._samples: Dict[Tuple[Bucket, Shape], int] = {}
        self._timed_at: Dict[Tuple[Bucket, Shape], int] = {}  # round count when last timed
        self._best: Dict[Bucket, Shape] = {}  # per bucket, until the next fold brings news
        self._wanted: Set[Tuple[Bucket, Shape]] = set()  # chosen to be timed, not timed since
        self._rounds: Dict[Bucket, int] = {}  # per bucket
        self._timed_buckets: Set[Bucket] = set()  # every width has MIN_SAMPLES timings there
        self._round_count = 0
        self.phi: Optional[List[float]] = None  # Φ̄ per shape (``budgets`` order), per request
        self._accepted = 0.0  # EMAs of accepted drafts and of Φ at the widths used, per request
        self._predicted = 0.0

    @property
    def scale(self) -> float:
        """c: accepted drafts per drafted probability mass, measured."""
        if self._predicted <= 0.0:
            return 1.0
        low, high = SCALE_BOUNDS
        return min(max(self._accepted / self._predicted, low), high)

    def snapshot(self) -> Dict[str, Any]:
        """The policy's view, for the profile: per batch size, r(bs, w) and g(bs) in ms and the
        width it would choose now; Φ̄ per width and c."""
        rounds: Dict[str, Dict[str, float]] = {}
        by_key = sorted(self.round_ms.items(), key=lambda item: (item[0][0], shape_order(item[0][1])))
        for (bucket, width), ms in by_key:
            rounds.setdefault(str(bucket), {})[str(width)] = round(ms, 4)
        return {
            "round_ms": rounds,
            "gap_ms": {str(b): round(ms, 4) for b, ms in sorted(self.gap_ms.items())},
            "choice": {str(b): self._most_tokens_per_ms(b) for b in sorted(self._timed_buckets)},
            "phi": None if self.phi is None else [round(v, 4) for v in self.phi],
            "scale": round(self.scale, 4),
        }

    def bucket(self, bs: int, grammar_requests: int = 0) -> Bucket:
        return round_bucket(self.batch_sizes, bs, grammar_requests)

    def begin_round(
        self, bs: int, shape: Optional[Shape] = None, *, grammar_requests: int = 0
    ) -> Shape:
        """The shape the policy chooses for a round at ``bs`` with ``grammar_requests`` of its
        requests constrained now; on a measured round (or right after one) marks its start on
        the current stream.

        The round verifies that choice, or ``shape`` where the caller fixed it (under TP: what
        rank 0 chose rounds before, ddtree_adaptive_tp); it is timed as the shape it verifies,
        and a shape chosen to be timed is timed by the first round at its batch size that
        verifies it."""
        start = None
        if self._open is not None:
            start = self._record()
            self._close(start, timed=True)
        self._fold()
        self._round_count += 1
        bucket = self.bucket(bs, grammar_requests)
        choice, explore = self._choose(bucket)
        if explore:
            self._wanted.add((bucket, choice))
        key = (bucket, choice if shape is None else shape)
        if key in self._wanted or self._round_count % self.sample_every == 0:
            self._wanted.discard(key)
            self._open = _Round(key, start or self._record(), batch_size=bs)
        return choice

    def end_round(
        self,
        log_scores: torch.Tensor,
        accept_lens: torch.Tensor,
        chain_log_scores: Optional[torch.Tensor] = None,
    ) -> None:
        """After the round's last launch: a measured round's end marked and its statistics on
        their way to the host.

        ``log_scores``: the widest tree's node log scores, [bs, widest] (-inf: unreachable);
        ``accept_lens``: accepted tokens per request, bonus included, [bs];
        ``chain_log_scores``: the chain's, [bs, block - 1], when the chain is a choice."""
        rnd = self._open
        if rnd is None:
            return
        if self._free_slots:
            bs = int(log_scores.shape[0])
            stats = torch.empty(
                len(self.budgets) + 1, dtype=torch.float32, device=log_scores.device
            )
            first_tree = int(self._has_chain)  # stats: [chain?, trees..., accepted drafts]
            torch.mv(self._prefix.T, log_scores.float().exp().sum(0), out=stats[first_tree:-1])
            if self._has_chain:
                stats[:1].copy_(chain_log_scores.float().exp().sum().reshape(1))
            stats[-1:].copy_(accept_lens.sum() - bs)
            rnd.slot = self._free_slots.pop()
            rnd.slot.copy_(stats, non_blocking=True)  # complete once ``done`` is
        rnd.done = self._record()

    def interrupt(self) -> None:
        """Another batch is about to run: the measured round's gap is not per-round work."""
        if self._open is not None:
            self._close(self._record(), timed=False)

    def _record(self):
        event = self._new_event()
        event.record()
        return event

    def _close(self, end, *, timed: bool) -> None:
        rnd, self._open = self._open, None
        rnd.end, rnd.timed = end, timed
        self._pending.append(rnd)

    def _choose(self, bucket: Bucket) -> Tuple[Shape, bool]:
        """The shape, and whether it is chosen to be timed rather than for its θ."""
        count = self._rounds[bucket] = self._rounds.get(bucket, 0) + 1
        if bucket not in self._timed_buckets:  # samples only grow: once timed, always timed
            untimed = [b for b in self.budgets if self._samples.get((bucket, b), 0) < MIN_SAMPLES]
            if untimed:
                return untimed[0], True
            self._timed_buckets.add(bucket)
        if count % self.explore_every == 0:
            return min(self.budgets, key=lambda b: self._timed_at[(bucket, b)]), True
        best = self._best.get(bucket)
        if best is None:
            best = self._best[bucket] = self._most_tokens_per_ms(bucket)
        return best, False

    def _most_tokens_per_ms(self, bucket: Bucket) -> Shape:
        if self.phi is None:
            return self.widest
        scale = self.scale
        gap = self.gap_ms.get(bucket, 0.0)
        return max(
            self.budgets,
            key=lambda b: (1.0 + scale * self.phi[self.budgets.index(b)])
            / (self.round_ms[(bucket, b)] + gap),
        )

    def _fold(self) -> None:
        """Take in every finished measured round's timing and statistics, oldest first; never
        blocks."""
        folded = False
        while self._pending and self._pending[0].end.query():
            rnd = self._pending.popleft()
            folded = True
            if rnd.done is not None:
                self._time(rnd.key, rnd.start.elapsed_time(rnd.done))
                if rnd.timed:
                    self._time_gap(rnd.key[0], rnd.done.elapsed_time(rnd.end))
            if rnd.slot is not None:
                self._take_stats(rnd)
        if folded:
            self._best.clear()

    def _time(self, key: Tuple[Bucket, Shape], ms: float) -> None:
        old = self.round_ms.get(key)
        if old is not None and ms > old + MAX_EXCESS_MS:
            return
        samples = self._samples[key] = self._samples.get(key, 0) + 1
        if old is None:
            self.round_ms[key] = ms
        elif samples <= MIN_SAMPLES:
            self.round_ms[key] = min(old, ms)
        else:
            self.round_ms[key] = old + COST_EMA * (ms - old)
        self._timed_at[key] = self._round_count

    def _time_gap(self, bucket: Bucket, ms: float) -> None:
        old = self.gap_ms.get(bucket)
        if old is None:
            self.gap_ms[bucket] = ms
        elif ms <= old + MAX_EXCESS_MS:
            self.gap_ms[bucket] = old + COST_EMA * (ms - old)

    def _take_stats(self, rnd: _Round) -> None:
        values = rnd.slot.tolist()  # complete: the copy preceded the done event
        self._free_slots.append(rnd.slot)
        bs = max(rnd.batch_size, 1)
        phi = [v / bs for v in values[:-1]]
        self.phi = phi if self.phi is None else [
            old + PHI_EMA * (new - old) for old, new in zip(self.phi, phi, strict=True)
        ]
        used = self.budgets.index(rnd.key[1])
        self._accepted += SCALE_EMA * (values[-1] / bs - self._accepted)
        self._predicted += SCALE_EMA * (phi[used] - self._predicted)
