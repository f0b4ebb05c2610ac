"""`compare`: an offline run of the DDTree reference code against a replay of its prompts.

The replay is the tool's own reference decoder (fp32, CPU), or SGLang's engine records of
the same prompts in the run's turn order (`--records`, JSON lines as the engine runner writes
them). It writes compare.json, compare.md and compare.png; a disagreement exits 11.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddtree_overlay.compare.analysis import compare_runs
from ddtree_overlay.compare.models import check_models
from ddtree_overlay.compare.records import Side, side_from_engine_records
from ddtree_overlay.compare.replay import replay_with_reference
from ddtree_overlay.compare.report import write_report
from ddtree_overlay.compare.runfile import OfflineRun, read_run
from ddtree_overlay.engine.errors import ExitCode, file_unreadable, run_file_malformed
from ddtree_overlay.engine.result import Result


@dataclass(frozen=True)
class CompareRequest:
    baseline: Path
    target: Path | None  # default: the model path the run recorded
    draft: Path | None
    records: Path | None  # SGLang's records; None: replay with the reference decoder
    out: Path


def compare(request: CompareRequest, progress: Callable[[str], None] = lambda _: None) -> Result:
    run = read_run(request.baseline)
    target, draft = request.target or Path(run.target), request.draft or Path(run.draft)
    check_models(run, target, draft)
    side = _records_side(run, request.records) if request.records else replay_with_reference(
        run, target, draft, progress=progress
    )
    result = compare_runs(run, side)
    files, why_no_plot = write_report(result, request.out)
    data = dict(result, files=[str(f) for f in files], plot_skipped=why_no_plot)
    if result["agrees"]:
        return Result(("compare",), "ok", data)
    return Result(("compare",), "failed", data, exit_code=int(ExitCode.VERIFY_FAILED))


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
