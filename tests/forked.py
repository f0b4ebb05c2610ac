"""Run an engine call in a forked child, as a command would run: the crash tests' injector.

A fork costs milliseconds where a fresh CLI process costs seconds (interpreter start, imports,
the env probe), so a crash matrix over every write step stays fast. The child reports how it
ended the way a shell sees a command end: 0, an `OverlayError`'s exit code, or minus the signal
that killed it; anything else is a bug, printed with its traceback and reported as 70.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

from ddtree_overlay.engine import faults
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.settings import FAULT_AT_ENV

UNEXPECTED = 70


def run_forked(call: Callable[[], object], *, fault: str | None = None, env_vars: Mapping[str, str] = {}) -> int:
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = UNEXPECTED
        try:
            os.environ.update(env_vars)
            os.environ.pop(FAULT_AT_ENV, None)
            if fault is not None:
                os.environ[FAULT_AT_ENV] = fault
            faults.reached.clear()
            call()
            code = 0
        except OverlayError as error:
            code = int(error.exit_code)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def steps_reached(call: Callable[[], object], record: Path, *, env_vars: Mapping[str, str] = {}) -> list[tuple[str, int]]:
    """Every (step, n) a clean run of ``call`` reaches, in a forked child, in the order reached."""
    order: list[str] = []
    reach = faults.reach

    def recording() -> None:
        def noted(step: str) -> None:
            order.append(step)
            reach(step)

        faults.reach = noted  # the child's copy of the module
        try:
            call()
        finally:
            record.write_text(json.dumps(order))

    assert run_forked(recording, env_vars=env_vars) == 0
    seen: dict[str, int] = {}
    points = []
    for step in json.loads(record.read_text()):
        seen[step] = seen.get(step, 0) + 1
        points.append((step, seen[step]))
    return points
