"""GPU time of a call, for the device scripts' kernel microbenchmarks (scripts/gpu/)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def gpu_ms(fn: Callable[[], object], *, warmup: int = 3, iters: int = 20) -> float:
    """Median GPU ms of ``fn()`` between two CUDA events, after ``warmup`` untimed calls."""
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
