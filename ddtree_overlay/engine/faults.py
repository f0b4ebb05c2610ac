"""Fault injection for the crash tests: fail at a named write step.

`DDTREE_OVERLAY_CRASH_AT=<step>:<n>[:KIND]` (`settings.fault_spec`) makes this process fail the
n-th time it reaches `step`: KILL, TERM, INT and STOP send it that signal (STOP holds it, lock and
all, until a SIGCONT: the race tests), ENOSPC and EIO raise that `OSError` as a failed write would.
Unset, `reach` only counts.
"""

from __future__ import annotations

import errno
import os
import signal
from collections import Counter

from ddtree_overlay.engine import settings

_SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT, "STOP": signal.SIGSTOP}
_ERRNOS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}

reached: Counter[str] = Counter()


def reach(step: str) -> None:
    reached[step] += 1
    spec = settings.fault_spec()
    if spec is None or spec.step != step or spec.count != reached[step]:
        return
    if spec.kind in _ERRNOS:
        code = _ERRNOS[spec.kind]
        raise OSError(code, os.strerror(code))
    os.kill(os.getpid(), _SIGNALS[spec.kind])
