"""How report tables write a cell: an en dash where there is no value, as in docs/BENCHMARKS.md."""

from __future__ import annotations

from typing import Any

DASH = "\u2013"


def cell(value: Any, spec: str = ".2f", empty: str = DASH) -> str:
    """``value`` formatted by ``spec``, or ``empty`` when there is none."""
    return empty if value is None else format(value, spec)
