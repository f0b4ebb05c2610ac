"""The engine runner's time box (`engine_runner.TimeBox`) on a fake clock: an engine starts only
when, after a start as long as the ones measured, one of its cells fits by the same measure the
cells are then held to, so no engine starts only to have every cell skipped."""

from __future__ import annotations

from typing import Any

import pytest

from ddtree_overlay.in_target.engine_runner import START_SPREAD, TimeBox


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cell(name: str, est_s: float) -> dict[str, Any]:
    return {"name": name, "est_s": est_s}


def arm(name: str, *cells: dict[str, Any], est_start_s: float = 60.0) -> dict[str, Any]:
    return {"name": name, "est_start_s": est_start_s, "cells": list(cells)}


DFLASH = arm("dflash", cell("dflash/c1/t0", 25.5), cell("dflash/c16/t0", 26.2))
DDTREE = arm("ddtree-b15", cell("ddtree-b15/c1/t0", 25.5), cell("ddtree-b15/c16/t0", 26.2))


def serve(box: TimeBox, clock: Clock, engine: dict[str, Any], ready: float, cells: tuple[float, ...]) -> None:
    """``engine`` starts and warms up in ``ready`` seconds, then its cells take ``cells``."""
    clock.now += ready
    box.engine_ready(engine, ready)
    for spec, seconds in zip(engine["cells"], cells, strict=True):
        assert box.fits_cell(spec)
        clock.now += seconds
        box.cell_done(spec, seconds)


def first_round(box: TimeBox, clock: Clock) -> None:
    """DFLASH then DDTREE, as the 2026-12-04 H200 run measured them (cells with the runner's
    0.5 s pause before each): DFLASH's cold start and a first window that compiled, then cells
    of about 25 s and a warm start of 23.4 s."""
    serve(box, clock, DFLASH, 57.8, (84.96, 25.07))
    serve(box, clock, DDTREE, 23.4, (24.89, 24.94))


def test_an_engine_starts_only_if_a_cell_fits_after_a_start_as_long_as_its_last() -> None:
    clock = Clock()
    box = TimeBox(deadline=clock.now + 1000, clock=clock)
    first_round(box, clock)
    assert box.engine_s(DDTREE) == pytest.approx(23.4 * START_SPREAD)  # its own start, padded
    assert box.cell_s(DDTREE["cells"][0]) == 24.89  # its own cell, as measured in round 1
    box.deadline = clock.now + 23.4 * START_SPREAD + 24.89 - 0.1
    assert not box.fits_engine(DDTREE)
    box.deadline += 0.2
    assert box.fits_engine(DDTREE)


def test_an_engine_that_starts_serves_its_first_cell_when_the_start_takes_no_longer_than_padded() -> None:
    """The run that motivated the rule: with 59 s left the runner started DDTREE's second engine
    on a 22 s start and a cell rescaled to 34 s (all cells' measured ÷ estimated, the compile
    included), the start took 25.4 s, and both its cells were skipped. Judged by its own start
    and its own cell's measured time, the engine starts and its first cell fits."""
    clock = Clock()
    box = TimeBox(deadline=None, clock=clock)
    first_round(box, clock)
    serve(box, clock, DFLASH, 21.9, (23.70, 25.48))
    box.deadline = clock.now + 59.0
    rescaled = DDTREE["cells"][0]["est_s"] * box.scale
    assert 21.9 + rescaled <= 59.0 < 25.4 + rescaled  # how the run judged it, and what happened
    assert box.fits_engine(DDTREE)
    clock.now += 25.4  # its start
    assert box.fits_cell(DDTREE["cells"][0])


@pytest.mark.parametrize("left", [40.0, 50.0, 60.0, 70.0, 80.0])
def test_whenever_an_engine_starts_one_of_its_cells_still_fits_after_it(left: float) -> None:
    clock = Clock()
    box = TimeBox(deadline=None, clock=clock)
    first_round(box, clock)
    box.deadline = clock.now + left
    for engine in (DFLASH, DDTREE):
        if box.fits_engine(engine):
            clock.now += box.engine_s(engine)  # a start no longer than the padded one
            assert any(box.fits_cell(c) for c in engine["cells"])


def test_an_arm_without_a_warm_start_of_its_own_takes_the_slowest_of_any_arm() -> None:
    clock = Clock()
    box = TimeBox(deadline=None, clock=clock)
    other = arm("ddtree-b32", cell("ddtree-b32/c1/t0", 25.5))
    box.engine_ready(DFLASH, 57.8)
    box.engine_ready(DDTREE, 23.4)
    box.engine_ready(DFLASH, 21.9)
    assert box.engine_s(other) == pytest.approx(23.4 * START_SPREAD)
    assert box.engine_s(DFLASH) == pytest.approx(21.9 * START_SPREAD)  # its own last, not its cold one


def test_the_first_start_takes_the_cold_estimate_and_the_second_its_own() -> None:
    """The first start compiles kernels whichever arm it is: its measured time says nothing of the
    next engine's, which keeps its estimate until a warm start has been measured."""
    box = TimeBox(deadline=None, cold_start_s=150.0, clock=Clock())
    assert box.engine_s(DFLASH) == 150.0
    box.engine_ready(DFLASH, 57.8)
    assert box.engine_s(DDTREE) == 60.0 and box.engine_s(DFLASH) == 60.0


def test_a_cell_not_yet_measured_takes_its_estimate_rescaled_by_every_cell_measured() -> None:
    box = TimeBox(deadline=None, clock=Clock())
    assert box.cell_s(DDTREE["cells"][0]) == 25.5
    box.cell_done(cell("dflash/c1/t0", 20.0), 30.0)
    assert box.scale == 1.5 and box.cell_s(DDTREE["cells"][0]) == pytest.approx(25.5 * 1.5)
    box.cell_done(DDTREE["cells"][0], 24.0)
    assert box.cell_s(DDTREE["cells"][0]) == 24.0


def test_without_a_deadline_everything_fits() -> None:
    box = TimeBox(deadline=None, cold_start_s=1e9, clock=Clock())
    assert box.fits_engine(DFLASH) and box.fits_cell(DFLASH["cells"][0])
