"""Run a planned sweep and watch it: the engine runner in the target env's own interpreter, the
offline reference decoder beside it on the CPU.

`in_target/engine_runner.py` serves each engine group's cells, once per repeat (target-only
once), and the offline reference decoder (fixture pair only) runs beside it for acceptance
parity. This module starts and watches those processes, restarts the runner after a crash with
the engine runs it had not reached, stops everything at the time box, and rewrites the report
in ``out`` after every engine, so that a run killed at its limit keeps what it measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddtree_overlay.bench import markdown
from ddtree_overlay.bench.analysis import analyse
from ddtree_overlay.bench.arms import reference_cli_args
from ddtree_overlay.bench.plan import EngineRun, SweepPlan
from ddtree_overlay.bench.plan_json import runner_plan
from ddtree_overlay.bench.records import read_records
from ddtree_overlay.engine.target import runner_events, start_engine_runner

PACKAGE_DIR = Path(__file__).resolve().parents[1]
REFERENCE_DIR = PACKAGE_DIR / "reference"  # runnable by path: `python .../reference ...`
REFERENCE_WORKERS = 4  # CPU processes, one thread each, niced: the GPU sweep keeps its cores
GRACE_S = 45  # past the deadline before the runner's process group is killed
RECORDS_FILE = "records.jsonl"  # the runner's records, in the run's directory
REFERENCE_RESULTS = "reference"  # the offline reference results run beside a sweep, in the run's directory

Event = Mapping[str, Any]
OnEvent = Callable[[Event], None]


def write_report(report: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (out / "bench.md").write_text(markdown.markdown_report(report))


def run_bench(
    python: Path,
    plan: SweepPlan,
    out: Path,
    *,
    context: Mapping[str, Any],
    on_event: OnEvent = lambda _: None,
    runner_options: Mapping[str, Any] | None = None,
    reference_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the sweep (and the reference beside it, unless ``reference_dir`` holds its results)
    and return the analysed report.

    ``runner_options`` go into the runner's plan as they are (e.g. its pauses, for tests).
    """
    begin_sweep(plan, out, on_event)
    max_minutes = plan.config.max_minutes
    deadline = None if max_minutes is None else time.time() + max_minutes * 60
    references = (
        None if reference_dir else start_references(python, plan, out, deadline=deadline, on_event=on_event)
    )

    def partial_report(_: Event) -> None:  # after every engine: partial results survive a kill
        cells, engines = read_records(out / RECORDS_FILE)
        write_report(analyse(plan, cells, engines, context=context), out)

    run_sweep(
        python,
        plan,
        out,
        deadline=deadline,
        on_event=on_event,
        on_engine=partial_report,
        runner_options=runner_options,
    )
    cells, engines = read_records(out / RECORDS_FILE)
    if reference_dir:
        results = load_references(plan, reference_dir)
    else:
        results = references.wait() if references else None
    return analyse(plan, cells, engines, references=results, context=context)


def begin_sweep(plan: SweepPlan, out: Path, on_event: OnEvent) -> None:
    """``out`` without an earlier run's records, profile and runner log (`run_sweep` resumes
    from the records it finds there), and the plan's size as the first event."""
    out.mkdir(parents=True, exist_ok=True)
    for name in (RECORDS_FILE, "profile.jsonl", "runner.log"):
        (out / name).unlink(missing_ok=True)
    cells = sum(len(run.cells) for run in plan.runs)
    on_event({"event": "plan", "cells": cells, "groups": len(plan.groups), "engines": len(plan.runs)})


