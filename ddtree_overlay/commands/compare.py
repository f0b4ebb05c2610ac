"""`compare`: an offline run of the DDTree reference code against a replay of its prompts.

The replay is the tool's own reference decoder (fp32, CPU), SGLang's engine records of the
same prompts in the run's turn order (`--records`, JSON lines as the engine runner writes
them), or those records made here (`--env`): the bench's sweep (`compare.sglang_plan`), made
ready for the env's GPU and run by the bench's supervision, its records.jsonl (with plan.json
and runner.log) written beside the report and read back as `--records` would read them. It
writes compare.json, compare.md and compare.png; a disagreement exits 11.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddtree_overlay.bench.records import read_records
from ddtree_overlay.bench.supervision import RECORDS_FILE, OnEvent, begin_sweep, run_sweep
from ddtree_overlay.commands.bench import gpu_sweep, skipped_without_gpu
from ddtree_overlay.compare.analysis import compare_runs
from ddtree_overlay.compare.models import check_models
from ddtree_overlay.compare.records import Side, side_from_engine_records
from ddtree_overlay.compare.replay import replay_with_reference
from ddtree_overlay.compare.report import write_report
from ddtree_overlay.compare.runfile import OfflineRun, read_run
from ddtree_overlay.compare.sglang_plan import replay_plan
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import ExitCode, file_unreadable, run_file_malformed
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import require_sglang


@dataclass(frozen=True)
class CompareRequest:
    baseline: Path
    target: Path | None  # default: the model path the run recorded
    draft: Path | None
    records: Path | None  # SGLang's records; None: replay (through `env`, or the reference decoder)
    out: Path
    env: Path | None = None  # replay through SGLang in this env (not with `records`)


def compare(
    request: CompareRequest,
    progress: Callable[[str], None] = lambda _: None,
    on_event: OnEvent = lambda _: None,
) -> Result:
    run = read_run(request.baseline)
    target, draft = request.target or Path(run.target), request.draft or Path(run.draft)
    check_models(run, target, draft)
    records, notes = request.records, ()
    if request.env is not None:
        replayed = _replay_in_env(request.env, run, target.resolve(), draft.resolve(), request.out, on_event)
        if isinstance(replayed, Result):
            return replayed
        records, notes = request.out / RECORDS_FILE, replayed
    side = _records_side(run, records) if records else replay_with_reference(run, target, draft, progress=progress)
    result = compare_runs(run, side)
    files, why_no_plot = write_report(result, request.out)
    if request.env is not None:
        files.append(request.out / RECORDS_FILE)
    data = dict(result, files=[str(f) for f in files], plot_skipped=why_no_plot)
    if result["agrees"]:
        return Result(("compare",), "ok", data, messages=notes)
    return Result(("compare",), "failed", data, messages=notes, exit_code=int(ExitCode.VERIFY_FAILED))


def _replay_in_env(
    env_path: Path, run: OfflineRun, target: Path, draft: Path, out: Path, on_event: OnEvent
) -> tuple[str, ...] | Result:
    """The run replayed through SGLang in the env, its records in ``out``: the notes (DDTREE
    arms left out, engines that failed), or the skipped result where there is no GPU."""
    env = probe_env(env_path)
    ready = gpu_sweep(env, require_sglang(env), replay_plan(run, target, draft))
    if isinstance(ready, str):
        return skipped_without_gpu("compare", env, ready)
    begin_sweep(ready.plan, out, on_event)
    run_sweep(env.python, ready.plan, out, deadline=None, on_event=on_event)
    return (*ready.notes, *_engine_failures(out / RECORDS_FILE))


def _engine_failures(records: Path) -> tuple[str, ...]:
    """Why an arm was not replayed: its engine's error, as the runner recorded it."""
    _, engines = read_records(records)
    return tuple(
        f"engine {name}: {engine.get('error') or engine.get('skipped') or 'a decode failed'} (see runner.log)"
        for (name, _), engine in engines.items()
        if not engine.get("ok")
    )


def _records_side(run: OfflineRun, path: Path) -> Side:
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        raise file_unreadable("engine records file", path) from None
    except ValueError as error:
        raise run_file_malformed(path, f"a line is not JSON ({error})") from None
    try:
        return side_from_engine_records([turn.prompt for turn in run.turns], records)
    except (KeyError, TypeError, ValueError) as error:
        raise run_file_malformed(path, f"not the engine records of this run's prompts ({error})") from None
