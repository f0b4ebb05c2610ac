"""One waves cell's repeats (`--repeats`) combined into its report row: the median over the
repeats measured, each repeat's outcome beside it, and the repeats whose engine was compiling
during the timed decode (`bench.compiling`) marked and left out of the median."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.compiling import compiling_note, window_compiler
from ddtree_overlay.bench.records import repeat_label

REPEAT_FIELDS = ("repeat", "status", "reason", "tok_per_s", "step_ms", "host")
ALL_COMPILING = "every repeat's engine was compiling during the timed decode"


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def combine_repeats(repeats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One cell's row from its `cell_metrics` row per repeat (each with its ``repeat``).

    A repeat that failed fails the cell. Otherwise the row is the median repeat's (by tok/s; of
    two middle ones the slower) among those measured while no compile ran, with tok_per_s and
    step_ms the medians over them; where every repeat that ran was compiling the cell's status
    is "compiling" and it has no tok/s. ``repeats`` lists each repeat's outcome and values (and
    ``compiling``), ``measured_repeats`` counts those in the median, ``compiling_repeats`` those
    left out of it.
    """
    entries = [
        {key: r.get(key) for key in REPEAT_FIELDS}
        | {"compiling": window_compiler(r.get("host")) if r["status"] == "ok" else None}
        for r in repeats
    ]
    ran = [r for r in repeats if r["status"] == "ok"]
    ok = [r for r, e in zip(repeats, entries, strict=True) if r["status"] == "ok" and not e["compiling"]]
    failed = [r for r in repeats if r["status"] == "failed"]
    if failed:
        row = dict(failed[0])
        if len(repeats) > 1:
            row["reason"] = f"repeat {row['repeat']}: {row['reason']}"
    elif ok:
        timed = sorted((r for r in ok if r.get("tok_per_s") is not None), key=lambda r: r["tok_per_s"])
        row = dict(timed[(len(timed) - 1) // 2] if timed else ok[0])
        row["median_repeat"] = row["repeat"]
        row["tok_per_s"] = _median(r.get("tok_per_s") for r in ok)
        row["step_ms"] = _median(r.get("step_ms") for r in ok)
    elif ran:
        row = dict(ran[0], status="compiling", reason=ALL_COMPILING, tok_per_s=None, step_ms=None)
    else:
        row = dict(next((r for r in repeats if r["status"] == "skipped"), repeats[0]))
    del row["repeat"]
    row["repeats"] = entries
    row["measured_repeats"] = len(ok)
    row["compiling_repeats"] = len(ran) - len(ok)
    return row


def repeat_rates(row: Mapping[str, Any]) -> list[float]:
    """A cell's tok/s in each repeat that measured it (none that was compiling)."""
    return [
        e["tok_per_s"]
        for e in row.get("repeats") or ()
        if e.get("status") == "ok" and e.get("tok_per_s") and not e.get("compiling")
    ]


def compiling_notes(rows: Sequence[Mapping[str, Any]], repeats: int) -> list[str]:
    """A note per repeat left out for compiling, and per cell left without tok/s by it."""
    notes = []
    for row in rows:
        for entry in row.get("repeats") or ():
            if entry.get("compiling"):
                notes.append(compiling_note(repeat_label(row["name"], entry["repeat"], repeats), entry))
        if row["status"] == "compiling":
            notes.append(f"{row['name']}: no tok/s: {ALL_COMPILING}")
    return notes
