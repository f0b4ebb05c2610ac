"""How many requests each engine really served at once, against the widest batch its cells
asked for, and whether an engine asks for its widest batch at all (`asks_for_widest_batch`).

SGLang caps --max-running-requests to what its memory holds (the KV cache, and on a hybrid
target the recurrent-state pool, which a speculative engine's per-verify-token snapshots or
DDTREE's flat verify state share) and queues the rest of a wider wave. DFLASH and NEXTN
engines always do; the bench's DDTREE engines do on hybrid settings (`arms.SERVE_FEWER_ENV`),
where they would otherwise refuse to start. The runner records each engine's cap
(``requests_at_once``); the report shows it beside each engine and says which served fewer
requests than a cell asked for, and the recommended launch command asks for no more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddtree_overlay.bench.arms import TARGET_ONLY, Arm
from ddtree_overlay.bench.state_memory import SNAPSHOT, state_of

# SGLang caps a speculative engine at 48 running requests unless told otherwise.
SPEC_DEFAULT_MAX_RUNNING = 48


def asks_for_widest_batch(widest: int, *, hybrid: bool, streaming: bool = False) -> bool:
    """Whether an engine passes --max-running-requests = its widest batch: when SGLang's cap of
    48 would cut a wave, when cells keep a concurrency running, and on a hybrid target, where a
    DDTREE engine refuses to start if its verify state leaves fewer requests than asked for and
    SGLang's default of 48 counts as asked (the Qwen3.6-27B shape's B = 32 snapshots hold 6). The
    bench's own DDTREE engines serve SGLang's cap there instead (`Arm.engine_env`); a launch
    command a user pastes does not."""
    return widest > SPEC_DEFAULT_MAX_RUNNING or streaming or hybrid


# What a dry run on a hybrid target with DDTREE engines says of them
DRY_RUN_LINE = (
    "DDTREE engines serve SGLang's cap of concurrent requests where their verify state does not fit a "
    "cell's batch, as DFLASH's do (SGLANG_DDTREE_SERVE_FEWER_REQUESTS=1); the report says how many "
    "each engine served at once"
)


def fewest_at_once(groups: Iterable[Mapping[str, Any]]) -> int | None:
    """The fewest requests at once any engine run of ``groups`` (report rows) served; None when
    none recorded it (reports from before it was recorded)."""
    served = [
        run["requests_at_once"]
        for group in groups
        for run in group.get("repeats") or ()
        if run.get("requests_at_once") is not None
    ]
    return min(served, default=None)


def why_fewer(algorithm: str, *, hybrid: bool, hybrid_state: str) -> str:
    """What filled the memory SGLang caps the requests by, for an arm of ``algorithm``."""
    if not hybrid:
        return "its KV cache fills the memory"
    if algorithm == TARGET_ONLY:
        return "its recurrent states fill the memory"
    if state_of(algorithm, hybrid_state) == SNAPSHOT:
        return "its recurrent-state snapshots fill the memory"
    return "its recurrent states and flat verify state fill the memory"


def served_fewer_note(group: Mapping[str, Any], *, hybrid: bool, hybrid_state: str) -> str | None:
    """``DFLASH served at most 11 of 64 requests at once: …`` for an engine group (a report row)
    that served fewer requests at once than its widest cell asked for; None otherwise."""
    served, widest = fewest_at_once([group]), group.get("widest_batch")
    if served is None or widest is None or served >= widest:
        return None
    arm = Arm.of_row(group)
    why = why_fewer(arm.algorithm, hybrid=hybrid, hybrid_state=hybrid_state)
    return f"{arm.label} served at most {served} of {widest} requests at once: {why}; its cells wider than {served} queued the rest"


def served_fewer_notes(report: Mapping[str, Any]) -> list[str]:
    """`served_fewer_note` of every engine group of the report."""
    hybrid = bool(report["setting"].get("hybrid"))
    state = str(report["config"].get("hybrid_state", SNAPSHOT))  # reports from before the flat state: snapshots
    notes = (served_fewer_note(g, hybrid=hybrid, hybrid_state=state) for g in report["groups"])
    return [note for note in notes if note]


def launch_max_running(groups: Iterable[Mapping[str, Any]], widest_batch: int) -> int:
    """The --max-running-requests a launch command of these engines' configuration asks for: the
    widest batch measured, or what they served at once where that was fewer (a DDTREE server
    asked for more on a hybrid target refuses to start)."""
    served = fewest_at_once(groups)
    return widest_batch if served is None else min(widest_batch, served)
