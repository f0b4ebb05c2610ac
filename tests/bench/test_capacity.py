"""bench.capacity: what filled the memory where an engine served fewer requests at once than a
cell asked for, and the --max-running-requests a launch command may ask for."""

from __future__ import annotations

from typing import Any

import pytest

from ddtree_overlay.bench import capacity
from ddtree_overlay.bench.arms import DFLASH, NEXTN, TARGET_ONLY, Arm


def group(arm: Arm, widest: int, *served: int | None) -> dict[str, Any]:
    repeats = [{"repeat": k, "status": "ok", "requests_at_once": n} for k, n in enumerate(served, 1)]
    return {"name": arm.name, **arm.row(), "widest_batch": widest, "repeats": repeats}


@pytest.mark.parametrize(
    ("arm", "state", "why"),
    [
        (Arm(DFLASH), "flat", "its recurrent-state snapshots fill the memory"),
        (Arm(NEXTN, overlap=False), "flat", "its recurrent-state snapshots fill the memory"),
        (Arm.ddtree(32), "snapshot", "its recurrent-state snapshots fill the memory"),
        (Arm.ddtree(32), "flat", "its recurrent states and flat verify state fill the memory"),
        (Arm(TARGET_ONLY), "flat", "its recurrent states fill the memory"),
    ],
)
def test_on_a_hybrid_target_the_note_names_the_state_that_filled_the_memory(arm: Arm, state: str, why: str) -> None:
    note = capacity.served_fewer_note(group(arm, 64, 11), hybrid=True, hybrid_state=state)
    assert note == f"{arm.label} served at most 11 of 64 requests at once: {why}; its cells wider than 11 queued the rest"


def test_no_note_where_every_run_served_the_widest_batch_or_none_recorded_it() -> None:
    assert capacity.served_fewer_note(group(Arm(DFLASH), 64, 64, 80), hybrid=True, hybrid_state="flat") is None
    assert capacity.served_fewer_note(group(Arm(DFLASH), 64, None), hybrid=True, hybrid_state="flat") is None
    assert capacity.served_fewer_note(group(Arm(DFLASH), 64), hybrid=True, hybrid_state="flat") is None


def test_the_fewest_of_the_runs_counts_and_a_launch_asks_for_no_more() -> None:
    runs = [group(Arm.ddtree(8), 64, 64, 40), group(Arm.ddtree(32), 64, 38, None)]
    assert capacity.fewest_at_once(runs) == 38
    assert capacity.launch_max_running(runs, 64) == 38
    assert capacity.launch_max_running(runs, 16) == 16
    assert capacity.launch_max_running([group(Arm(DFLASH), 64, None)], 64) == 64  # not recorded: as asked
