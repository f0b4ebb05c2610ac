"""The SGLang switches every engine of a bench run inherits from the bench's environment.

Each engine starts in the bench's process environment, so a ``SGLANG_*`` variable set there
applies to every arm alike. One matters for the comparison: ``SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1``,
SGLang's plan stream, which DFlash's published launch commands set. On 0.5.14 it took 2.22 ms off
DFLASH's bs 1 step and 1.11 ms off a DDTREE B = 32 round at the Qwen3-8B shape (an H100,
2026-12-06, BENCHMARKS): without it, DFLASH at bs 1 is not at its fastest. The plan reads the
switches once (``inherited_sglang_env``), the report records them, the Engines line names them and
the recommendation's launch commands carry them, so a run says what it measured under.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SGLANG_PREFIX = "SGLANG_"
DDTREE_PREFIX = "SGLANG_DDTREE_"  # the payload's own switches: only DDTREE's engines read them
PLAN_STREAM_ENV = "SGLANG_ENABLE_OVERLAP_PLAN_STREAM"

SglangEnv = tuple[tuple[str, str], ...]  # (name, value), sorted by name


def inherited_sglang_env(environ: Mapping[str, str] = os.environ) -> SglangEnv:
    """The ``SGLANG_*`` variables of ``environ``, which every engine the bench starts inherits."""
    return tuple(sorted((name, value) for name, value in environ.items() if name.startswith(SGLANG_PREFIX)))


def env_assignments(env: Mapping[str, str], *, ddtree: bool) -> list[str]:
    """``NAME=value`` words for a command line: every switch for a DDTREE server, SGLang's own
    for the others."""
    return [f"{name}={value}" for name, value in sorted(env.items()) if ddtree or not name.startswith(DDTREE_PREFIX)]


def env_text(config: Mapping[str, Any]) -> str:
    """The Engines line's sentence on the inherited switches ("" where none was set)."""
    env = config.get("sglang_env") or {}
    if not env:
        return ""
    words = ", ".join(f"`{word}`" for word in env_assignments(env, ddtree=True))
    return f" Every engine's environment: {words}."
