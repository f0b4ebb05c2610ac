"""GPU time of a call, for the device scripts' kernel microbenchmarks (scripts/gpu/)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def gpu_ms(fn: Callable[[], object], *, warmup: int = 3, iters: int = 20) -> float:
    """Median GPU ms of ``fn()`` between two CUDA events, after ``warmup`` untimed calls. The host
    launches each call, so a call shorter than its launch measures the launch."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graph_ms(fn: Callable[[], object], *, warmup: int = 3, calls: int = 20, replays: int = 10) -> float:
    """Median GPU ms per call of ``fn()`` replayed from one CUDA graph of ``calls`` calls back to
    back, after ``warmup`` untimed eager calls (compiles, lazy inits): no host launch between the
    kernels, as in an engine's graph-replayed forward. The calls read the same inputs, so what
    fits in L2 stays there, as it does not between an engine's layers."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)