def run_sweep(
    python: Path,
    plan: SweepPlan,
    out: Path,
    *,
    deadline: float | None,
    on_event: OnEvent,
    on_engine: OnEvent = lambda _: None,
    runner_options: Mapping[str, Any] | None = None,
) -> None:
    """Runner processes until every engine run has an engine record.

    A runner that exits leaving runs unrecorded (a segfault, an OOM kill, an import error, the
    watchdog) is charged with the first of them, recorded as failed (or skipped, past the
    deadline); a new runner takes the rest, told which groups failed so that it skips their
    later repeats. Every pass records at least one run, so this ends; past the deadline the
    rest are recorded as skipped.
    """
    records = out / RECORDS_FILE
    while True:
        _, engines = read_records(records)
        remaining = [r for r in plan.runs if (r.name, r.repeat) not in engines]
        if not remaining:
            return
        if deadline is not None and time.time() > deadline + GRACE_S:
            for run in remaining:
                _append_engine(records, run, on_event, skipped="time box (not reached)")
            return
        sub = replace(plan, runs=tuple(remaining), expected_to_fit=(True,) * len(remaining))
        plan_path = out / "plan.json"
        plan_json = runner_plan(sub, deadline=deadline, profile_path=out / "profile.jsonl")
        failed = sorted({name for (name, _), e in engines.items() if not e.get("ok") and not e.get("skipped")})
        plan_json["failed_arms"] = failed
        plan_path.write_text(json.dumps(plan_json | dict(runner_options or {})))
        log = out / "runner.log"
        log_start = log.stat().st_size if log.exists() else 0
        code = _run_runner(python, plan_path, records, log, deadline, on_event, on_engine)
        _, engines = read_records(records)
        charged = next((r for r in remaining if (r.name, r.repeat) not in engines), None)
        if charged is None:
            continue
        if deadline is not None and time.time() >= deadline + GRACE_S:
            _append_engine(
                records, charged, on_event,
                skipped=f"time box (the runner was stopped {GRACE_S} s after the deadline)",
            )
        else:
            cause = first_exception(log, log_start)
            _append_engine(
                records, charged, on_event,
                error=f"the runner process exited with {code} while this engine ran"
                + (f": {cause}" if cause else "")
                + " (see runner.log)",
            )


EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): \S")
CAUSE_CHARS = 400


def first_exception(log: Path, start: int) -> str | None:
    """The first ``SomeError: message`` line written to ``log`` after byte ``start``: the root
    cause when a child process (SGLang's scheduler) raised and took the runner down with it."""
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    line = next((line for line in text.splitlines() if EXCEPTION_LINE.match(line)), None)
    return line if line is None or len(line) <= CAUSE_CHARS else line[: CAUSE_CHARS - 3] + "..."


def _append_engine(records: Path, run: EngineRun, on_event: OnEvent, **outcome: str) -> None:
    record = {"kind": "engine", "arm": run.name, "repeat": run.repeat, "ok": False, **outcome}
    if run.primer:
        record["primer"] = True
    with records.open("a") as f:
        f.write(json.dumps(record) + "\n")
    on_event(dict(record, event="engine"))


def _run_runner(
    python: Path,
    plan_path: Path,
    records: Path,
    log: Path,
    deadline: float | None,
    on_event: OnEvent,
    on_engine: OnEvent,
) -> int:
    with log.open("a") as stderr, start_engine_runner(
        python, plan_path, records, stderr=stderr, own_session=True
    ) as runner:
        watchdog = None
        if deadline is not None:
            watchdog = threading.Timer(max(0.0, deadline + GRACE_S - time.time()), _kill_group, (runner,))
            watchdog.daemon = True
            watchdog.start()
        try:
            assert runner.stdout is not None
            for tag, payload in runner_events(runner.stdout):
                if tag in ("START", "CELL", "ENGINE"):
                    event = dict(payload, event=tag.lower())
                    on_event(event)
                    if tag == "ENGINE":
                        on_engine(event)
            return runner.wait()
        finally:
            if watchdog is not None:
                watchdog.cancel()


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


# --- the offline reference, beside the sweep ------------------------------------------------


class ReferenceRuns:
    """Background `python -m ddtree_overlay.reference` runs, one per algorithm/budget."""

    def __init__(self, futures: Mapping[str, Future[dict[str, Any]]], pool: ThreadPoolExecutor) -> None:
        self._futures = futures
        self._pool = pool

    def wait(self) -> dict[str, dict[str, Any]]:
        results = {key: future.result() for key, future in self._futures.items()}
        self._pool.shutdown()
        return results


