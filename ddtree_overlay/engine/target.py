"""Run a script of `in_target/` in the TARGET env's own interpreter and read its one result.

The tool never assumes its own interpreter is the target: whatever it needs to know about an
env (where sglang is, whether the patched modules import, which GPU torch sees) comes from a
script the env's python runs by path. Each such script prints exactly one result line,
`RESULT_MARK` and a JSON value, after whatever the env's imports print; `run_script` returns
that value, or says why there is none.

The engine runner is the one script that streams instead: it decodes for minutes, prints an
event line as each engine starts and per arm, cell and engine (`START`, `ARM`, `CELL`, `ENGINE`
and a JSON object) and appends its
records to a JSONL file. `start_engine_runner` starts it and `runner_events` reads those lines.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

IN_TARGET = Path(__file__).resolve().parents[1] / "in_target"
ENGINE_RUNNER = IN_TARGET / "engine_runner.py"
RESULT_MARK = "@@DDTREE-OVERLAY-RESULT@@ "  # written out again in each in_target script
RUNNER_EVENTS = ("START", "ARM", "CELL", "ENGINE")


@dataclass(frozen=True)
class TargetRun:
    """What one run of an in-target script left: its result, or why there is none."""

    result: Any  # the script's JSON result; None when it printed none
    problem: str | None  # why there is no result (None when there is one)
    stdout: str = ""
    stderr: str = ""
    malformed: bool = False  # it printed a result line that is not JSON

    def tail(self, lines: int = 6) -> list[str]:
        """The last non-empty lines of stderr (stdout when stderr is empty)."""
        text = (self.stderr or self.stdout).strip()
        return [line for line in text.splitlines()[-lines:] if line.strip()] or ["no output"]


def run_script(
    python: Path,
    name: str,
    args: Sequence[str | Path] = (),
    *,
    timeout: float,
    isolated: bool = True,
    env: Mapping[str, str] | None = None,
) -> TargetRun:
    """`python [-I] in_target/<name>.py ARGS...`; ``isolated`` runs it with `-I` (no
    PYTHONPATH, no user site: the env as a fresh interpreter of it sees itself)."""
    command = [str(python), *(["-I"] if isolated else []), str(IN_TARGET / f"{name}.py"), *map(str, args)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except OSError as error:
        return TargetRun(None, f"cannot run: {error.strerror}")
    except subprocess.TimeoutExpired:
        return TargetRun(None, f"did not answer within {timeout:g} s")
    try:
        found, result = read_result(done.stdout)
    except ValueError as error:
        return TargetRun(None, f"its result line is not JSON: {error}", done.stdout, done.stderr, malformed=True)
    if found:  # the script finished its work; how the interpreter then exits does not matter
        return TargetRun(result, None, done.stdout, done.stderr)
    last = TargetRun(None, None, done.stdout, done.stderr).tail(1)[0]
    why = f"exited with {done.returncode}" if done.returncode else "printed no result"
    return TargetRun(None, f"{why}: {last}", done.stdout, done.stderr)


def read_result(stdout: str) -> tuple[bool, Any]:
    """(found, value) of the last result line in a script's stdout."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return True, json.loads(line[len(RESULT_MARK) :])
    return False, None


def start_engine_runner(
    python: Path,
    plan: Path,
    records: Path,
    *,
    stderr: int | IO[str] | None = subprocess.STDOUT,
    own_session: bool = False,
) -> subprocess.Popen[str]:
    """The engine runner on ``plan``, appending to ``records``; its stdout is a pipe of event
    lines (`runner_events`). ``own_session`` gives it its own process group, so that a
    watchdog can end SGLang's children with it."""
    return subprocess.Popen(
        [str(python), str(ENGINE_RUNNER), str(plan), str(records)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=own_session,
    )


def runner_events(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(tag, payload) for each event line the runner printed; other lines are SGLang's."""
    for line in lines:
        tag, _, payload = line.partition(" ")
        if tag in RUNNER_EVENTS:
            yield tag, json.loads(payload)
