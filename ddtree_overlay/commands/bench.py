"""`bench`: target-only, DFLASH and DDTREE budgets through `sglang.Engine` on the env's GPU.

Plans the sweep (`bench.plan` over a `bench.settings` setting), checks the env (sglang, a GPU,
the overlay applied: otherwise the DDTREE arms are left out), has `bench.supervision` run it,
and writes the report (`bench.analysis`, `bench.markdown`, `bench.plots`) into ``--out``:

    bench.json     the report: per cell tok/s (median over repeats, and each repeat's), speedups,
                   acceptance, histogram, round split, losslessness, parity; per engine status
    bench.md       the same as markdown tables
    *.png          speedup and acceptance length vs budget, DDTREE round time by stage
    (bench.json's ``projection``: DDTREE ÷ DFLASH per batch size from these round costs and an
    acceptance curve, `bench.projection`)
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

from ddtree_overlay.bench import chat_prompts, markdown, plots
from ddtree_overlay.bench.acceptance_curve import AcceptanceCurve
from ddtree_overlay.bench.fa3_check import check_fa3
from ddtree_overlay.bench.nextn_overlap import crash_reason
from ddtree_overlay.bench.plan import (
    DDTREE,
    BenchConfig,
    SweepPlan,
    plan_sweep,
    primer_run,
)
from ddtree_overlay.bench.plan_json import describe_plan
from ddtree_overlay.bench.projection import default_curve, project
from ddtree_overlay.bench.reanalysis import PROMPTS_FILE, reanalysed_report
from ddtree_overlay.bench.recommend import recommend, summary_lines
from ddtree_overlay.bench.settings import (
    CUSTOM_PROMPTS_PER_CELL,
    context_overflow,
    load_prompts,
    make_setting,
)
from ddtree_overlay.bench.sglang_env import inherited_sglang_env
from ddtree_overlay.bench.state_memory import hybrid_state_from_env
from ddtree_overlay.bench.supervision import OnEvent, run_bench, write_report
from ddtree_overlay.bench.target_config import read_target_config
from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.errors import (
    VerifyFailed,
    bench_beyond_context,
    bench_plan_refused,
    bench_tp_refused,
    prompt_file_invalid,
    too_few_prompts_for_batch,
)
from ddtree_overlay.engine.fingerprint import installed_patch_set
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.engine.site import open_overlay, require_sglang
from ddtree_overlay.engine.target import run_script
from ddtree_overlay.fixture_paths import PAIRS

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
    acceptance_curve: AcceptanceCurve | None = None  # the projection's acceptance (default: `default_curve`)
    dry_run: bool = False
    tokenizer: Path | None = None  # chat prompts: the target's directory unless given
    enable_thinking: bool = False
    min_prompt_tokens: int | None = None
    eagle3_draft: Path | None = None  # an EAGLE-3 drafter for the target: one more baseline arm
    mem_fraction_static: float | None = None  # every engine's, instead of the runner's default


def default_out(setting: str) -> Path:
    return Path("bench-results") / f"{setting}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def bench(env: EnvInfo, request: BenchRequest, *, on_event: OnEvent = lambda _: None) -> Result:
    # the engines inherit DDTREE's hybrid state switch and SGLang's own from this process: the
    # plan states the state's memory, the report every switch
    config = replace(request.config, hybrid_state=hybrid_state_from_env(), sglang_env=inherited_sglang_env())
    sglang = None if request.dry_run else require_sglang(env)  # before chat prompts need the env
    prompt_ids, prompt_note = prompts_of(env.python, request)
    setting = make_setting(
        request.setting,
        scratch=request.out / "models",
        target=request.target,
        draft=request.draft,
        prompts=None if prompt_ids else request.prompts,
        prompt_tokens=request.config.prompt_tokens,
        write=not request.dry_run,
        prompt_ids=prompt_ids,
        prompt_note=prompt_note,
        eagle3_draft=request.eagle3_draft,
    )
    if request.mem_fraction_static is not None:
        setting = replace(setting, engine={**setting.engine, "mem_fraction_static": request.mem_fraction_static})
    version = env.sglang.version if env.sglang else None  # a dry run needs no sglang
    why = {
        backend: reason
        for backend in request.config.baseline_backends
        if (reason := crash_reason(hybrid=setting.hybrid, attention_backend=backend, sglang_version=version))
    }
    setting = replace(setting, nextn_without_overlap=why)
    try:
        plan = plan_sweep(setting, config)
    except ValueError as error:  # an --only arm this pair, or this sglang, cannot run
        raise bench_plan_refused(str(error)) from None
    too_long = context_overflow(setting, max(c.prompts for c in plan.cells), plan.max_new_tokens)
    if too_long is not None:
        raise prompt_file_invalid(request.prompts, too_long) if request.prompts else bench_beyond_context(too_long)
    if (unsplit := setting.facts.tp_refusal(config.tp_size)) is not None:
        raise bench_tp_refused(config.tp_size, unsplit)
    if request.dry_run:
        data = {"dry_run": True, "out": str(request.out), "plan": describe_plan(plan), "prompts": prompt_note}
        return Result(("bench",), "ok", data, messages=(*plan.notes, *([prompt_note] if prompt_note else [])))

    assert sglang is not None
    ready = gpu_sweep(env, sglang, plan)
    if isinstance(ready, str):
        return skipped_without_gpu("bench", env, ready)
    if prompt_ids:  # what --reanalyse and a later run (`--prompts out/prompts.json`) decode
        request.out.mkdir(parents=True, exist_ok=True)
        (request.out / PROMPTS_FILE).write_text(json.dumps(prompt_ids) + "\n")
    report = run_bench(
        env.python, ready.plan, request.out, context=ready.context, on_event=on_event,
        reference_dir=request.reference_dir,
    )
    report["plan_notes"] = list(ready.notes)  # kept by --reanalyse: the records do not carry them
    report["notes"] = [*ready.notes, *report["notes"]]
    report["setting"] |= {"prompts": prompt_note, "eagle3_draft": _text(request.eagle3_draft)}
    return _result(report, request.out, request.acceptance_curve)


@dataclass(frozen=True)
class GpuSweep:
    """A sweep ready for the env's engines: the plan less its DDTREE arms where the overlay is
    not applied (the notes say so), and the machine and versions it runs on."""

    plan: SweepPlan
    notes: tuple[str, ...]
    context: dict[str, Any]


def gpu_sweep(env: EnvInfo, sglang: SglangInstall, plan: SweepPlan) -> GpuSweep | str:
    """``plan`` made ready for ``env``'s GPU (`bench`, and `compare --env`), or why there is
    no GPU to run it on; `AttentionBackendMissing` where an arm would run FA3 and the env has
    none (`bench.fa3_check`)."""
    probe = probe_gpu(env.python)
    if probe["gpu"] is None:
        return probe["error"] or "torch sees no CUDA device"
    notes = list(plan.notes)
    if not overlay_applied(env):
        plan = without_algorithm(plan, DDTREE)
        notes.append(
            f"the DDTree overlay is not applied in `{env.requested}`: DDTREE arms skipped "
            f"(run `ddtree-overlay apply --env {env.requested}`)"
        )
    notes += check_fa3(env.python, plan)
    context = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": probe["gpu"],
        "torch": probe["torch"],
        "sglang": sglang.version,
        "python": str(env.python),
        "commit": _git_commit(),
    }
    return GpuSweep(plan, tuple(notes), context)


def skipped_without_gpu(command: str, env: EnvInfo, why: str) -> Result:
    data = {command: "skipped (no GPU)", "env": str(env.requested), "reason": why}
    return Result((command,), "skipped", data, messages=(f"{command} skipped (no GPU): {why}",))


def prompts_of(python: Path, request: BenchRequest) -> tuple[list[list[int]] | None, str | None]:
    """Chat prompts tokenized in the target env, with their description; (None, None) for a
    token-id file or none. `BadPromptFile` for a bad file, a missing tokenizer, or fewer
    prompts than the widest batch size."""
    chat_options = request.tokenizer or request.enable_thinking or request.min_prompt_tokens
    if request.prompts is None:
        return None, None
    if not chat_prompts.is_chat_file(request.prompts):
        if chat_options:
            raise prompt_file_invalid(
                request.prompts,
                "it is not JSON lines of conversations, and --tokenizer, --enable-thinking and "
                "--min-prompt-tokens apply to chat prompts only",
            )
        try:
            count = len(load_prompts(request.prompts))
        except ValueError as error:
            raise prompt_file_invalid(request.prompts, str(error)) from None
        _check_count(request, count)
        return None, None
    if request.setting != "fixture":
        raise prompt_file_invalid(
            request.prompts, f"chat prompts need a real target's tokenizer; --setting {request.setting} takes token ids"
        )
    chat = chat_prompts.ChatPrompts(
        path=request.prompts,
        tokenizer=request.tokenizer or request.target or PAIRS["dense"] / "target",
        enable_thinking=request.enable_thinking,
        min_prompt_tokens=request.min_prompt_tokens,
    )
    needed = max(max(request.config.batch_sizes), request.config.prompts_per_cell or CUSTOM_PROMPTS_PER_CELL)
    ids = chat_prompts.tokenize(python, chat, needed)
    _check_count(request, len(ids))
    return ids, chat_prompts.describe(chat, ids)


def _check_count(request: BenchRequest, count: int) -> None:
    widest = max(request.config.batch_sizes)
    if request.prompts is not None and count < widest:
        raise too_few_prompts_for_batch(request.prompts, count, widest)


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def reanalyse(run: Path, reference_dir: Path | None = None, acceptance_curve: AcceptanceCurve | None = None) -> Result:
    """A finished run re-analysed from its raw records with this checkout's analysis (e.g.
    after a fix to the correctness judge): its plan rebuilt from bench.json's setting and
    config, bench.json, bench.md and the plots rewritten. The config and the context (commit,
    GPU, start time) stay the run's own; a note records the re-analysis. ``acceptance_curve``
    projects DDTREE ÷ DFLASH with that acceptance (`bench.projection`)."""
    report = reanalysed_report(run, reference_dir)
    report["notes"] = [*report["notes"], f"re-analysed from records.jsonl at commit {_git_commit() or 'unknown'}"]
    return _result(report, run, acceptance_curve)


def _result(report: dict[str, Any], out: Path, acceptance_curve: AcceptanceCurve | None = None) -> Result:
    report["recommendation"] = recommend(report, read_target_config(Path(report["setting"]["target"])))
    curve = acceptance_curve or default_curve(report)
    report["projection"] = project(report, curve) if curve else None
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
        "table": markdown.summary_tables(report),
        "recommendation": summary_lines(report["recommendation"]),
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
    """``plan`` less ``algorithm``'s groups; a primer of theirs gives way to one of the runs left."""
    keep = [
        (r, f)
        for r, f in zip(plan.runs, plan.expected_to_fit, strict=True)
        if r.group.arm.algorithm != algorithm and not r.primer
    ]
    if plan.primer is not None:
        primer = primer_run([r for r, _ in keep], plan.setting, plan.max_new_tokens)
        keep = ([(primer, plan.expected_to_fit[0])] if primer else []) + keep
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
