"""Turn the runner's records into the bench report: per-cell metrics, correctness, files.

Inputs are the JSON lines `in_target/engine_runner.py` writes (``kind`` "cell" and "engine"), the
sweep plan, and the offline reference decoder's JSON per algorithm. Outputs: the report dict
(`analyse`), its markdown (`markdown_report`) and PNG plots (`write_plots`, needs matplotlib).

Records are keyed by (name, repeat). With `--repeats` N > 1 a cell's tok/s and wall ms/step are
the medians over the repeats it got, and every table, speedup, `fastest_modes` entry and plot
uses them; its other fields (acceptance, round split) are the median repeat's. Correctness looks
at every repeat: a repeat that failed fails the cell, greedy outputs of every repeat are judged,
and parity is checked on every repeat, showing the one furthest from the reference.
"""

from __future__ import annotations

import json
import lzma
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree_overlay.bench import decode_compare
from ddtree_overlay.bench.arms import DDTREE, DFLASH, TARGET_ONLY, Arm, BudgetPolicy, policy_label
from ddtree_overlay.bench.plan import Cell, EngineGroup, SweepPlan, capture_batch_sizes

REPORT_VERSION = 1
# Stages of a DDTREE round, as ddtree_profile records them; "other" is the rest of the round.
STAGES = ("draft", "topk", "tree", "verify", "accept", "commit")
# SGLang (bf16) against the fp32 offline reference on the same prompts: tokens per round may
# differ by bf16 near-ties that change a sequence; a gross bug (a wrong tree, a broken commit)
# moves it far more than this.
PARITY_TOLERANCE = 0.10
PER_PROMPT_TOLERANCE = 0.03  # issue 4's per-prompt bar, reported (not gated) per prompt
DASH = "\u2013"  # an empty table cell, as in docs/BENCHMARKS.md
REPEAT_SPREAD = 1.10  # a cell whose repeats' tok/s differ by more gets a note
PROFILE_HINT = (
    "no DDTREE profile windows were recorded: is ddtree_profile wired into the worker's "
    "_tree_round (SGLANG_DDTREE_PROFILE)?"
)


RecordKey = tuple[str, int]  # (cell or group name, repeat), repeats counted from 1
Records = Mapping[RecordKey, Mapping[str, Any]]


def read_records(path: Path) -> tuple[dict[RecordKey, dict[str, Any]], dict[RecordKey, dict[str, Any]]]:
    """(cells, engines), each by (name, repeat); the last line for a key wins. Records written
    before `--repeats` carry no repeat: they are repeat 1."""
    cells: dict[RecordKey, dict[str, Any]] = {}
    engines: dict[RecordKey, dict[str, Any]] = {}
    packed = path.with_name(path.name + ".xz")  # how docs/bench keeps finished runs' records
    if path.exists():
        text = path.read_text()
    elif packed.exists():
        text = lzma.decompress(packed.read_bytes()).decode()
    else:
        return cells, engines
    for line in text.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        key = (record["arm"], int(record.get("repeat", 1)))
        (engines if record.get("kind") == "engine" else cells)[key] = record
    return cells, engines


def _schedule_text(schedule: Sequence[tuple[int, int]]) -> str:
    return BudgetPolicy(schedule=tuple(schedule)).schedule_text if schedule else ""


def repeat_label(name: str, repeat: int, repeats: int) -> str:
    """``name``, with its repeat when the sweep has several."""
    return name if repeats == 1 else f"{name} (repeat {repeat})"


def planned_repeats(plan: SweepPlan) -> dict[str, list[int]]:
    """Cell and group name -> the repeats it runs in, in order."""
    planned: dict[str, list[int]] = {}
    for run in sorted(plan.runs, key=lambda r: r.repeat):
        planned.setdefault(run.group.name, []).append(run.repeat)
        for cell in run.cells:
            planned.setdefault(cell.name, []).append(run.repeat)
    return planned


# --- per cell -------------------------------------------------------------------------------


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


def _steps(record: Mapping[str, Any], algorithm: str) -> int:
    """Batch-level decode steps: per wave, the longest request's rounds (or tokens)."""
    key = "completion_tokens" if algorithm == TARGET_ONLY else "spec_verify_ct"
    waves = _waves(record["meta"], int(record["batch_size"]))
    return sum(max(int(m.get(key) or 0) for m in wave) for wave in waves)