def reference_jobs(plan: SweepPlan) -> dict[str, list[str]]:
    """Reference CLI arguments per key (`dflash`, `ddtree-b16`, `eagle3`, ...), drafter included:
    T = 0, fp32, CPU. The chain control is judged against DFLASH's: it verifies DFLASH's chain."""
    jobs: dict[str, list[str]] = {}
    for group in plan.groups:
        key = group.arm.reference_key
        if key is None or key in jobs or not any(c.temperature == 0 for c in group.cells):
            continue
        jobs[key] = reference_cli_args(key, draft=plan.setting.draft, eagle3_draft=plan.setting.eagle3_draft)
    return jobs


def start_references(
    python: Path,
    plan: SweepPlan,
    out: Path,
    *,
    deadline: float | None,
    on_event: OnEvent,
) -> ReferenceRuns | None:
    if not plan.setting.reference_parity:
        return None
    jobs = reference_jobs(plan)
    if not jobs:
        return None
    ref_dir = out / REFERENCE_RESULTS
    ref_dir.mkdir(parents=True, exist_ok=True)
    n_prompts = max(c.prompts for c in plan.cells)
    prompts = ref_dir / "prompts.json"
    prompts.write_text(json.dumps([list(p) for p in plan.setting.prompts[:n_prompts]]))
    common = [
        "--target", str(plan.setting.target),
        "--prompts", str(prompts), "--limit", str(n_prompts),
        "--max-new-tokens", str(plan.max_new_tokens), "--temperature", "0",
        "--device", "cpu", "--dtype", "float32", "--no-baseline",
    ]
    nice_bin = shutil.which("nice")
    nice = [nice_bin, "-n", "10"] if nice_bin else []
    pool = ThreadPoolExecutor(max_workers=REFERENCE_WORKERS, thread_name_prefix="reference")
    futures = {
        key: pool.submit(
            _run_reference,
            [*nice, str(python), str(REFERENCE_DIR), *common, *algo, "--json", str(ref_dir / f"{key}.json")],
            key=key,
            deadline=deadline,
            on_event=on_event,
        )
        for key, algo in jobs.items()
    }
    return ReferenceRuns(futures, pool)


def load_references(plan: SweepPlan, directory: Path) -> dict[str, dict[str, Any]]:
    """Reference results made before the sweep (`python -m ddtree_overlay.reference.batch`): ``<key>.json``
    per algorithm/budget, each checked against the sweep's prompts, length and temperature."""
    n_prompts = max(c.prompts for c in plan.cells)
    prompt_lens = [len(p) for p in plan.setting.prompts[:n_prompts]]
    results: dict[str, dict[str, Any]] = {}
    for key in reference_jobs(plan) if plan.setting.reference_parity else ():
        path = directory / f"{key}.json"
        if not path.exists():
            results[key] = {"error": f"{path} does not exist"}
            continue
        try:
            result = json.loads(path.read_text())
            config, rows = dict(result.get("config") or {}), list(result.get("prompts") or [])
        except (OSError, ValueError, TypeError, AttributeError) as error:  # the sweep's report still gets written
            results[key] = {"error": f"{path} is no reference result: {type(error).__name__}: {error}"}
            continue
        if config.get("max_new_tokens") != plan.max_new_tokens or config.get("temperature") != 0:
            results[key] = {"error": f"{path} is for max_new_tokens={config.get('max_new_tokens')}, "
                                     f"temperature={config.get('temperature')}; the sweep decodes "
                                     f"{plan.max_new_tokens} tokens at T=0"}
        elif [r.get("prompt_len") for r in rows[:n_prompts]] != prompt_lens:
            results[key] = {"error": f"{path} was made on other prompts than the sweep's first {n_prompts}"}
        else:
            results[key] = result
    return results


def _run_reference(command: list[str], *, key: str, deadline: float | None, on_event: OnEvent) -> dict[str, Any]:
    timeout = None if deadline is None else max(1.0, deadline + GRACE_S - time.time())
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        result: dict[str, Any] = {"error": "did not finish before the time box"}
    else:
        out_path = Path(command[-1])
        if done.returncode == 0 and out_path.exists():
            result = json.loads(out_path.read_text())
        else:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            result = {"error": f"exit {done.returncode}: {tail[0]}"}
    on_event({"event": "reference", "key": key, "ok": "error" not in result, "error": result.get("error")})
    return result
