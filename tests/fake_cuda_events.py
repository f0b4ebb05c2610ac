"""CUDA events stood in for on CPU: a stream whose clock the test moves."""

from __future__ import annotations


class FakeGPU:
    """A stream whose clock the test moves; events complete up to `completed`."""

    def __init__(self) -> None:
        self.now = 0.0  # ms
        self.completed = float("inf")
        self.created = 0
        self.syncs = 0

    def event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGPU) -> None:
        self.gpu = gpu
        self.t: float | None = None

    def record(self) -> None:
        self.t = self.gpu.now

    def query(self) -> bool:
        return self.t is not None and self.t <= self.gpu.completed

    def synchronize(self) -> None:
        self.gpu.syncs += 1
        self.gpu.completed = max(self.gpu.completed, self.t)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query() and end.query(), "elapsed_time on an event that has not completed"
        return end.t - self.t