def profile_split(windows: Iterable[Mapping[str, Any]], t_start: float, t_end: float) -> dict[str, Any] | None:
    """Mean GPU ms per round of every stage, and the host ms spent in the stages (profiles that
    record it), from the profile windows inside [t_start, t_end]."""
    inside = [
        w
        for w in windows
        if w.get("t_first") is not None and t_start <= w["t_first"] and w["t_last"] <= t_end
    ]
    rounds = sum(int(w["rounds"]) for w in inside)
    if not rounds:
        return None
    ms_sum: dict[str, float] = {}
    for window in inside:
        for stage, ms in window["ms_sum"].items():
            ms_sum[stage] = ms_sum.get(stage, 0.0) + float(ms)
    ms = {stage: total / rounds for stage, total in ms_sum.items()}
    ms["other"] = ms.get("round", 0.0) - sum(ms.get(stage, 0.0) for stage in STAGES)
    budgets: dict[str, int] = {}  # rounds per budget: several with adaptive budgets
    for window in inside:
        for budget, count in (window.get("budgets") or {}).items():
            budgets[budget] = budgets.get(budget, 0) + int(count)
    with_host = [w for w in inside if "host_ms_sum" in w]  # older profiles lack it
    policy = [w["adaptive"] for w in inside if w.get("adaptive")]
    host_rounds = sum(int(w["rounds"]) for w in with_host)
    host_ms = sum(float(ms) for w in with_host for ms in w["host_ms_sum"].values())
    return {
        "rounds": rounds,
        "mean_batch": sum(int(w["requests"]) for w in inside) / rounds,
        "cuda_graph_fraction": sum(int(w.get("cuda_graph_rounds") or 0) for w in inside) / rounds,
        "ms_per_round": {k: round(v, 4) for k, v in ms.items()},
        "host_ms_per_round": round(host_ms / host_rounds, 4) if host_rounds else None,
        "budgets": dict(sorted(budgets.items(), key=lambda item: int(item[0]))),
        "adaptive": policy[-1] if policy else None,  # the policy's view at the cell's end
    }


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
        tok_per_s=record.get("tok_per_s"),
        decode_s=record.get("decode_s"),
        tokens=record.get("tokens"),
        steps=_steps(record, group.arm.algorithm),
        host=record.get("host"),
    )
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


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def combine_repeats(repeats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One cell's row from its `cell_metrics` row per repeat (each with its ``repeat``).

    A repeat that failed fails the cell. Otherwise the row is the median repeat's (by tok/s; of
    two middle ones the slower), with tok_per_s and step_ms the medians over every repeat
    measured; ``repeats`` lists each repeat's outcome and values, ``measured_repeats`` counts
    those that ran.
    """
    ok = [r for r in repeats if r["status"] == "ok"]
    failed = [r for r in repeats if r["status"] == "failed"]
    if failed:
        row = dict(failed[0])
        if len(repeats) > 1:
            row["reason"] = f"repeat {row['repeat']}: {row['reason']}"
    elif ok:
        timed = sorted((r for r in ok if r.get("tok_per_s") is not None), key=lambda r: r["tok_per_s"])
        row = dict(timed[(len(timed) - 1) // 2] if timed else ok[0])
        row["median_repeat"] = row["repeat"]
        row["tok_per_s"] = _median(r.get("tok_per_s") for r in ok)
        row["step_ms"] = _median(r.get("step_ms") for r in ok)
    else:
        row = dict(next((r for r in repeats if r["status"] == "skipped"), repeats[0]))
    del row["repeat"]
    row["repeats"] = [
        {key: r.get(key) for key in ("repeat", "status", "reason", "tok_per_s", "step_ms", "host")}
        for r in repeats
    ]
    row["measured_repeats"] = len(ok)
    return row


# --- correctness ----------------------------------------------------------------------------


def lossless_summary(reference: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    report = decode_compare.lossless_report(reference, record)
    divergences = report["divergences"]
    worst = None
    if divergences:
        unexplained = [d for d in divergences if not d["explained"]]
        pool = unexplained or divergences
        worst = max(pool, key=lambda d: -1.0 if d["margin"] is None else d["margin"])
    return {
        "reference": report["reference"],
        "identical": report["identical"],
        "prompts": report["prompts"],
        "unexplained": report["unexplained"],
        "first_divergence": min(divergences, key=lambda d: d["index"]) if divergences else None,
        "worst_divergence": worst,
        "margin_noise": report["margin_noise"],
        "passed": report["passed"],
    }


def _lossless_reference(records: Records, plan: SweepPlan, batch_size: int) -> dict[str, Any] | None:
    """Target-only greedy outputs to judge against, with their top1-top2 gaps when known, from
    the first repeat that has them: every repeat of every cell is judged against the same run.

    The margins cell's outputs come first: its gaps hold along its own trajectory only, and
    target-only at another batch size can leave that trajectory at an exact tie, after which
    its gaps would judge the wrong tokens. Without margins: target-only at this batch size.
    """
    target = next((g for g in plan.groups if g.arm.algorithm == TARGET_ONLY), None)
    if target is None:
        return None
    repeats = range(1, plan.config.repeats + 1)
    margins_cell = next((c for c in target.cells if c.top2), None)
    for repeat in repeats if margins_cell else ():
        margins = records.get((margins_cell.name, repeat))
        if margins and margins.get("ok") and margins.get("top2_margins"):
            return {"arm": margins["arm"], "repeat": repeat, "outputs": margins["outputs"],
                    "top2_margins": margins["top2_margins"]}
    same_bs = next(
        (c for c in target.cells if not c.top2 and c.temperature == 0 and c.batch_size == batch_size), None
    )
    for repeat in repeats if same_bs else ():
        record = records.get((same_bs.name, repeat))
        if record and record.get("ok"):
            return {"arm": record["arm"], "repeat": repeat, "outputs": record["outputs"], "top2_margins": None}
    return None


def parity_row(
    group: EngineGroup,
    record: Mapping[str, Any],
    reference: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """SGLang tokens per round against the offline reference's, on the same prompts (T = 0).

    The gate is the aggregate ratio; per prompt, the count within `PER_PROMPT_TOLERANCE` is
    reported over all prompts and over those whose output equals the reference's token for
    token (there the two decoders walked the same sequence, so only the drafts can differ).
    """
    arm = group.arm.row()
    row: dict[str, Any] = {"group": group.name, "algorithm": arm["algorithm"], "budget": arm["budget"]}
    if reference is None or "aggregate" not in reference:
        row.update(status="missing", reason=(reference or {}).get("error", "the reference did not run"))
        return row
    metas = record["meta"]
    rounds = sum(int(m.get("spec_verify_ct") or 0) for m in metas)
    ours = sum(int(m.get("completion_tokens") or 0) for m in metas) / rounds if rounds else None
    ref_rows = reference.get("prompts") or []
    theirs = _reference_tokens_per_round(ref_rows[: len(metas)]) or reference["aggregate"].get("tokens_per_round")
    rel, rel_same = [], []
    for i, (out, meta) in enumerate(zip(record["outputs"], metas, strict=True)):
        if i >= len(ref_rows) or not meta.get("spec_verify_ct") or not ref_rows[i].get("tokens_per_round"):
            continue
        diff = abs(int(meta["completion_tokens"]) / int(meta["spec_verify_ct"]) / ref_rows[i]["tokens_per_round"] - 1)
        rel.append(diff)
        if list(ref_rows[i].get("tokens") or ()) == list(out):
            rel_same.append(diff)
    ratio = ours / theirs if ours and theirs else None
    row.update(
        status="ok" if ratio is not None and abs(ratio - 1) <= PARITY_TOLERANCE else "off",
        cell=record["arm"],
        sglang_tokens_per_round=ours,
        reference_tokens_per_round=theirs,
        reference_acceptance_length=reference["aggregate"].get("accept_len_mean"),
        ratio=ratio,
        tolerance=PARITY_TOLERANCE,
        per_prompt_within=f"{sum(d <= PER_PROMPT_TOLERANCE for d in rel)}/{len(rel)}",
        same_sequence_prompts=f"{len(rel_same)}/{len(record['outputs'])}",
        same_sequence_within=f"{sum(d <= PER_PROMPT_TOLERANCE for d in rel_same)}/{len(rel_same)}",
        same_sequence_max_rel_diff=max(rel_same) if rel_same else None,
    )
    return row


def _reference_tokens_per_round(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Generated tokens / rounds over these reference prompts (the cell's own prompts)."""
    if not rows or any(r.get("rounds") is None or r.get("new_tokens") is None for r in rows):
        return None
    rounds = sum(int(r["rounds"]) for r in rows)
    return sum(int(r["new_tokens"]) for r in rows) / rounds if rounds else None


