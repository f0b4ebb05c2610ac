"""`bench`: target-only, DFLASH and DDTREE budgets through `sglang.Engine` on the env's GPU.

Plans the sweep (`bench.plan` over a `bench.settings` setting), checks the env (sglang, a GPU,
the overlay applied: otherwise the DDTREE arms are left out), has `bench.supervision` run it,
and writes the report (`bench.analysis`, `bench.markdown`, `bench.plots`) into ``--out``:

    bench.json     the report: per cell tok/s (median over repeats, and each repeat's), speedups,
                   acceptance, histogram, round split, losslessness, parity; per engine status
    bench.md       the same as markdown tables
    *.png          speedup and acceptance length vs budget, DDTREE round time by stage
    records.jsonl  the runner's raw records (outputs included), plan.json, profile.jsonl,
                   runner.log (SGLang's stderr), reference/*.json

`--reanalyse RUN_DIR` rebuilds a finished run's report from its records, without a GPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddtree_overlay.bench import markdown, plots
from ddtree_overlay.bench.analysis import analyse
from ddtree_overlay.bench.plan import (
    DDTREE,
    BenchConfig,
    SweepPlan,
    config_from_report,
    describe_plan,
    plan_sweep,
)
from ddtree_overlay.bench.records import read_records
from ddtree_overlay.bench.settings import make_setting
from ddtree_overlay.bench.supervision import OnEvent, load_references, run_bench, write_report
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import VerifyFailed
from ddtree_overlay.engine.fingerprint import installed_patch_set
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.engine.site import open_overlay, require_sglang
from ddtree_overlay.engine.target import run_script

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PROBE_TIMEOUT_S = 300

@dataclass(frozen=True)
class BenchRequest:
    setting: str = "fixture"
    config: BenchConfig = field(default_factory=BenchConfig)
    out: Path = Path("bench-results")
    target: Path | None = None
    draft: Path | None = None
    prompts: Path | None = None
    reference_dir: Path | None = None  # precomputed reference JSONs instead of runs beside the sweep
    dry_run: bool = False


def default_out(setting: str) -> Path:
    return Path("bench-results") / f"{setting}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def bench(env: EnvInfo, request: BenchRequest, *, on_event: OnEvent = lambda _: None) -> Result:
    setting = make_setting(
        request.setting,
        scratch=request.out / "models",
        target=request.target,
        draft=request.draft,
        prompts=request.prompts,
        prompt_tokens=request.config.prompt_tokens,
        write=not request.dry_run,
    )
    plan = plan_sweep(setting, request.config)
    if request.dry_run:
        data = {"dry_run": True, "out": str(request.out), "plan": describe_plan(plan)}
        return Result(("bench",), "ok", data, messages=plan.notes)

    sglang = require_sglang(env)
    probe = probe_gpu(env.python)
    if probe["gpu"] is None:
        why = probe["error"] or "torch sees no CUDA device"
        data = {"bench": "skipped (no GPU)", "env": str(env.requested), "reason": why}
        return Result(("bench",), "skipped", data, messages=(f"bench skipped (no GPU): {why}",))

    notes = list(plan.notes)
    if not overlay_applied(env):
        plan = without_algorithm(plan, DDTREE)
        notes.append(
            f"the DDTree overlay is not applied in `{env.requested}`: DDTREE arms skipped "
            f"(run `ddtree-overlay apply --env {env.requested}`)"
        )
    context = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": probe["gpu"],
        "torch": probe["torch"],
        "sglang": sglang.version,
        "python": str(env.python),
        "commit": _git_commit(),
    }
    report = run_bench(
        env.python, plan, request.out, context=context, on_event=on_event, reference_dir=request.reference_dir
    )
    report["notes"] = notes + report["notes"]
    return _result(report, request.out)


def reanalyse(run: Path, reference_dir: Path | None = None) -> Result:
    """A finished run re-analysed from its raw records with this checkout's analysis (e.g.
    after a fix to the correctness judge): its plan rebuilt from bench.json's setting and
    config, bench.json, bench.md and the plots rewritten. The config and the context (commit,
    GPU, start time) stay the run's own; a note records the re-analysis."""
    old = json.loads((run / "bench.json").read_text())
    recorded = old["setting"]
    custom = recorded["name"] == "custom"
    config = config_from_report(old["config"])
    setting = make_setting(
        recorded["name"],
        scratch=run / "models",
        target=Path(recorded["target"]) if custom else None,
        draft=Path(recorded["draft"]) if custom else None,
        prompt_tokens=config.prompt_tokens,
        write=False,
    )
    plan = plan_sweep(setting, config)
    cells, engines = read_records(run / "records.jsonl")
    references = load_references(plan, reference_dir) if reference_dir else None
    report = analyse(plan, cells, engines, references=references, context=old["context"])
    report["notes"] = [*report["notes"], f"re-analysed from records.jsonl at commit {_git_commit() or 'unknown'}"]
    return _result(report, run)


def _result(report: dict[str, Any], out: Path) -> Result:
    write_report(report, out)  # first: a plotting failure must not cost the numbers
    try:
        files, plot_note = plots.write_plots(report, out)
    except (RuntimeError, ValueError, OSError) as error:
        files, plot_note = [], f"plots failed: {type(error).__name__}: {error}"
    if plot_note:
        report["notes"].append(plot_note)
        write_report(report, out)
    data = {
        "out": str(out),
        "files": sorted(str(p) for p in [out / "bench.json", out / "bench.md", *files]),
        "table": markdown.throughput_table(report),
        "report": report,
    }
    issues = tuple(Issue("bench_check_failed", text) for text in report["issues"])
    if issues:
        return Result(
            ("bench",), "failed", data, issues, tuple(report["notes"]), exit_code=int(VerifyFailed.exit_code)
        )
    return Result(("bench",), "ok", data, messages=tuple(report["notes"]))


def probe_gpu(python: Path) -> dict[str, Any]:
    done = run_script(python, "gpu_probe", timeout=PROBE_TIMEOUT_S, isolated=False)
    if done.problem is not None:
        return {"gpu": None, "torch": None, "error": f"the GPU probe failed in `{python}`: {done.problem}"}
    return done.result


def overlay_applied(env: EnvInfo) -> bool:
    """Is the DDTree overlay applied (every touched file at its post-image) in ``env``?"""
    applied, _ = open_overlay(env).applied_overlay(installed_patch_set(env))
    return applied is not None and applied.state == "applied"


def without_algorithm(plan: SweepPlan, algorithm: str) -> SweepPlan:
    keep = [(r, f) for r, f in zip(plan.runs, plan.expected_to_fit, strict=True) if r.group.arm.algorithm != algorithm]
    return replace(
        plan,
        groups=tuple(g for g in plan.groups if g.arm.algorithm != algorithm),
        runs=tuple(r for r, _ in keep),
        expected_to_fit=tuple(f for _, f in keep),
    )


def _git_commit() -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    done = subprocess.run(
        [git, "-C", str(PACKAGE_DIR), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )
    return (done.stdout.strip() or None) if done.returncode == 0 else None
