"""The environment variables the engine reads, each parsed in one place.

A malformed value stops the command with one line naming the variable (`errors.bad_setting`,
exit 7) before anything is written; an empty value counts as unset.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ddtree_overlay.engine import errors

STATE_DIR_ENV = "DDTREE_OVERLAY_STATE_DIR"
LOCK_TIMEOUT_ENV = "DDTREE_OVERLAY_LOCK_TIMEOUT"
FAULT_AT_ENV = "DDTREE_OVERLAY_CRASH_AT"
DEFAULT_LOCK_TIMEOUT_S = 10.0
FAULT_KINDS = ("KILL", "TERM", "INT", "STOP", "ENOSPC", "EIO")


@dataclass(frozen=True)
class FaultSpec:
    """Where the fault-injection tests make this process fail: the n-th time it reaches `step`."""

    step: str
    count: int
    kind: str  # one of FAULT_KINDS


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def state_dir_override() -> Path | None:
    raw = _raw(STATE_DIR_ENV)
    if raw is None:
        return None
    if "\0" in raw or not os.path.isabs(raw):
        raise errors.bad_setting(STATE_DIR_ENV, raw, "an absolute path")
    return Path(raw)


def lock_timeout_s() -> float:
    raw = _raw(LOCK_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 <= value < math.inf):
        raise errors.bad_setting(LOCK_TIMEOUT_ENV, raw, "a number of seconds, 0 or more")
    return value


def fault_spec() -> FaultSpec | None:
    """`<step>:<n>[:KIND]`, KIND one of `FAULT_KINDS` (default KILL)."""
    raw = _raw(FAULT_AT_ENV)
    if raw is None:
        return None
    step, _, rest = raw.partition(":")
    count, _, kind = rest.partition(":")
    kind = kind or "KILL"
    if not step or not count.isdigit() or int(count) < 1 or kind not in FAULT_KINDS:
        raise errors.bad_setting(FAULT_AT_ENV, raw, f"`<step>:<n>[:{'|'.join(FAULT_KINDS)}]`")
    return FaultSpec(step, int(count), kind)