# --- the report -----------------------------------------------------------------------------


def _speedups(rows: list[dict[str, Any]]) -> None:
    def base(algorithm: str, overlap: bool = True) -> dict[tuple[int, float], float]:
        return {
            (r["batch_size"], r["temperature"]): r["tok_per_s"]
            for r in rows
            if r["algorithm"] == algorithm and r["overlap"] == overlap and r.get("tok_per_s")
        }

    target, dflash = base(TARGET_ONLY), base(DFLASH)
    for row in rows:
        key = (row["batch_size"], row["temperature"])
        if not row.get("tok_per_s") or row["algorithm"] == TARGET_ONLY:
            continue
        row["speedup_vs_target"] = row["tok_per_s"] / target[key] if key in target else None
        if row["algorithm"] == DDTREE or not row["overlap"]:
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
        ddtree = [r for r in here if r["algorithm"] == DDTREE]
        if dflash is None or not ddtree:
            continue
        budgets, arm_rows = [], []
        for arm in sorted({_sort_key(r) for r in ddtree}):
            row = fastest(r for r in ddtree if _sort_key(r) == arm)
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
            budgets.append(entry)
        best = max(range(len(budgets)), key=lambda i: budgets[i]["tok_per_s"])
        column = {
            "temperature": key[0],
            "batch_size": key[1],
            "dflash": {"group": dflash["group"], "overlap": dflash["overlap"], "tok_per_s": dflash["tok_per_s"]},
            "budgets": budgets,
            "best": budgets[best],
        }
        worst = _worst_case(arm_rows[best], [r for r in here if r["algorithm"] == DFLASH])
        columns.append(column | ({"worst_case": worst} if worst else {}))
    return columns


def repeat_rates(row: Mapping[str, Any]) -> list[float]:
    """A cell's tok/s in each repeat that measured it."""
    return [e["tok_per_s"] for e in row.get("repeats") or () if e.get("status") == "ok" and e.get("tok_per_s")]


