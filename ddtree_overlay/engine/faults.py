"""Fault injection for the crash tests: die at a named write step.

`DDTREE_OVERLAY_CRASH_AT=<step>:<n>[:INT]` kills this process with SIGKILL (or SIGINT, the
Ctrl-C case) the n-th time it reaches `step`. Unset, `reach` only counts.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

CRASH_AT_ENV = "DDTREE_OVERLAY_CRASH_AT"

_reached: Counter[str] = Counter()


def reach(step: str) -> None:
    _reached[step] += 1
    spec = os.environ.get(CRASH_AT_ENV)
    if not spec:
        return
    name, count, *how = spec.split(":")
    if name == step and int(count) == _reached[step]:
        os.kill(os.getpid(), signal.SIGINT if how == ["INT"] else signal.SIGKILL)
