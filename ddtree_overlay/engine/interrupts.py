"""SIGINT and SIGTERM while an env is locked: noted at once, acted on where it is safe.

Inside `deferred()` the two signals only set a flag. A transaction calls `raise_if_signalled`
before each write it makes (never while it undoes or commits), so a signal stops it at a step
boundary, it undoes what it wrote, and the run ends with the env exactly pristine or applied,
no temp file left: what a signal's default action (or Python's KeyboardInterrupt, raised at any
bytecode) cannot promise.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

_DEFERRED = (signal.SIGINT, signal.SIGTERM)


class Signalled(BaseException):
    """Raised at a step boundary after SIGINT or SIGTERM; a BaseException, so that no
    `except Exception` swallows it on its way to the transaction's undo."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.name = signal.Signals(signum).name


@dataclass
class Deferral:
    received: list[int] = field(default_factory=list)

    def note(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)


_active: Deferral | None = None


@contextmanager
def deferred() -> Iterator[Deferral]:
    """Note SIGINT and SIGTERM instead of acting on them (main thread only; elsewhere no
    handler can be set, and the signals keep their default action)."""
    global _active
    deferral = Deferral()
    if threading.current_thread() is not threading.main_thread():
        yield deferral
        return
    previous = {signum: signal.signal(signum, deferral.note) for signum in _DEFERRED}
    _active = deferral
    try:
        yield deferral
    finally:
        _active = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def raise_if_signalled() -> None:
    if _active is not None and _active.received:
        raise Signalled(_active.received[0])
