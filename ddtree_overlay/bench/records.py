"""The engine runner's records of a bench run, keyed by (cell or group name, repeat).

`in_target/engine_runner.py` appends JSON lines to ``records.jsonl``: ``kind`` "cell" per
measured cell and "engine" per engine start. Records written before `--repeats` carry no
repeat: they are repeat 1. The untimed primer engine's records carry ``primer`` and its name
(`plan.PRIMER`) where a group's would be, so no group's key reaches them.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.plan import SweepPlan

RecordKey = tuple[str, int]  # (cell or group name, repeat), repeats counted from 1
Records = Mapping[RecordKey, Mapping[str, Any]]


def read_records(path: Path) -> tuple[dict[RecordKey, dict[str, Any]], dict[RecordKey, dict[str, Any]]]:
    """(cells, engines), each by (name, repeat); the last line for a key wins. Records written
    before `--repeats` carry no repeat: they are repeat 1. A last line still being written is
    left out."""
    cells: dict[RecordKey, dict[str, Any]] = {}
    engines: dict[RecordKey, dict[str, Any]] = {}
    packed = path.with_name(path.name + ".xz")  # how docs/bench keeps finished runs' records
    if path.exists():
        text = path.read_text()
    elif packed.exists():
        text = lzma.decompress(packed.read_bytes()).decode()
    else:
        return cells, engines
    # Every writer appends whole lines, but the supervisor reads while the runner writes: a
    # line that crosses a page boundary can be seen half written. Such a last line, with no
    # newline yet, is the runner's next record, read in full next time.
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    for line in complete.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        key = (record["arm"], int(record.get("repeat", 1)))
        (engines if record.get("kind") == "engine" else cells)[key] = record
    return cells, engines


def repeat_label(name: str, repeat: int, repeats: int) -> str:
    """``name``, with its repeat when the sweep has several."""
    return name if repeats == 1 else f"{name} (repeat {repeat})"


def planned_repeats(plan: SweepPlan) -> dict[str, list[int]]:
    """Cell and group name -> the repeats it runs in, in order; the primer's are none of them:
    what the report reads goes through here."""
    planned: dict[str, list[int]] = {}
    for run in sorted(plan.timed_runs, key=lambda r: r.repeat):
        planned.setdefault(run.group.name, []).append(run.repeat)
        for cell in run.cells:
            planned.setdefault(cell.name, []).append(run.repeat)
    return planned
