"""Turn the runner's records into the bench report: per-cell metrics, speedups, the fastest
mode per column, the recommended schedule, and the verdicts of `correctness`.

Inputs are the records (`records.read_records`), the sweep plan, and the offline reference
decoder's JSON per algorithm; the output is the report dict (`analyse`) that `markdown` and
`plots` render. With `--repeats` N > 1 a cell's tok/s and wall ms/step are the medians over the
repeats it got, and every table, speedup, `fastest_modes` entry and plot uses them; its other
fields (acceptance, round split) are the median repeat's. A repeat that failed fails the cell;
one whose engine was compiling during the timed decode is left out (`bench.repeats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddtree_overlay.bench import decode_compare
from ddtree_overlay.bench.arms import (
    DDTREE,
    DFLASH,
    NEXTN,
    TARGET_ONLY,
    BudgetPolicy,
)
from ddtree_overlay.bench.attention import planned_backend, ran_backend
from ddtree_overlay.bench.correctness import judge, judged_lossy
from ddtree_overlay.bench.engine_paths import ran_paths
from ddtree_overlay.bench.plan import PRIMER, Cell, EngineGroup, SweepPlan
from ddtree_overlay.bench.records import Records, planned_repeats, repeat_label
from ddtree_overlay.bench.repeats import combine_repeats, compiling_notes, repeat_rates
from ddtree_overlay.bench.round_split import profile_split
from ddtree_overlay.bench.steady import steady_state

REPORT_VERSION = 1
REPEAT_SPREAD = 1.10  # a cell whose repeats' tok/s differ by more gets a note
# An engine run's record as the engines table shows it; requests_at_once: SGLang's cap (`bench.capacity`);
# warm_up_s: the untimed waves after the start (first-use compiles land there)
RUN_FIELDS = ("start_s", "warm_up_s", "requests_at_once", "health")
PROFILE_HINT = (
    "no DDTREE profile windows were recorded: is ddtree_profile wired into the worker's "
    "_tree_round (SGLANG_DDTREE_PROFILE)?"
)


def _schedule_text(schedule: Sequence[tuple[int, int]]) -> str:
    return BudgetPolicy(schedule=tuple(schedule)).schedule_text if schedule else ""


def _status(record: Mapping[str, Any] | None) -> tuple[str, str | None]:
    if record is None:
        return "not run", None
    if record.get("ok"):
        return "ok", None
    if record.get("skipped"):
        return "skipped", record["skipped"]
    return "failed", record.get("error")


def _waves(items: Sequence[Any], batch_size: int) -> list[Sequence[Any]]:
    return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]


def _histogram(metas: Iterable[Mapping[str, Any]]) -> list[int] | None:
    """Counts of rounds with accept length 1, 2, ... (SGLang counts correct drafts: +1)."""
    total: list[int] = []
    for meta in metas:
        for i, count in enumerate(meta.get("spec_correct_drafts_histogram") or ()):
            total.extend([0] * (i + 1 - len(total)))
            total[i] += int(count)
    return total or None


def request_step_ms(row: Mapping[str, Any], *, at_cap: bool = False) -> float:
    """A cell's wall ms per step per request running in a step: an engine that serves fewer
    requests at once than the batch (SGLang's cap) runs its wave in narrower steps, so its
    queued requests' steps run fewer than its cap.

    ``at_cap``: per request its cap lets run instead, as if those narrower steps had cost what
    full ones do (the weights' read, not the batch, sets a step's time at small batches). A
    capped engine's cost per request serving a stream at its cap lies between the two."""
    served = row.get("at_once") if at_cap else row.get("running")
    return row["step_ms"] / (served or row["batch_size"])  # reports before 2026-12-04: bs


def step_ratio(row: Mapping[str, Any], baseline: Mapping[str, Any], *, at_cap: bool = False) -> float:
    """``row``'s `request_step_ms` over ``baseline``'s; ``at_cap`` is the end of a capped
    engine's range least favourable to the other engine."""
    return request_step_ms(row, at_cap=at_cap) / request_step_ms(baseline, at_cap=at_cap)


def capped(*rows: Mapping[str, Any]) -> bool:
    """Whether any of these cells ran fewer requests at once than its batch."""
    return any((r.get("at_once") or r["batch_size"]) < r["batch_size"] for r in rows)


def _steps(record: Mapping[str, Any], algorithm: str, at_once: int | None = None) -> tuple[int, float]:
    """Batch-level decode steps (per wave, the longest request's rounds, or tokens) and the mean
    requests running per step. An engine that runs fewer requests at once than the wave holds
    (SGLang's cap, ``at_once``) admits them in order and starts the rest as slots free: counted
    as sub-waves of ``at_once``, exact when the requests are equally long (``ignore_eos``)."""
    key = "completion_tokens" if algorithm == TARGET_ONLY else "spec_verify_ct"
    batch = int(record["batch_size"])
    width = min(batch, int(at_once)) if at_once else batch
    running = [
        (len(sub), max(int(m.get(key) or 0) for m in sub))
        for wave in _waves(record["meta"], batch)
        for sub in _waves(wave, width)
    ]
    steps = sum(n for _, n in running)
    return steps, sum(size * n for size, n in running) / steps if steps else 0.0


def cell_metrics(
    cell: Cell,
    group: EngineGroup,
    record: Mapping[str, Any] | None,
    engine: Mapping[str, Any] | None,
) -> dict[str, Any]:
    status, reason = _status(record)
    row: dict[str, Any] = {
        "name": cell.name,
        "group": group.name,
        **group.arm.row(),
        "batch_size": cell.batch_size,
        "temperature": cell.temperature,
        "prompts": cell.prompts,
        "status": status,
        "reason": reason,
    }
    if status != "ok" or record is None:
        return row
    row.update(
        prompts=len(record.get("outputs") or ()) or cell.prompts,  # what it decoded (older plans differ)
        tok_per_s=record.get("tok_per_s"),
        decode_s=record.get("decode_s"),
        tokens=record.get("tokens"),
        host=record.get("host"),
    )
    at_once = (engine or {}).get("requests_at_once")
    row["steps"], row["running"] = _steps(record, group.arm.algorithm, at_once)
    row["at_once"] = min(cell.batch_size, int(at_once)) if at_once else cell.batch_size
    row["step_ms"] = 1000 * record["decode_s"] / row["steps"] if row["steps"] else None
    if group.arm.algorithm != TARGET_ONLY:
        summary = decode_compare.acceptance_summary(record)
        completion = sum(int(m.get("completion_tokens") or 0) for m in record["meta"])
        row.update(
            acceptance_length=summary["mean_acceptance_length"],
            tokens_per_round=completion / summary["rounds"] if summary["rounds"] else None,
            rounds=summary["rounds"],
            acceptance_histogram=_histogram(record["meta"]),
        )
    if group.arm.algorithm == DDTREE and engine is not None:
        row["profile"] = profile_split(engine.get("profile") or (), record["t_start"], record["t_end"])
    return row


def _speedups(rows: list[dict[str, Any]]) -> None:
    def base(algorithm: str, overlap: bool = True) -> dict[tuple[int, float], float]:
        return {
            (r["batch_size"], r["temperature"]): r["tok_per_s"]
            for r in rows
            if r["algorithm"] == algorithm and r["overlap"] == overlap and not r.get("backend") and r.get("tok_per_s")
        }  # on the first baseline backend: the others' arms are compared in fastest_modes

    target, dflash = base(TARGET_ONLY), base(DFLASH)
    for row in rows:
        key = (row["batch_size"], row["temperature"])
        if not row.get("tok_per_s") or row["algorithm"] == TARGET_ONLY:
            continue
        row["speedup_vs_target"] = row["tok_per_s"] / target[key] if key in target else None
        if row["algorithm"] == DDTREE or not row["overlap"] or row.get("backend"):
            row["speedup_vs_dflash"] = row["tok_per_s"] / dflash[key] if key in dflash else None


def fastest_modes(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (T, bs): DFLASH in its faster scheduling mode, DDTREE at every budget (and with
    adaptive budgets) in its faster mode against it, and the fastest DDTREE arm; with repeats,
    also its worst case (``worst_case``: that arm's slowest repeat against the fastest repeat of
    either DFLASH mode). Columns lacking either algorithm are left out; a tie goes to overlap
    scheduling (the default)."""

    def fastest(candidates: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        return max(candidates, key=lambda r: r["tok_per_s"], default=None)

    ok = [r for r in rows if r["status"] == "ok" and r.get("tok_per_s")]
    columns = []
    for key in sorted({(r["temperature"], r["batch_size"]) for r in ok}):
        here = [r for r in ok if (r["temperature"], r["batch_size"]) == key]
        dflash = fastest(r for r in here if r["algorithm"] == DFLASH)
        ddtree = [r for r in here if r["algorithm"] == DDTREE and not r.get("chain")]  # a control, not a budget
        if dflash is None or not ddtree:
            continue
        budgets, arm_rows = [], []
        for arm in sorted({BudgetPolicy.of_row(r).sort_key for r in ddtree}):
            row = fastest(r for r in ddtree if BudgetPolicy.of_row(r).sort_key == arm)
            assert row is not None
            arm_rows.append(row)
            speedup = row["tok_per_s"] / dflash["tok_per_s"]
            entry = {
                "group": row["group"],
                "budget": row["budget"],
                "adaptive": list(row.get("adaptive") or ()),
                "schedule": row.get("schedule") or "",
                "overlap": row["overlap"],
                "tok_per_s": row["tok_per_s"],
                "speedup_vs_dflash": speedup,
            }
            if row.get("tokens_per_round") and dflash.get("tokens_per_round"):
                # The speedup the acceptance alone would give; what the speedup falls short of it
                # is per-round overhead.
                ratio = row["tokens_per_round"] / dflash["tokens_per_round"]
                entry |= {"acceptance_ratio": ratio, "speedup_per_acceptance": speedup / ratio}
                if row.get("step_ms") and dflash.get("step_ms"):
                    # What continuous batching sees: tokens per round over the round's cost. tok/s
                    # counts fixed waves, each as long as its slowest request, which favours the
                    # algorithm whose requests finish closer together.
                    steps = step_ratio(row, dflash)
                    entry |= {"step_ratio": steps, "per_round_speedup": ratio / steps}
                    if capped(row, dflash):
                        at_cap = step_ratio(row, dflash, at_cap=True)
                        entry |= {"step_ratio_at_cap": at_cap, "per_round_speedup_at_cap": ratio / at_cap}
            budgets.append(entry)
        best = max(range(len(budgets)), key=lambda i: budgets[i]["tok_per_s"])
        column = {
            "temperature": key[0],
            "batch_size": key[1],
            "dflash": {"group": dflash["group"], "overlap": dflash["overlap"], "tok_per_s": dflash["tok_per_s"],
                       "step_ms": dflash.get("step_ms"), **({"backend": dflash["backend"]} if dflash.get("backend") else {})},
            "budgets": budgets,
            "best": budgets[best],
        }
        worst = _worst_case(arm_rows[best], [r for r in here if r["algorithm"] == DFLASH])
        columns.append(column | ({"worst_case": worst} if worst else {}))
    return columns


def _worst_case(ddtree: Mapping[str, Any], dflash: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """The DDTREE cell's slowest repeat against the fastest repeat of any DFLASH cell; None
    when no cell has two repeats (the median ratio says it all then)."""
    ours, theirs = repeat_rates(ddtree), [rate for row in dflash for rate in repeat_rates(row)]
    if not ours or not theirs or max(r["measured_repeats"] for r in (ddtree, *dflash)) < 2:
        return None
    return {"ddtree_tok_per_s": min(ours), "dflash_tok_per_s": max(theirs), "speedup_vs_dflash": min(ours) / max(theirs)}


def recommended_schedule(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The fastest fixed budget at each measured batch size (T = 0), as a value for SGLang's
    ``--speculative-ddtree-budget-schedule``: batch sizes between two measured ones take the
    smaller one's budget. ``below_dflash`` lists the batch sizes where even that budget loses
    to DFLASH's faster mode. Cells judged lossy take no part, as in `bench.recommend`."""
    columns = fastest_modes([r for r in rows if not judged_lossy(r)])
    greedy = sorted((c for c in columns if c["temperature"] == 0), key=lambda c: c["batch_size"])
    fixed = [[e for e in c["budgets"] if BudgetPolicy.of_row(e).budget is not None] for c in greedy]
    if not greedy or not all(fixed):
        return None
    best = [max(entries, key=lambda e: e["tok_per_s"]) for entries in fixed]
    steps: list[tuple[int, int]] = []
    for column, entry in zip(greedy, best, strict=True):
        if not steps or steps[-1][1] != entry["budget"]:
            steps.append((column["batch_size"] if steps else 1, entry["budget"]))
    return {
        "schedule": ",".join(f"{bs}:{budget}" for bs, budget in steps),
        "measured_batch_sizes": [c["batch_size"] for c in greedy],
        "below_dflash": [c["batch_size"] for c, e in zip(greedy, best, strict=True) if e["speedup_vs_dflash"] < 1.0],
    }


def _paths(engine: Mapping[str, Any] | None) -> dict[str, str] | None:
    return ran_paths((engine or {}).get("profile") or ())


def _group_row(group: EngineGroup, engines: Mapping[int, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The group's status over its engine runs (repeat -> record): failed if any failed, ok if
    any ran; the fields shown are that run's, ``repeats`` lists every run."""
    runs = [(repeat, engine, *_status(engine)) for repeat, engine in engines.items()]
    rank = {"failed": 0, "ok": 1, "skipped": 2, "not run": 3}
    repeat, engine, status, reason = min(runs, key=lambda run: rank[run[2]])  # the first of the rank
    if status == "failed" and len(runs) > 1:
        reason = f"repeat {repeat}: {reason}"
    planned = planned_backend(group.engine)
    return {
        "name": group.name,
        **group.arm.row(),
        "engine": dict(group.engine),
        "attention_backend": ran_backend(planned, engines.values()),
        "status": status,
        "reason": reason,
        **{key: (engine or {}).get(key) for key in RUN_FIELDS},
        "paths": _paths(engine),
        "traceback": (engine or {}).get("traceback"),
        "widest_batch": max((c.batch_size for c in group.cells), default=None),  # against requests_at_once
        "repeats": [
            {"repeat": k, "status": st, "reason": why, **{key: (e or {}).get(key) for key in RUN_FIELDS},
             "attention_backend": ran_backend(planned, [e]), "paths": _paths(e)}
            for k, e, st, why in runs
        ],
    }


def primer_row(plan: SweepPlan, engines: Records) -> dict[str, Any] | None:
    """The untimed primer engine's outcome (None when the plan has none): shown in the engines
    table, read by nothing else."""
    if plan.primer is None:
        return None
    engine = engines.get((PRIMER, 1))
    status, reason = _status(engine)
    return {
        "name": PRIMER,
        "group": plan.primer.group.name,
        "status": status,
        "reason": reason,
        **{key: (engine or {}).get(key) for key in RUN_FIELDS},
        "attention_backend": ran_backend(planned_backend(plan.primer.group.engine), [engine]),
        "paths": _paths(engine),
    }


def primer_note(primer: Mapping[str, Any]) -> str:
    """One line: that the primer ran (or why not), and why it is there."""
    why = (
        "on a fresh machine the first DDTREE engine of a command ran 2.0-2.7x slower per step than later "
        "ones (H200, 2026-12-02; docs/bench.md#the-primer-engine)"
    )
    if primer["status"] in ("skipped", "not run"):
        return f"the untimed primer engine ({primer['group']}'s config) did not run ({primer['reason'] or primer['status']}): {why}"
    if primer["status"] == "ok":
        outcome = f"started in {primer['start_s']:.0f} s" if primer.get("start_s") is not None else "ok"
    else:
        outcome = f"failed: {primer['reason']}"
    return (
        f"an untimed primer engine ({primer['group']}'s config, {outcome}) ran before the timed ones, its "
        f"records tagged `primer` and in no table: {why}"
    )


def engine_notes(plan: SweepPlan, primer: Mapping[str, Any] | None) -> list[str]:
    """What the report says about engines that did not run as plain timed ones: the primer's
    outcome, and NEXTN's scheduling where stock SGLang crashes with overlap."""
    notes = [primer_note(primer)] if primer else []
    first = plan.config.baseline_backends[0]
    for backend, reason in plan.setting.nextn_without_overlap.items():
        if any(g.arm.algorithm == NEXTN and (g.arm.backend or first) == backend for g in plan.groups):
            notes.append(
                f"NEXTN on {backend} ran without overlap scheduling: {reason} "
                "(docs/bench.md#nextn-on-a-hybrid-target)"
            )
    return notes


def analyse(
    plan: SweepPlan,
    records: Records,
    engines: Records,
    *,
    references: Mapping[str, Mapping[str, Any]] | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report from the records (`read_records`: by (name, repeat)) of every planned run."""
    rows, groups, issues, notes = [], [], [], []
    repeats = plan.config.repeats
    planned = planned_repeats(plan)
    for group in plan.groups:
        group_engines = {k: engines.get((group.name, k)) for k in planned.get(group.name, ())}
        groups.append(_group_row(group, group_engines))
        for repeat, engine in group_engines.items():
            status, reason = _status(engine)
            if status == "failed":
                issues.append(f"{repeat_label(group.name, repeat, repeats)}: the engine failed: {reason}")
        for cell in (c for c in group.cells if not c.stream):  # the streams: `steady`
            per_repeat = []
            for repeat in planned.get(cell.name, ()):
                row = cell_metrics(cell, group, records.get((cell.name, repeat)), group_engines.get(repeat))
                if row["status"] == "failed":
                    issues.append(f"{repeat_label(cell.name, repeat, repeats)}: {row['reason']}")
                per_repeat.append(row | {"repeat": repeat})
            if not cell.top2 and per_repeat:
                rows.append(combine_repeats(per_repeat))
    _speedups(rows)
    parity, correctness_issues = judge(plan, records, rows, references)
    issues += correctness_issues
    skipped = [r["name"] for r in rows if r["status"] in ("skipped", "not run")]
    if skipped:
        notes.append(
            f"{len(skipped)} cell(s) not measured (time box, or their engine failed): {', '.join(skipped)}"
        )
    short = [
        f"{r['name']} ({r['measured_repeats']} of {len(planned[r['name']])})"
        for r in rows
        if r["measured_repeats"] and r["measured_repeats"] + r["compiling_repeats"] < len(planned.get(r["name"], ()))
    ]
    if short:
        notes.append(
            f"{len(short)} cell(s) measured in fewer than their planned repeats (time box, or an "
            f"engine failed); repeats measured: {', '.join(short)}"
        )
    spread = [
        f"{r['name']} ({max(rates) / min(rates):.2f}x)"
        for r in rows
        if len(rates := repeat_rates(r)) > 1 and max(rates) > REPEAT_SPREAD * min(rates)
    ]
    if spread:
        notes.append(
            f"the repeats of {len(spread)} cell(s) differ by more than {REPEAT_SPREAD - 1:.0%} in tok/s "
            f"(engine-to-engine spread: quote the worst case): {', '.join(spread)}"
        )
    notes += compiling_notes(rows, repeats)
    primer = primer_row(plan, engines)
    notes += engine_notes(plan, primer)
    ddtree_ok = [r for r in rows if r["algorithm"] == DDTREE and r["status"] == "ok"]
    if ddtree_ok and not any(r.get("profile") for r in ddtree_ok):
        notes.append(PROFILE_HINT)
    if not plan.setting.real_weights:
        notes.append(plan.setting.note)
    fastest = fastest_modes(rows)
    steady = steady_state(plan, records, engines)
    if steady:
        issues += steady["issues"]
        notes += steady["notes"]
    return {
        "bench_report_version": REPORT_VERSION,
        "setting": {
            "name": plan.setting.name,
            "target": str(plan.setting.target),
            "draft": str(plan.setting.draft),
            "real_weights": plan.setting.real_weights,
            "nextn": plan.setting.nextn,
            "nextn_without_overlap": dict(plan.setting.nextn_without_overlap),
            "hybrid": plan.setting.hybrid,
            "note": plan.setting.note,
        },
        "config": {
            "budgets": list(plan.config.budgets),
            "batch_sizes": list(plan.config.batch_sizes),
            "temperatures": list(plan.config.temperatures),
            "attention_backend": plan.config.attention_backend,
            "baseline_attention_backend": plan.config.baseline_attention_backend,
            "tp_size": plan.config.tp_size,
            "max_new_tokens": plan.max_new_tokens,
            "prompts_per_cell": max((c.prompts for c in plan.cells), default=0),
            "max_minutes": plan.config.max_minutes,
            "ddtree_no_overlap": plan.config.ddtree_no_overlap,
            "adaptive_budgets": list(plan.config.adaptive_budgets),
            "budget_schedule": _schedule_text(plan.config.budget_schedule),
            "repeats": repeats,
            "engine_order": plan.config.engine_order,
            "order_seed": plan.config.order_seed,
            "concurrencies": list(plan.config.concurrencies),
            "warmup_s": plan.config.warmup_s,
            "window_s": plan.config.window_s,
            "chain_control": plan.config.chain_control,
            "prompt_tokens": plan.config.prompt_tokens,
            "prompt_lengths": sorted({len(p) for p in plan.setting.prompts}),
            "primer": plan.config.primer,
            "only": list(plan.config.only),
            "hybrid_state": plan.config.hybrid_state,
            "sglang_env": dict(plan.config.sglang_env),
        },
        "context": dict(context or {}),
        "primer": primer,
        "groups": groups,
        "cells": rows,
        "fastest_modes": fastest,
        # random weights accept nothing, so their fastest budget says nothing about a real pair's
        "recommended_schedule": recommended_schedule(rows) if plan.setting.real_weights else None,
        "steady": steady,
        "parity": parity,
        "issues": issues,
        "notes": notes,
    }
