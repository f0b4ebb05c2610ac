"""DDTREE: opt-in per-round GPU time split of the decode round.

Enable it with one environment variable, read once per process:

    SGLANG_DDTREE_PROFILE=/path/to/ddtree_profile.jsonl

Unset (the default), ``get_ddtree_profiler()`` returns a profiler whose
``stage()`` hands back one shared no-op context manager (a torch-profiler
range only while a trace is being taken) and whose ``round_done()`` returns
at once: no events, no allocations, no host sync.

Set, the worker brackets each stage of a round with CUDA events (of one round
in N with ``SGLANG_DDTREE_PROFILE_EVERY=N``: a benchmark that times the decode
keeps the events' host cost off all but the sampled rounds)::

    with profiler.stage("draft"):
        ...
    profiler.round_done(bs, cuda_graph=can_run_cuda_graph, budget=budget)

A round is folded into the current window only once its last event has
completed (``Event.query()``, which does not block), so profiling adds no host
sync in the steady state either. A window of ``WINDOW_ROUNDS`` rounds, or
whatever is pending when a round starts after ``IDLE_GAP_S`` without one, is
appended to the file as one JSON line::

    {"profile_version": 1, "pid": 4242, "t_first": 1764400000.1,
     "t_last": 1764400000.9, "rounds": 64, "requests": 1024,
     "cuda_graph_rounds": 64, "batch_sizes": {"16": 64}, "budgets": {"32": 64},
     "ms_sum": {"draft": 40.1, "topk": 6.0, "tree": 9.3, "verify": 80.2,
                "accept": 5.5, "commit": 7.7, "round": 160.4},
     "ms_max": {"draft": 0.9, ..., "round": 3.1},
     "host_ms_sum": {"draft": 30.2, "topk": 5.1, ..., "commit": 9.0}}

``ms_sum[stage]`` is the GPU time between a stage's start and end events,
summed over the window's rounds, and ``ms_max[stage]`` the slowest round's.
``host_ms_sum[stage]`` is the host time spent inside the stage (Python and
kernel launches): a stage whose GPU span is about its host time waits on the
host, not on its kernels. ``round`` runs from a round's first event to its
last, so ``round`` minus the stages is GPU time spent between them (launch
gaps). ``t_first`` / ``t_last`` are host wall-clock times (``time.time()``) of
the window's first and last ``round_done``, so a benchmark can match windows
to the requests it sent; ``requests`` sums the batch size over the rounds.
``budgets`` counts the rounds per tree budget (several under a budget schedule).
With adaptive budgets the line also has ``adaptive``: the policy's costs, statistics and
choices when the window was written (``AdaptiveBudget.snapshot``). ``paths`` names the paths the
engine runs (``engine_paths``), so a benchmark's records say which ran::

    "paths": {"verify_attention": "splitkv", "hybrid_state": "flat"}

Enabled or not, each stage is a ``ddtree.<stage>`` ``record_function`` range
while a torch-profiler trace is being taken (scripts/gpu/round_trace.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter, deque
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Tuple

from sglang.srt.speculative.ddtree_envs import envs

if TYPE_CHECKING:
    from sglang.srt.speculative.ddtree_budget import Shape

logger = logging.getLogger(__name__)

PROFILE_VERSION = 1
WINDOW_ROUNDS = 64
IDLE_GAP_S = 0.2

_NULL_STAGE = nullcontext()


class DDTreeNullProfiler:
    """The disabled profiler: no timing; stages still show in a torch-profiler trace."""

    enabled = False

    def stage(self, name: str):
        return _record_function("ddtree." + name)

    def round_done(
        self, batch_size: int, cuda_graph: Optional[bool] = None, budget: Optional["Shape"] = None
    ) -> None:
        return None

    def flush(self) -> None:
        return None

    def attach(self, name: str, view: Callable[[], Dict[str, Any]]) -> None:
        return None


def engine_paths(*, split_kv_verify: bool, split_kv_draft: bool, hybrid_state: Optional[str]) -> Dict[str, str]:
    """The ``paths`` of a window line: the target verify's attention (``splitkv``: the split-KV
    kernel with a tail-only tree mask, ddtree_attention_choice; ``full-mask``: the backend's own
    kernel with the FULL-layout tree mask), the drafter's where it runs the split-KV kernel
    (``draft_attention``: ``splitkv``) and, on a hybrid target, its recurrent state during the
    verify (``flat`` or ``snapshot``, ddtree_hybrid)."""
    paths = {"verify_attention": "splitkv" if split_kv_verify else "full-mask"}
    if split_kv_draft:
        paths["draft_attention"] = "splitkv"
    if hybrid_state is not None:
        paths["hybrid_state"] = hybrid_state
    return paths


def _cuda_event():
    import torch

    return torch.cuda.Event(enable_timing=True)


def _cuda_capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def _record_function(name: str):
    import torch

    if not torch._C._autograd._profiler_enabled():
        return _NULL_STAGE  # no trace is being taken: skip the dispatcher round trip
    return torch.profiler.record_function(name)


class _Stage:
    """One ``with profiler.stage(name):`` block: a start and an end event, the host time
    spent inside it, and a ``ddtree.<name>`` range for torch-profiler traces."""

    __slots__ = ("_profiler", "_name", "_start", "_host_t0", "_annotation")

    def __init__(self, profiler: "DDTreeProfiler", name: str):
        self._profiler = profiler
        self._name = name
        self._start = None
        self._host_t0 = 0.0
        self._annotation = None

    def __enter__(self):
        self._annotation = self._profiler._annotate("ddtree." + self._name)
        self._annotation.__enter__()
        self._host_t0 = self._profiler._host_clock()
        self._start = self._profiler._record()
        return self

    def __exit__(self, *exc_info) -> bool:
        self._profiler._close_stage(self._name, self._start, self._host_t0)
        self._annotation.__exit__(*exc_info)
        return False


class _Round:
    __slots__ = ("spans", "first", "last", "batch_size", "cuda_graph", "budget", "t")

    def __init__(self, spans, first, last, batch_size, cuda_graph, budget, t):
        self.spans = spans  # [(name, start_event, end_event, host_ms)] in closing order
        self.first = first  # the round's first recorded event
        self.last = last  # the round's last recorded event
        self.batch_size = batch_size
        self.cuda_graph = cuda_graph
        self.budget = budget
        self.t = t


class _Window:
    """Sums over the rounds folded since the last write."""

    def __init__(self) -> None:
        self.rounds = 0
        self.requests = 0
        self.cuda_graph_rounds = 0
        self.batch_sizes: Counter = Counter()
        self.budgets: Counter = Counter()
        self.ms_sum: Dict[str, float] = {}
        self.ms_max: Dict[str, float] = {}  # one slow round (a compile, a stall) shows here
        self.host_ms_sum: Dict[str, float] = {}
        self.t_first: Optional[float] = None
        self.t_last: Optional[float] = None

    def add(
        self,
        rnd: _Round,
        stage_ms: List[Tuple[str, float]],
        round_ms: float,
        host_ms: List[Tuple[str, float]],
    ) -> None:
        self.rounds += 1
        self.requests += int(rnd.batch_size)
        self.cuda_graph_rounds += 1 if rnd.cuda_graph else 0
        self.batch_sizes[str(int(rnd.batch_size))] += 1
        if rnd.budget is not None:
            self.budgets[str(rnd.budget)] += 1  # a budget, or "chain"
        for name, ms in [*stage_ms, ("round", round_ms)]:
            self.ms_sum[name] = self.ms_sum.get(name, 0.0) + ms
            self.ms_max[name] = max(self.ms_max.get(name, 0.0), ms)
        for name, ms in host_ms:
            self.host_ms_sum[name] = self.host_ms_sum.get(name, 0.0) + ms
        self.t_first = rnd.t if self.t_first is None else self.t_first
        self.t_last = rnd.t

    def to_json(self) -> Dict[str, Any]:
        return {
            "profile_version": PROFILE_VERSION,
            "pid": os.getpid(),
            "t_first": self.t_first,
            "t_last": self.t_last,
            "rounds": self.rounds,
            "requests": self.requests,
            "cuda_graph_rounds": self.cuda_graph_rounds,
            "batch_sizes": dict(self.batch_sizes),
            "budgets": dict(self.budgets),
            "ms_sum": {name: round(ms, 4) for name, ms in self.ms_sum.items()},
            "ms_max": {name: round(ms, 4) for name, ms in self.ms_max.items()},
            "host_ms_sum": {name: round(ms, 4) for name, ms in self.host_ms_sum.items()},
        }


class DDTreeProfiler:
    """CUDA-event stage timer that writes per-window sums as JSON lines.

    ``new_event``, ``is_capturing``, ``clock`` and ``annotate`` are injectable so
    the logic runs without a GPU; by default they are ``torch.cuda.Event(
    enable_timing=True)``, ``torch.cuda.is_current_stream_capturing``,
    ``time.time`` and ``torch.profiler.record_function``.
    """

    enabled = True

    def __init__(
        self,
        path: str,
        *,
        window_rounds: int = WINDOW_ROUNDS,
        sample_every: int = 1,
        idle_gap_s: float = IDLE_GAP_S,
        new_event: Optional[Callable[[], Any]] = None,
        is_capturing: Optional[Callable[[], bool]] = None,
        clock: Callable[[], float] = time.time,
        host_clock: Callable[[], float] = time.perf_counter,
        annotate: Callable[[str], Any] = _record_function,
    ):
        if window_rounds < 1:
            raise ValueError(f"window_rounds must be >= 1, got {window_rounds}.")
        if sample_every < 1:
            raise ValueError(f"SGLANG_DDTREE_PROFILE_EVERY must be >= 1, got {sample_every}.")
        self.sample_every = int(sample_every)
        self._rounds_seen = 0
        self.path = path
        self.window_rounds = int(window_rounds)
        self.idle_gap_s = float(idle_gap_s)
        self._new_event = new_event or _cuda_event
        self._is_capturing = is_capturing or _cuda_capturing
        self._clock = clock
        self._host_clock = host_clock
        self._annotate = annotate
        self._free_events: List[Any] = []
        self._spans: List[Tuple[str, Any, Any]] = []  # the open round
        self._first: Any = None
        self._last: Any = None
        self._pending: Deque[_Round] = deque()
        self._window = _Window()
        self._last_round_t: Optional[float] = None
        self._write_failed = False
        self._views: Dict[str, Callable[[], Dict[str, Any]]] = {}

    def attach(self, name: str, view: Callable[[], Dict[str, Any]]) -> None:
        """Write ``view()`` under ``name`` in every window's line (a policy's state then)."""
        self._views[name] = view

    def stage(self, name: str):
        if self._rounds_seen % self.sample_every:
            return _NULL_STAGE  # an unsampled round costs nothing
        if self._first is None:
            self._flush_if_idle()
        if self._is_capturing():
            return _NULL_STAGE
        return _Stage(self, name)

    def round_done(
        self, batch_size: int, cuda_graph: Optional[bool] = None, budget: Optional["Shape"] = None
    ) -> None:
        self._rounds_seen += 1
        if self._first is None:
            # Nothing was recorded this round (unsampled, or during graph capture). An unsampled
            # round after an idle gap still writes what is pending: an engine's last requests
            # may be too short to reach a sampled round.
            self._flush_if_idle()
            return
        now = self._clock()
        self._pending.append(
            _Round(self._spans, self._first, self._last, batch_size, cuda_graph, budget, now)
        )
        self._spans, self._first, self._last = [], None, None
        self._last_round_t = now
        self._fold(block=False)
        if self._window.rounds >= self.window_rounds:
            self._write()

    def flush(self) -> None:
        """Fold every pending round (waiting for its events) and write them."""
        self._fold(block=True)
        if self._window.rounds:
            self._write()

    def _flush_if_idle(self) -> None:
        if self._last_round_t is None or not (self._pending or self._window.rounds):
            return
        if self._clock() - self._last_round_t >= self.idle_gap_s:
            self.flush()  # an idle engine's events completed long ago: no stall

    def _record(self):
        event = self._free_events.pop() if self._free_events else self._new_event()
        event.record()
        if self._first is None:
            self._first = event
        self._last = event
        return event

    def _close_stage(self, name: str, start, host_t0: float) -> None:
        end = self._record()
        self._spans.append((name, start, end, (self._host_clock() - host_t0) * 1000.0))

    def _fold(self, *, block: bool) -> None:
        while self._pending:
            rnd = self._pending[0]
            if block:
                rnd.last.synchronize()
            elif not rnd.last.query():
                return
            self._pending.popleft()
            stage_ms = [(name, start.elapsed_time(end)) for name, start, end, _ in rnd.spans]
            host_ms = [(name, ms) for name, _, _, ms in rnd.spans]
            self._window.add(rnd, stage_ms, rnd.first.elapsed_time(rnd.last), host_ms)
            for _, start, end, _ in rnd.spans:
                self._free_events.extend((start, end))

    def _write(self) -> None:
        data = self._window.to_json()
        for name, view in self._views.items():
            data[name] = view()
        line = json.dumps(data, sort_keys=True)
        self._window = _Window()
        try:
            with open(self.path, "a") as f:
                f.write(line + "\n")
        except OSError as exc:
            if not self._write_failed:
                logger.warning("DDTREE profile: cannot append to %s: %s", self.path, exc)
                self._write_failed = True


SYNC_DEBUG_MODES = ("warn", "error")


class RoundSyncGuard:
    """``SGLANG_DDTREE_SYNC_DEBUG=warn|error``: torch's CUDA sync debug mode during each
    DDTREE decode round only, so a host sync inside the round warns (with its stack) or raises,
    while the scheduler's own syncs between rounds stay quiet. Unset: a no-op."""

    def __init__(self, mode: str, set_mode: Optional[Callable[[str], None]] = None):
        if mode not in SYNC_DEBUG_MODES:
            raise ValueError(
                f"SGLANG_DDTREE_SYNC_DEBUG must be one of {SYNC_DEBUG_MODES}, got {mode!r}."
            )
        self.mode = mode
        self._set_mode = set_mode or _set_cuda_sync_debug_mode

    def __enter__(self):
        self._set_mode(self.mode)
        return self

    def __exit__(self, *exc_info) -> bool:
        self._set_mode("default")
        return False


def _set_cuda_sync_debug_mode(mode: str) -> None:
    import torch

    torch.cuda.set_sync_debug_mode(mode)


def get_round_sync_guard():
    """The guard the worker wraps each round in; reads ``SGLANG_DDTREE_SYNC_DEBUG``."""
    mode = envs.SGLANG_DDTREE_SYNC_DEBUG.get()
    return RoundSyncGuard(mode) if mode else _NULL_STAGE


_PROFILER: Optional[Any] = None


def get_ddtree_profiler():
    """The process's profiler; ``SGLANG_DDTREE_PROFILE`` is read on the first call."""
    global _PROFILER
    if _PROFILER is None:
        path = envs.SGLANG_DDTREE_PROFILE.get()
        if path:
            every = envs.SGLANG_DDTREE_PROFILE_EVERY.get()
            _PROFILER = DDTreeProfiler(path, sample_every=every)
            logger.info(
                "DDTREE profile: per-stage GPU ms of one round in %d, %d rounds per line, "
                "appended to %s",
                int(every),
                WINDOW_ROUNDS,
                path,
            )
        else:
            _PROFILER = DDTreeNullProfiler()
    return _PROFILER