def _worst_case(ddtree: Mapping[str, Any], dflash: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """The DDTREE cell's slowest repeat against the fastest repeat of any DFLASH cell; None
    when no cell has two repeats (the median ratio says it all then)."""
    ours, theirs = repeat_rates(ddtree), [rate for row in dflash for rate in repeat_rates(row)]
    if not ours or not theirs or max(r["measured_repeats"] for r in (ddtree, *dflash)) < 2:
        return None
    return {"ddtree_tok_per_s": min(ours), "dflash_tok_per_s": max(theirs), "speedup_vs_dflash": min(ours) / max(theirs)}


def _sort_key(row: Mapping[str, Any]) -> tuple[int, ...]:
    """A DDTREE row's (or `fastest_modes` entry's) `BudgetPolicy.sort_key`."""
    return BudgetPolicy.of_row(row).sort_key


def recommended_schedule(columns: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The fastest fixed budget at each measured batch size (T = 0), as a value for SGLang's
    ``--speculative-ddtree-budget-schedule``: batch sizes between two measured ones take the
    smaller one's budget. ``below_dflash`` lists the batch sizes where even that budget loses
    to DFLASH's faster mode."""
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


def _group_row(group: EngineGroup, engines: Mapping[int, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The group's status over its engine runs (repeat -> record): failed if any failed, ok if
    any ran; the fields shown are that run's, ``repeats`` lists every run."""
    runs = [(repeat, engine, *_status(engine)) for repeat, engine in engines.items()]
    rank = {"failed": 0, "ok": 1, "skipped": 2, "not run": 3}
    repeat, engine, status, reason = min(runs, key=lambda run: rank[run[2]])  # the first of the rank
    if status == "failed" and len(runs) > 1:
        reason = f"repeat {repeat}: {reason}"
    return {
        "name": group.name,
        **group.arm.row(),
        "engine": dict(group.engine),
        "status": status,
        "reason": reason,
        "start_s": (engine or {}).get("start_s"),
        "health": (engine or {}).get("health"),
        "traceback": (engine or {}).get("traceback"),
        "repeats": [
            {"repeat": k, "status": st, "reason": why, "start_s": (e or {}).get("start_s"), "health": (e or {}).get("health")}
            for k, e, st, why in runs
        ],
    }


def _judge_lossless(
    plan: SweepPlan, records: Records, cell: Cell, row: dict[str, Any]
) -> list[tuple[int, dict[str, Any]]]:
    """Every measured repeat of a greedy cell against target-only: (repeat, summary) per repeat
    judged. ``row["lossless"]`` is the first failing repeat's summary, else the first's."""
    reference = _lossless_reference(records, plan, cell.batch_size)
    judged = []
    for entry in row["repeats"]:
        record = records.get((cell.name, entry["repeat"]))
        if entry["status"] != "ok" or record is None or reference is None:
            continue
        if (reference["arm"], reference["repeat"]) == (cell.name, entry["repeat"]):
            continue  # the reference itself
        summary = lossless_summary(reference, record) | {"repeat": entry["repeat"]}
        entry["lossless_passed"] = summary["passed"]
        judged.append((entry["repeat"], summary))
    if judged:
        row["lossless"] = next((s for _, s in judged if not s["passed"]), judged[0][1])
    return judged


def _parity_deviation(row: Mapping[str, Any]) -> float:
    if row["status"] == "missing":
        return 0.0
    return float("inf") if row.get("ratio") is None else abs(row["ratio"] - 1)


def _group_parity(
    group: EngineGroup, records: Records, planned: Mapping[str, Sequence[int]], reference: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Parity on the group's widest greedy cell that ran, checked on every repeat of it; the row
    shown is the repeat furthest from the reference (``ratios`` has each repeat's)."""
    t0 = sorted((c for c in group.cells if c.temperature == 0 and not c.top2), key=lambda c: -c.prompts)
    for cell in t0:
        measured = [
            (repeat, records[(cell.name, repeat)])
            for repeat in planned.get(cell.name, ())
            if records.get((cell.name, repeat), {}).get("ok")
        ]
        if measured:
            break
    else:
        return None
    rows = [parity_row(group, record, reference) | {"repeat": repeat} for repeat, record in measured]
    row = max(rows, key=_parity_deviation)  # of equals, the first
    row["ratios"] = [{"repeat": r["repeat"], "ratio": r.get("ratio")} for r in rows]
    return row


def _correctness(
    plan: SweepPlan,
    records: Records,
    rows: list[dict[str, Any]],
    references: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Lossless summaries go into the rows; returns (parity rows, issues). Every repeat counts."""
    issues: list[str] = []
    repeats = plan.config.repeats
    by_name = {row["name"]: row for row in rows}
    for group in plan.groups:
        for cell in group.cells:
            row = by_name.get(cell.name)
            if row is None or cell.temperature != 0:
                continue
            for repeat, lossless in _judge_lossless(plan, records, cell, row):
                if lossless["passed"] or not plan.setting.real_weights:
                    continue
                worst = lossless["worst_divergence"] or {}
                issues.append(
                    f"{repeat_label(cell.name, repeat, repeats)}: {lossless['unexplained']} of "
                    f"{lossless['prompts']} prompts leave target-only greedy output beyond bf16 noise "
                    f"(largest top1-top2 margin {worst.get('margin') or 0:.3f} at token {worst.get('index')})"
                )
    parity = []
    if plan.setting.reference_parity and references is not None:
        planned = planned_repeats(plan)
        for group in plan.groups:
            key = group.arm.reference_key
            row = None if key is None else _group_parity(group, records, planned, references.get(key))
            if row is None:
                continue
            parity.append(row)
            if row["status"] == "off":
                issues.append(
                    f"{repeat_label(group.name, row['repeat'], repeats)}: tokens per round "
                    f"{row['sglang_tokens_per_round']:.3f} against the offline reference's "
                    f"{row['reference_tokens_per_round']:.3f} "
                    f"(x{row['ratio']:.3f}, tolerance +-{PARITY_TOLERANCE:.0%})"
                )
            elif row["status"] == "missing":
                issues.append(f"{group.name}: no offline reference to compare with ({row['reason']})")
    return parity, issues


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
        for cell in group.cells:
            per_repeat = []
            for repeat in planned.get(cell.name, ()):
                row = cell_metrics(cell, group, records.get((cell.name, repeat)), group_engines.get(repeat))
                if row["status"] == "failed":
                    issues.append(f"{repeat_label(cell.name, repeat, repeats)}: {row['reason']}")
                per_repeat.append(row | {"repeat": repeat})
            if not cell.top2 and per_repeat:
                rows.append(combine_repeats(per_repeat))
    _speedups(rows)
    parity, correctness_issues = _correctness(plan, records, rows, references)
    issues += correctness_issues
    skipped = [r["name"] for r in rows if r["status"] in ("skipped", "not run")]
    if skipped:
        notes.append(
            f"{len(skipped)} cell(s) not measured (time box, or their engine failed): {', '.join(skipped)}"
        )
    short = [
        f"{r['name']} ({r['measured_repeats']} of {len(planned[r['name']])})"
        for r in rows
        if 0 < r["measured_repeats"] < len(planned.get(r["name"], ()))
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
    ddtree_ok = [r for r in rows if r["algorithm"] == DDTREE and r["status"] == "ok"]
    if ddtree_ok and not any(r.get("profile") for r in ddtree_ok):
        notes.append(PROFILE_HINT)
    if not plan.setting.real_weights:
        notes.append(plan.setting.note)
    fastest = fastest_modes(rows)
    return {
        "bench_report_version": REPORT_VERSION,
        "setting": {
            "name": plan.setting.name,
            "target": str(plan.setting.target),
            "draft": str(plan.setting.draft),
            "real_weights": plan.setting.real_weights,
            "note": plan.setting.note,
        },
        "config": {
            "budgets": list(plan.config.budgets),
            "batch_sizes": list(plan.config.batch_sizes),
            "temperatures": list(plan.config.temperatures),
            "attention_backend": plan.config.attention_backend,
            "tp_size": plan.config.tp_size,
            "max_new_tokens": plan.max_new_tokens,
            "prompts_per_cell": max((c.prompts for c in plan.cells), default=0),
            "max_minutes": plan.config.max_minutes,
            "ddtree_no_overlap": plan.config.ddtree_no_overlap,
            "adaptive_budgets": list(plan.config.adaptive_budgets),
            "budget_schedule": _schedule_text(plan.config.budget_schedule),
            "repeats": repeats,
        },
        "context": dict(context or {}),
        "groups": groups,
        "cells": rows,
        "fastest_modes": fastest,
        # random weights accept nothing, so their fastest budget says nothing about a real pair's
        "recommended_schedule": recommended_schedule(fastest) if plan.setting.real_weights else None,
        "parity": parity,
        "issues": issues,
        "notes": notes,
    }


# --- markdown -------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".2f", empty: str = DASH) -> str:
    if value is None:
        return empty
    return format(value, spec)


def budget_label(row: Mapping[str, Any]) -> str:
    """A DDTREE row's `BudgetPolicy.label`: ``B=32``, ``adaptive 8/32/256``, ..."""
    return BudgetPolicy.of_row(row).label


def arm_label(row: Mapping[str, Any]) -> str:
    return Arm.of_row(row).label


def _columns(report: Mapping[str, Any]) -> list[tuple[float, int]]:
    temps = report["config"]["temperatures"]
    sizes = report["config"]["batch_sizes"]
    return [(float(t), int(bs)) for t in sorted(temps) for bs in sorted(sizes)]


def throughput_table(report: Mapping[str, Any]) -> str:
    """Arms x (T, batch): output tokens/s, with x target-only (and x DFLASH for DDTREE)."""
    columns = _columns(report)
    head = "| arm | " + " | ".join(f"T={t:g} bs={bs}" for t, bs in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]
    by_arm: dict[str, dict[tuple[float, int], Mapping[str, Any]]] = {}
    for row in report["cells"]:
        by_arm.setdefault(arm_label(row), {})[(float(row["temperature"]), int(row["batch_size"]))] = row
    for label, cells in by_arm.items():
        texts = []
        for key in columns:
            row = cells.get(key)
            if row is None or row["status"] != "ok":
                texts.append(row["status"] if row else DASH)
                continue
            text = f"{row['tok_per_s']:.0f}"
            extra = []
            if row["algorithm"] != TARGET_ONLY and row.get("speedup_vs_target"):
                extra.append(f"x{row['speedup_vs_target']:.2f}")
            if row["algorithm"] == DDTREE and row.get("speedup_vs_dflash"):
                extra.append(f"x{row['speedup_vs_dflash']:.2f} DFLASH")
            texts.append(text + (f" ({', '.join(extra)})" if extra else ""))
        lines.append(f"| {label} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def _mode_text(entry: Mapping[str, Any]) -> str:
    return "" if entry["overlap"] else " no overlap"


def _versus_dflash_text(entry: Mapping[str, Any]) -> str:
    return f"{entry['tok_per_s']:.0f}{_mode_text(entry)} (x{entry['speedup_vs_dflash']:.2f})"


def fastest_modes_table(report: Mapping[str, Any]) -> str:
    """DFLASH's faster scheduling mode per column, then DDTREE's per budget (x that DFLASH),
    then the fastest DDTREE arm, and how much of its acceptance advantage its speedup keeps."""
    columns = _columns(report)
    by_column = {(float(c["temperature"]), int(c["batch_size"])): c for c in report.get("fastest_modes") or ()}
    arms = sorted({_sort_key(b): budget_label(b) for c in by_column.values() for b in c["budgets"]}.items())
    texts: dict[str, dict[tuple[float, int], str]] = {"DFLASH": {}}
    texts |= {f"DDTREE {label}": {} for _, label in arms}
    texts["fastest DDTREE"] = {}
    per_acceptance = "fastest DDTREE: speedup ÷ acceptance ratio"
    texts[per_acceptance] = {}
    worst_label = "fastest DDTREE, worst case: its slowest repeat ÷ DFLASH's fastest"
    if any("worst_case" in c for c in by_column.values()):
        texts[worst_label] = {}
    for key, column in by_column.items():
        texts["DFLASH"][key] = f"{column['dflash']['tok_per_s']:.0f}{_mode_text(column['dflash'])}"
        for entry in column["budgets"]:
            texts[f"DDTREE {budget_label(entry)}"][key] = _versus_dflash_text(entry)
        best = column["best"]
        texts["fastest DDTREE"][key] = f"{budget_label(best)}: " + _versus_dflash_text(best)
        if "speedup_per_acceptance" in best:
            texts[per_acceptance][key] = (
                f"{best['speedup_per_acceptance']:.0%} (x{best['speedup_vs_dflash']:.2f} ÷ "
                f"x{best['acceptance_ratio']:.2f})"
            )
        if "worst_case" in column:
            worst = column["worst_case"]
            texts[worst_label][key] = (
                f"x{worst['speedup_vs_dflash']:.2f} ({worst['ddtree_tok_per_s']:.0f} ÷ "
                f"{worst['dflash_tok_per_s']:.0f})"
            )
    lines = ["| arm | " + " | ".join(f"T={t:g} bs={bs}" for t, bs in columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    for label, row in texts.items():
        lines.append(f"| {label} | " + " | ".join(row.get(key, DASH) for key in columns) + " |")
    return "\n".join(lines)


def _policy_lines(report: Mapping[str, Any]) -> list[str]:
    """Which budgets the adaptive and schedule arms' rounds took, per cell (from the profiled
    rounds)."""
    rows = [r for r in report["cells"] if policy_label(r) and (r.get("profile") or {}).get("budgets")]
    if not rows:
        return []
    lines = ["", "Budgets the adaptive and schedule arms' profiled rounds took (rounds per budget):", ""]
    for row in rows:
        counts = ", ".join(f"B={b}: {n}" for b, n in row["profile"]["budgets"].items())
        lines.append(f"- {row['name']}: {counts}")
        view = row["profile"].get("adaptive")
        if view:
            lines.append(f"  - policy at the cell's end: {_policy_view(view)}")
    return lines


def _policy_view(view: Mapping[str, Any]) -> str:
    """One line of an adaptive policy's snapshot: per graph batch size, round ms per width plus
    the shared gap and the width it chooses; then Φ̄ per width and c."""
    parts = []
    for bucket, widths in view.get("round_ms", {}).items():
        rounds = " ".join(f"{w}:{ms:.2f}" for w, ms in widths.items())
        gap = view.get("gap_ms", {}).get(bucket)
        gap_text = f" + gap {gap:.2f}" if gap is not None else ""
        choice = view.get("choice", {}).get(bucket)
        choice_text = f" -> B={choice}" if choice is not None else ""
        parts.append(f"bs {bucket}: round ms {rounds}{gap_text}{choice_text}")
    phi = view.get("phi")
    if phi:
        parts.append("Φ̄ " + "/".join(f"{v:.2f}" for v in phi))
    parts.append(f"c {view.get('scale', 1.0):.2f}")
    return "; ".join(parts)


BUSY_PROCESS = 0.05  # CPU s per wall s below which an engine process is left out of the host table


def host_table(report: Mapping[str, Any]) -> str | None:
    """Per timed cell and repeat: what the host did meanwhile (engine_runner's ``host``)."""
    lines = []
    for row in report["cells"]:
        for run in row.get("repeats") or ():
            host = run.get("host")
            if not host:
                continue
            busy = [p for p in host.get("processes") or () if p["cpu_per_wall"] >= BUSY_PROCESS][:3]
            process = "; ".join(
                f"{p['comm']} {p['cpu_per_wall']:.2f} on CPU {p['last_cpu']}"
                + (f" (core {p['core']})" if p.get("core") else "") for p in busy
            ) or DASH
            others = "; ".join(f"{o['comm']} {o['cpu_per_wall']:.2f}" for o in host.get("others") or ()) or DASH
            allowed = (host.get("processes") or [{}])[0].get("cpus") or DASH
            load = " → ".join(f"{v:.2f}" for v in host["load1"])
            lines.append(
                f"| {row['name']} | {run['repeat']} | {_fmt(run.get('tok_per_s'), '.0f')} | "
                f"{_fmt(run.get('step_ms'))} | {load} | {_fmt(host.get('busy_cores'))} of {host['cpus']} | "
                f"{process} | {others} | {allowed} |"
            )
    if not lines:
        return None
    head = (
        "| cell | repeat | tok/s | wall ms/step | load (1 min) | busy cores | "
        "busy engine processes: CPU s/s, last CPU (core) | busiest other processes: CPU s/s | CPUs allowed |"
    )
    return "\n".join([head, "|---" * 9 + "|", *lines])


def _schedule_lines(recommended: Mapping[str, Any] | None) -> list[str]:
    if not recommended:
        return []
    text = (
        "Budget per batch size from this sweep (the fastest fixed budget at each measured batch size, "
        f"T = 0; batch sizes in between take the smaller one's): "
        f"`--speculative-ddtree-budget-schedule {recommended['schedule']}`."
    )
    if recommended["below_dflash"]:
        sizes = ", ".join(str(bs) for bs in recommended["below_dflash"])
        text += f" At batch size {sizes} even the fastest budget stays below DFLASH."
    smallest = recommended["measured_batch_sizes"][0]
    if smallest > 1:
        text += f" Nothing below batch size {smallest} was measured: its budget is carried down to 1."
    return ["", text]


def _lossless_text(row: Mapping[str, Any]) -> str:
    lossless = row.get("lossless")
    if not lossless:
        return DASH
    text = f"{lossless['identical']}/{lossless['prompts']}"
    first = lossless.get("first_divergence")
    if first:
        text += f", first at {first['index']} (margin {_fmt(first['margin'], '.3f')})"
    if len(row.get("repeats") or ()) > 1 and first:
        text += f" in repeat {lossless['repeat']}"
    return text


def _per_repeat_text(row: Mapping[str, Any]) -> str:
    """Each repeat's tok/s in order; a dash where it did not measure the cell."""
    texts = []
    for entry in row.get("repeats") or ():
        if entry["status"] == "ok":
            texts.append(_fmt(entry.get("tok_per_s"), ".0f"))
        else:
            texts.append("failed" if entry["status"] == "failed" else DASH)
    return ", ".join(texts) or DASH


def cells_table(report: Mapping[str, Any]) -> str:
    """A row per cell; with several repeats, tok/s per repeat beside the median."""
    per_repeat = report["config"].get("repeats", 1) > 1
    head = (
        "| arm | bs | T | tok/s | " + ("tok/s per repeat | " if per_repeat else "")
        + "x target | x DFLASH | accept len | tok/round | rounds | "
        "wall ms/step | " + " | ".join(STAGES) + " | other | host ms | graph | same as target-only |"
    )
    lines = [head, "|---" * (14 + per_repeat + len(STAGES)) + "|"]
    for row in report["cells"]:
        if row["status"] != "ok":
            lines.append(
                f"| {arm_label(row)} | {row['batch_size']} | {row['temperature']:g} | {row['status']}"
                f"{': ' + str(row['reason']) if row['reason'] else ''} |"
                + (f" {_per_repeat_text(row)} |" if per_repeat else "")
                + " |" * (10 + len(STAGES))
            )
            continue
        split = (row.get("profile") or {}).get("ms_per_round") or {}
        graph = (row.get("profile") or {}).get("cuda_graph_fraction")
        cells = [
            arm_label(row),
            str(row["batch_size"]),
            f"{row['temperature']:g}",
            _fmt(row["tok_per_s"], ".0f"),
            *([_per_repeat_text(row)] if per_repeat else []),
            _fmt(row.get("speedup_vs_target")),
            _fmt(row.get("speedup_vs_dflash")),
            _fmt(row.get("acceptance_length")),
            _fmt(row.get("tokens_per_round")),
            _fmt(row.get("rounds"), "d"),
            _fmt(row.get("step_ms")),
            *(_fmt(split.get(stage), ".3f") for stage in STAGES),
            _fmt(split.get("other"), ".3f"),
            _fmt((row.get("profile") or {}).get("host_ms_per_round"), ".3f"),
            _fmt(graph, ".0%"),
            _lossless_text(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _histogram_table(report: Mapping[str, Any]) -> str:
    lines = ["| cell | rounds with accept length 1, 2, ... |", "|---|---|"]
    for row in report["cells"]:
        if row.get("acceptance_histogram"):
            lines.append(f"| {row['name']} | {', '.join(map(str, row['acceptance_histogram']))} |")
    return "\n".join(lines)


def _parity_table(report: Mapping[str, Any]) -> str:
    lines = [
        "| arm | cell | SGLang tok/round | reference tok/round | ratio | prompts within 3% "
        "| same-sequence prompts | within 3% there | max diff there | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["parity"]:
        if row["status"] == "missing":
            lines.append(f"| {row['group']} |" + f" {DASH} |" * 8 + f" missing: {row['reason']} |")
            continue
        ratio = _fmt(row["ratio"], ".3f")
        if len(row.get("ratios") or ()) > 1:
            each = ", ".join(_fmt(r["ratio"], ".3f") for r in row["ratios"])
            ratio += f" (repeat {row['repeat']}; each: {each})"
        lines.append(
            f"| {row['group']} | {row['cell']} | {_fmt(row['sglang_tokens_per_round'], '.3f')} | "
            f"{_fmt(row['reference_tokens_per_round'], '.3f')} | {ratio} | "
            f"{row['per_prompt_within']} | {row['same_sequence_prompts']} | "
            f"{row['same_sequence_within']} | {_fmt(row['same_sequence_max_rel_diff'], '.1%')} | "
            f"{row['status']} |"
        )
    return "\n".join(lines)


def _engines_table(report: Mapping[str, Any]) -> str:
    """A row per engine group; with several repeats, a row per engine run."""
    if report["config"].get("repeats", 1) == 1:
        lines = ["| engine | status | start s | health |", "|---|---|---|---|"]
        for group in report["groups"]:
            status = group["status"] + (f": {group['reason']}" if group["reason"] else "")
            lines.append(
                f"| {group['name']} | {status} | {_fmt(group['start_s'], '.1f')} | {group['health'] or DASH} |"
            )
        return "\n".join(lines)
    lines = ["| engine | repeat | status | start s | health |", "|---|---|---|---|---|"]
    for group in report["groups"]:
        for run in group["repeats"]:
            status = run["status"] + (f": {run['reason']}" if run["reason"] else "")
            lines.append(
                f"| {group['name']} | {run['repeat']} | {status} | {_fmt(run['start_s'], '.1f')} | "
                f"{run['health'] or DASH} |"
            )
    return "\n".join(lines)


def _repeats_bullet(config: Mapping[str, Any]) -> list[str]:
    repeats = config.get("repeats", 1)
    if repeats == 1:
        return []
    return [
        f"- **Repeats**: the engine groups ran {repeats} times, in rounds (every other round in "
        "reverse order), each run a fresh engine; target-only, the correctness reference, ran once "
        "(round 1). tok/s and wall ms/step are medians over the "
        "repeats a cell got (tok/s per repeat in the per-cell table), and every speedup, table and "
        "plot uses them; acceptance and the round split are the median repeat's. Greedy outputs "
        "of every repeat are judged, parity is checked on every repeat (the furthest shown), and "
        "a repeat that failed fails its cell."
    ]


def markdown_report(report: Mapping[str, Any]) -> str:
    setting, config, context = report["setting"], report["config"], report["context"]
    parts = [
        f"# DDTREE bench: {setting['name']}",
        "",
        f"- **Setting**: {setting['note']}.",
        f"- **When / where**: {context.get('started', '?')}; {context.get('gpu', '?')}; "
        f"sglang {context.get('sglang', '?')}, torch {context.get('torch', '?')}.",
        f"- **Engines**: attention backend `{config['attention_backend']}` and tensor-parallel size "
        f"{config['tp_size']} for every arm, decode CUDA "
        f"graphs on (captured for batch sizes {capture_batch_sizes(config['batch_sizes'])}), prefill "
        "graphs off, "
        "one engine per (algorithm, budget, scheduling) serving every cell; "
        + (
            "DDTREE and DFLASH with and without overlap scheduling."
            if config.get("ddtree_no_overlap")
            else "DDTREE and DFLASH with overlap scheduling, DFLASH also without."
        ),
        f"- **Cells**: {config['prompts_per_cell']} prompts per cell, sent in waves of `bs` "
        f"concurrent requests, {config['max_new_tokens']} new tokens each (ignore_eos). tok/s = "
        "output tokens / decode wall time; wall ms/step = decode time / batch-level decode steps.",
        *_repeats_bullet(config),
        "",
        "## Output tokens/s (x target-only; DDTREE also x DFLASH)",
        "",
        throughput_table(report),
        "",
        "## DDTREE against DFLASH, each in its faster scheduling mode",
        "",
        "Output tokens/s of the faster of overlap scheduling on and off (`no overlap` when off "
        "won): DFLASH's, DDTREE's per budget with x that DFLASH, and the fastest DDTREE arm."
        + (
            ""
            if config.get("ddtree_no_overlap")
            else " DDTREE ran with overlap scheduling only (`--ddtree-no-overlap` adds the other mode)."
        ),
        "",
        fastest_modes_table(report),
        *_schedule_lines(report.get("recommended_schedule")),
        "",
        "## Per cell",
        "",
        "accept len = (tokens - 1) / rounds per request (bonus included, prefill token excluded); "
        "tok/round = SGLang's spec_accept_length; stage columns = mean GPU ms per DDTREE round "
        "from ddtree_profile (other = round minus stages: launch gaps); host ms = host time per "
        "round inside the stages (about the stages' GPU sum: the round waits on the host); "
        "graph = share of verify "
        "rounds in a CUDA graph; same as target-only = greedy outputs identical to the target-only "
        "margins run (target-only at the same batch size when it is missing), and the first "
        "divergence with the target's top1-top2 margin on that run (T = 0).",
        "",
        cells_table(report),
        *_policy_lines(report),
        "",
        "## Acceptance-length histograms",
        "",
        _histogram_table(report),
        "",
    ]
    if report["parity"]:
        parts += [
            "## Acceptance parity with the offline reference decoder",
            "",
            f"Reference: `python -m ddtree_overlay.reference`, fp32 on the CPU, the same prompts, "
            f"T = 0. Status `off` when the ratio leaves 1 +- {PARITY_TOLERANCE:.0%}.",
            "",
            _parity_table(report),
            "",
        ]
    host = host_table(report)
    if host:
        parts += [
            "## The host during each cell",
            "",
            "Load average, busy cores over the cell (all CPUs' busy share x CPU count), and the "
            "engine processes that worked (SGLang's scheduler first, as a rule) with the CPU and "
            "physical core each last ran on: two on one core's hyperthreads slow each other; then "
            "the busiest processes outside the engine (another job, an engine still shutting down). "
            "Host-bound arms move more between engines than between budgets; this is where to look.",
            "",
            host,
            "",
        ]
    parts += ["## Engines", "", _engines_table(report), ""]
    if report["issues"] or report["notes"]:
        parts += ["## Issues and notes", ""]
        parts += [f"- issue: {text}" for text in report["issues"]]
        parts += [f"- note: {text}" for text in report["notes"]]
        parts.append("")
    return "\n".join(parts)


# --- plots ----------------------------------------------------------------------------------

MATPLOTLIB_MISSING = (
    "plots skipped: matplotlib is not installed in the tool's interpreter "
    "(`pip install 'ddtree-overlay[bench]'`)"
)


def _series(
    rows: Iterable[Mapping[str, Any]], key: str, *, overlap: bool = True
) -> dict[tuple[float, int], list[tuple[int, float]]]:
    """(T, bs) -> [(budget, value)] over fixed-budget DDTREE cells of one scheduling mode,
    sorted by budget."""
    series: dict[tuple[float, int], list[tuple[int, float]]] = {}
    for row in rows:
        fixed = row["algorithm"] == DDTREE and not policy_label(row)
        if fixed and row["overlap"] == overlap and row.get(key) is not None:
            series.setdefault((row["temperature"], row["batch_size"]), []).append((row["budget"], row[key]))
    return {k: sorted(v) for k, v in series.items()}


def _flat(
    rows: Iterable[Mapping[str, Any]], algorithm: str, key: str, *, overlap: bool = True, policy: str | None = None
) -> dict[tuple[float, int], float]:
    """One arm's values per (T, bs): DFLASH's, or a DDTREE policy arm's (``policy_label``)."""
    return {
        (r["temperature"], r["batch_size"]): r[key]
        for r in rows
        if r["algorithm"] == algorithm and policy_label(r) == policy
        and r["overlap"] == overlap and r.get(key) is not None
    }


def _plot_lines(ax: Any, report: Mapping[str, Any], temp: float, *, key: str, colours: Sequence[str]) -> list[int]:
    """One panel's DDTREE curves and DFLASH levels per batch size (adaptive budgets and a
    schedule, where run: thin levels, the schedule's thicker); with overlap scheduling solid and
    dashed, without it (where DDTREE ran that way too) dotted and dash-dotted."""
    budgets: set[int] = set()
    policies = sorted({label for r in report["cells"] if (label := policy_label(r))})
    for overlap, marker, ddtree_style, dflash_style, mode in (
        (True, "o", "-", "--", ""),
        (False, "s", ":", "-.", " no overlap"),
    ):
        series = _series(report["cells"], key, overlap=overlap)
        if not overlap and not series:  # DDTREE ran with overlap only: DFLASH's other mode is noise
            continue
        dflash = _flat(report["cells"], DFLASH, key, overlap=overlap)
        levels = {p: _flat(report["cells"], DDTREE, key, overlap=overlap, policy=p) for p in policies}
        for i, bs in enumerate(sorted(report["config"]["batch_sizes"])):
            colour = colours[i % len(colours)]
            points = series.get((temp, bs), [])
            if points:
                ax.plot(*zip(*points, strict=True), marker=marker, linestyle=ddtree_style, color=colour,
                        label=f"DDTREE{mode} bs={bs}")
                budgets.update(b for b, _ in points)
            if (temp, bs) in dflash:
                ax.axhline(dflash[(temp, bs)], color=colour, linestyle=dflash_style, label=f"DFLASH{mode} bs={bs}")
            for j, (policy, values) in enumerate(levels.items()):
                if (temp, bs) in values:
                    ax.axhline(values[(temp, bs)], color=colour, linestyle=ddtree_style, linewidth=0.8 + 0.8 * j,
                               label=f"DDTREE {policy}{mode} bs={bs}")
    return sorted(budgets)


def _plot_vs_budget(plt: Any, report: Mapping[str, Any], *, key: str, ylabel: str, title: str, path: Path) -> Path:
    temps = sorted(report["config"]["temperatures"])
    fig, axes = plt.subplots(1, len(temps), figsize=(6 * len(temps), 4.5), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, temp in zip(axes[0], temps, strict=True):
        budgets = _plot_lines(ax, report, temp, key=key, colours=colours)
        if key == "speedup_vs_target":
            ax.axhline(1.0, color="grey", linewidth=0.8)
        if key == "acceptance_length" and temp == 0:
            ref = sorted(  # one reference per budget, shared by both scheduling modes
                {
                    (r["budget"], r["reference_acceptance_length"])
                    for r in report["parity"]
                    if r["algorithm"] == DDTREE and r.get("budget") is not None
                    and r.get("reference_acceptance_length") is not None
                }
            )
            if ref:
                ax.plot(*zip(*ref, strict=True), "kx", label="offline reference (fp32)")
        ax.set_xscale("log", base=2)
        if budgets:
            ax.set_xticks(budgets, [str(b) for b in budgets])
            ax.minorticks_off()
        ax.set_xlabel("DDTREE budget B (drafted nodes per round)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}, T={temp:g}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{report['setting']['name']}: {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_round_time(plt: Any, report: Mapping[str, Any], path: Path) -> Path | None:
    """Stacked GPU ms per round by stage against budget, one panel per batch size (T = 0); a
    budget's no-overlap arm stands right of its overlap one."""
    rows = [
        r for r in report["cells"] if r["algorithm"] == DDTREE and r.get("profile") and r["temperature"] == 0
    ]
    if not rows:
        return None
    sizes = sorted({r["batch_size"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4.5), squeeze=False)
    for ax, bs in zip(axes[0], sizes, strict=True):
        mine = sorted((r for r in rows if r["batch_size"] == bs), key=lambda r: (_sort_key(r), not r["overlap"]))
        labels = [budget_label(r).removeprefix("B=") + ("" if r["overlap"] else "\nno overlap") for r in mine]
        bottom = [0.0] * len(mine)
        for stage in (*STAGES, "other"):
            values = [max(0.0, r["profile"]["ms_per_round"].get(stage, 0.0)) for r in mine]
            ax.bar(labels, values, bottom=bottom, label=stage)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xlabel("DDTREE budget B")
        ax.set_ylabel("GPU ms per round")
        ax.set_title(f"bs={bs}, T=0")
        ax.legend(fontsize=8)
    fig.suptitle(f"{report['setting']['name']}: DDTREE round time by stage")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(report: Mapping[str, Any], out: Path) -> tuple[list[Path], str | None]:
    """speedup.png, acceptance.png and round_time.png; (files, why not) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], MATPLOTLIB_MISSING
    files = [
        _plot_vs_budget(
            plt, report, key="speedup_vs_target", ylabel="output tok/s / target-only",
            title="speedup vs target-only", path=out / "speedup.png",
        ),
        _plot_vs_budget(
            plt, report, key="acceptance_length", ylabel="mean acceptance length (tokens/round)",
            title="acceptance length", path=out / "acceptance.png",
        ),
    ]
    round_time = _plot_round_time(plt, report, out / "round_time.png")
    return files + ([round_time] if round_time else []), None
