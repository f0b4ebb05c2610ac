"""Turn the runner's records into the bench report: per-cell metrics, correctness, files.

Inputs are the JSON lines `gpu/engine_runner.py` writes (``kind`` "cell" and "engine"), the
sweep plan, and the offline reference decoder's JSON per algorithm. Outputs: the report dict
(`analyse`), its markdown (`markdown_report`) and PNG plots (`write_plots`, needs matplotlib).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree_overlay import decode_compare
from ddtree_overlay.bench_plan import (
    DDTREE,
    DFLASH,
    TARGET_ONLY,
    Cell,
    EngineGroup,
    SweepPlan,
    capture_batch_sizes,
)

REPORT_VERSION = 1
# Stages of a DDTREE round, as ddtree_profile records them; "other" is the rest of the round.
STAGES = ("draft", "topk", "tree", "verify", "accept", "commit")
# SGLang (bf16) against the fp32 offline reference on the same prompts: tokens per round may
# differ by bf16 near-ties that change a sequence; a gross bug (a wrong tree, a broken commit)
# moves it far more than this.
PARITY_TOLERANCE = 0.10
PER_PROMPT_TOLERANCE = 0.03  # issue 4's per-prompt bar, reported (not gated) per prompt
DASH = "\u2013"  # an empty table cell, as in docs/BENCHMARKS.md
PROFILE_HINT = (
    "no DDTREE profile windows were recorded: is ddtree_profile wired into the worker's "
    "_tree_round (SGLANG_DDTREE_PROFILE)?"
)


def read_records(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(cells by name, engines by group name); the last line for a name wins."""
    cells: dict[str, dict[str, Any]] = {}
    engines: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return cells, engines
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        (engines if record.get("kind") == "engine" else cells)[record["arm"]] = record
    return cells, engines


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
    with_host = [w for w in inside if "host_ms_sum" in w]  # older profiles lack it
    host_rounds = sum(int(w["rounds"]) for w in with_host)
    host_ms = sum(float(ms) for w in with_host for ms in w["host_ms_sum"].values())
    return {
        "rounds": rounds,
        "mean_batch": sum(int(w["requests"]) for w in inside) / rounds,
        "cuda_graph_fraction": sum(int(w.get("cuda_graph_rounds") or 0) for w in inside) / rounds,
        "ms_per_round": {k: round(v, 4) for k, v in ms.items()},
        "host_ms_per_round": round(host_ms / host_rounds, 4) if host_rounds else None,
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
        "algorithm": group.algorithm,
        "budget": group.budget,
        "overlap": group.overlap,
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
        steps=_steps(record, group.algorithm),
    )
    row["step_ms"] = 1000 * record["decode_s"] / row["steps"] if row["steps"] else None
    if group.algorithm != TARGET_ONLY:
        summary = decode_compare.acceptance_summary(record)
        completion = sum(int(m.get("completion_tokens") or 0) for m in record["meta"])
        row.update(
            acceptance_length=summary["mean_acceptance_length"],
            tokens_per_round=completion / summary["rounds"] if summary["rounds"] else None,
            rounds=summary["rounds"],
            acceptance_histogram=_histogram(record["meta"]),
        )
    if group.algorithm == DDTREE and engine is not None:
        row["profile"] = profile_split(engine.get("profile") or (), record["t_start"], record["t_end"])
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


def _lossless_reference(
    records: Mapping[str, Mapping[str, Any]], plan: SweepPlan, batch_size: int
) -> dict[str, Any] | None:
    """Target-only greedy outputs to judge against, with their top1-top2 gaps when known.

    The margins cell's outputs come first: its gaps hold along its own trajectory only, and
    target-only at another batch size can leave that trajectory at an exact tie, after which
    its gaps would judge the wrong tokens. Without margins: target-only at this batch size.
    """
    target = next((g for g in plan.groups if g.algorithm == TARGET_ONLY), None)
    if target is None:
        return None
    margins = next((records.get(c.name) for c in target.cells if c.top2), None)
    if margins and margins.get("ok") and margins.get("top2_margins"):
        return {"arm": margins["arm"], "outputs": margins["outputs"], "top2_margins": margins["top2_margins"]}
    same_bs = next(
        (records.get(c.name) for c in target.cells if not c.top2 and c.temperature == 0 and c.batch_size == batch_size),
        None,
    )
    if not same_bs or not same_bs.get("ok"):
        return None
    return {"arm": same_bs["arm"], "outputs": same_bs["outputs"], "top2_margins": None}


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
    row: dict[str, Any] = {"group": group.name, "algorithm": group.algorithm, "budget": group.budget}
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


def reference_key(group: EngineGroup) -> str | None:
    """The offline reference a group is judged against: one per algorithm and budget, whatever
    the scheduling (overlap changes when the host works, not which tokens are accepted)."""
    if group.algorithm == DFLASH:
        return "dflash"
    if group.algorithm == DDTREE:
        return f"ddtree-b{group.budget}"
    return None


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
    """Per (T, bs): DFLASH in its faster scheduling mode, DDTREE at every budget in its faster
    mode against it, and the fastest DDTREE arm. Columns lacking either algorithm are left out;
    a tie goes to overlap scheduling (the default)."""

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
        budgets = []
        for budget in sorted({r["budget"] for r in ddtree}):
            row = fastest(r for r in ddtree if r["budget"] == budget)
            assert row is not None
            budgets.append(
                {
                    "group": row["group"],
                    "budget": budget,
                    "overlap": row["overlap"],
                    "tok_per_s": row["tok_per_s"],
                    "speedup_vs_dflash": row["tok_per_s"] / dflash["tok_per_s"],
                }
            )
        columns.append(
            {
                "temperature": key[0],
                "batch_size": key[1],
                "dflash": {"group": dflash["group"], "overlap": dflash["overlap"], "tok_per_s": dflash["tok_per_s"]},
                "budgets": budgets,
                "best": max(budgets, key=lambda b: b["tok_per_s"]),
            }
        )
    return columns


def _group_row(group: EngineGroup, engine: Mapping[str, Any] | None) -> dict[str, Any]:
    status, reason = _status(engine)
    return {
        "name": group.name,
        "algorithm": group.algorithm,
        "budget": group.budget,
        "overlap": group.overlap,
        "engine": dict(group.engine),
        "status": status,
        "reason": reason,
        "start_s": (engine or {}).get("start_s"),
        "health": (engine or {}).get("health"),
        "traceback": (engine or {}).get("traceback"),
    }


def _correctness(
    plan: SweepPlan,
    records: Mapping[str, Mapping[str, Any]],
    rows: list[dict[str, Any]],
    references: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Lossless summaries go into the rows; returns (parity rows, issues)."""
    issues: list[str] = []
    by_name = {row["name"]: row for row in rows}
    for group in plan.groups:
        for cell in group.cells:
            row, record = by_name.get(cell.name), records.get(cell.name)
            if row is None or row["status"] != "ok" or cell.temperature != 0 or record is None:
                continue
            reference = _lossless_reference(records, plan, cell.batch_size)
            if reference is None or reference["arm"] == cell.name:
                continue
            row["lossless"] = lossless_summary(reference, record)
            if not row["lossless"]["passed"] and plan.setting.real_weights:
                worst = row["lossless"]["worst_divergence"] or {}
                issues.append(
                    f"{cell.name}: {row['lossless']['unexplained']} of {row['lossless']['prompts']} "
                    "prompts leave target-only greedy output beyond bf16 noise (largest top1-top2 "
                    f"margin {worst.get('margin') or 0:.3f} at token {worst.get('index')})"
                )
    parity = []
    if plan.setting.reference_parity and references is not None:
        for group in plan.groups:
            key = reference_key(group)
            t0 = sorted((c for c in group.cells if c.temperature == 0 and not c.top2), key=lambda c: -c.prompts)
            record = next((records[c.name] for c in t0 if records.get(c.name, {}).get("ok")), None)
            if key is None or record is None:
                continue
            row = parity_row(group, record, references.get(key))
            parity.append(row)
            if row["status"] == "off":
                issues.append(
                    f"{group.name}: tokens per round {row['sglang_tokens_per_round']:.3f} against the "
                    f"offline reference's {row['reference_tokens_per_round']:.3f} "
                    f"(x{row['ratio']:.3f}, tolerance +-{PARITY_TOLERANCE:.0%})"
                )
            elif row["status"] == "missing":
                issues.append(f"{group.name}: no offline reference to compare with ({row['reason']})")
    return parity, issues


def analyse(
    plan: SweepPlan,
    records: Mapping[str, Mapping[str, Any]],
    engines: Mapping[str, Mapping[str, Any]],
    *,
    references: Mapping[str, Mapping[str, Any]] | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    rows, groups, issues, notes = [], [], [], []
    for group in plan.groups:
        engine = engines.get(group.name)
        groups.append(_group_row(group, engine))
        if groups[-1]["status"] == "failed":
            issues.append(f"{group.name}: the engine failed: {groups[-1]['reason']}")
        for cell in group.cells:
            row = cell_metrics(cell, group, records.get(cell.name), engine)
            if row["status"] == "failed":
                issues.append(f"{cell.name}: {row['reason']}")
            if not cell.top2:
                rows.append(row)
    _speedups(rows)
    parity, correctness_issues = _correctness(plan, records, rows, references)
    issues += correctness_issues
    skipped = [r["name"] for r in rows if r["status"] in ("skipped", "not run")]
    if skipped:
        notes.append(
            f"{len(skipped)} cell(s) not measured (time box, or their engine failed): {', '.join(skipped)}"
        )
    ddtree_ok = [r for r in rows if r["algorithm"] == DDTREE and r["status"] == "ok"]
    if ddtree_ok and not any(r.get("profile") for r in ddtree_ok):
        notes.append(PROFILE_HINT)
    if not plan.setting.real_weights:
        notes.append(plan.setting.note)
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
        },
        "context": dict(context or {}),
        "groups": groups,
        "cells": rows,
        "fastest_modes": fastest_modes(rows),
        "parity": parity,
        "issues": issues,
        "notes": notes,
    }


# --- markdown -------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".2f", empty: str = DASH) -> str:
    if value is None:
        return empty
    return format(value, spec)


def arm_label(row: Mapping[str, Any]) -> str:
    if row["algorithm"] == DDTREE:
        return f"DDTREE B={row['budget']}" + ("" if row["overlap"] else " (no overlap)")
    if row["algorithm"] == DFLASH:
        return "DFLASH" if row["overlap"] else "DFLASH (no overlap)"
    return TARGET_ONLY


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
    then the fastest DDTREE arm."""
    columns = _columns(report)
    by_column = {(float(c["temperature"]), int(c["batch_size"])): c for c in report.get("fastest_modes") or ()}
    budgets = sorted({b["budget"] for c in by_column.values() for b in c["budgets"]})
    texts: dict[str, dict[tuple[float, int], str]] = {"DFLASH": {}}
    texts |= {f"DDTREE B={b}": {} for b in budgets}
    texts["fastest DDTREE"] = {}
    for key, column in by_column.items():
        texts["DFLASH"][key] = f"{column['dflash']['tok_per_s']:.0f}{_mode_text(column['dflash'])}"
        for entry in column["budgets"]:
            texts[f"DDTREE B={entry['budget']}"][key] = _versus_dflash_text(entry)
        texts["fastest DDTREE"][key] = f"B={column['best']['budget']}: " + _versus_dflash_text(column["best"])
    lines = ["| arm | " + " | ".join(f"T={t:g} bs={bs}" for t, bs in columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    for label, row in texts.items():
        lines.append(f"| {label} | " + " | ".join(row.get(key, DASH) for key in columns) + " |")
    return "\n".join(lines)


def _lossless_text(row: Mapping[str, Any]) -> str:
    lossless = row.get("lossless")
    if not lossless:
        return DASH
    text = f"{lossless['identical']}/{lossless['prompts']}"
    first = lossless.get("first_divergence")
    if first:
        text += f", first at {first['index']} (margin {_fmt(first['margin'], '.3f')})"
    return text


def cells_table(report: Mapping[str, Any]) -> str:
    head = (
        "| arm | bs | T | tok/s | x target | x DFLASH | accept len | tok/round | rounds | "
        "wall ms/step | " + " | ".join(STAGES) + " | other | host ms | graph | same as target-only |"
    )
    lines = [head, "|---" * (14 + len(STAGES)) + "|"]
    for row in report["cells"]:
        if row["status"] != "ok":
            lines.append(
                f"| {arm_label(row)} | {row['batch_size']} | {row['temperature']:g} | {row['status']}"
                f"{': ' + str(row['reason']) if row['reason'] else ''} |" + " |" * (10 + len(STAGES))
            )
            continue
        split = (row.get("profile") or {}).get("ms_per_round") or {}
        graph = (row.get("profile") or {}).get("cuda_graph_fraction")
        cells = [
            arm_label(row),
            str(row["batch_size"]),
            f"{row['temperature']:g}",
            _fmt(row["tok_per_s"], ".0f"),
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
        lines.append(
            f"| {row['group']} | {row['cell']} | {_fmt(row['sglang_tokens_per_round'], '.3f')} | "
            f"{_fmt(row['reference_tokens_per_round'], '.3f')} | {_fmt(row['ratio'], '.3f')} | "
            f"{row['per_prompt_within']} | {row['same_sequence_prompts']} | "
            f"{row['same_sequence_within']} | {_fmt(row['same_sequence_max_rel_diff'], '.1%')} | "
            f"{row['status']} |"
        )
    return "\n".join(lines)


def _engines_table(report: Mapping[str, Any]) -> str:
    lines = ["| engine | status | start s | health |", "|---|---|---|---|"]
    for group in report["groups"]:
        status = group["status"] + (f": {group['reason']}" if group["reason"] else "")
        lines.append(f"| {group['name']} | {status} | {_fmt(group['start_s'], '.1f')} | {group['health'] or DASH} |")
    return "\n".join(lines)


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
    """(T, bs) -> [(budget, value)] over DDTREE cells of one scheduling mode, sorted by budget."""
    series: dict[tuple[float, int], list[tuple[int, float]]] = {}
    for row in rows:
        if row["algorithm"] == DDTREE and row["overlap"] == overlap and row.get(key) is not None:
            series.setdefault((row["temperature"], row["batch_size"]), []).append((row["budget"], row[key]))
    return {k: sorted(v) for k, v in series.items()}


def _flat(
    rows: Iterable[Mapping[str, Any]], algorithm: str, key: str, *, overlap: bool = True
) -> dict[tuple[float, int], float]:
    return {
        (r["temperature"], r["batch_size"]): r[key]
        for r in rows
        if r["algorithm"] == algorithm and r["overlap"] == overlap and r.get(key) is not None
    }


def _plot_lines(ax: Any, report: Mapping[str, Any], temp: float, *, key: str, colours: Sequence[str]) -> list[int]:
    """One panel's DDTREE curves and DFLASH levels per batch size; with overlap scheduling
    solid and dashed, without it (where DDTREE ran that way too) dotted and dash-dotted."""
    budgets: set[int] = set()
    for overlap, marker, ddtree_style, dflash_style, mode in (
        (True, "o", "-", "--", ""),
        (False, "s", ":", "-.", " no overlap"),
    ):
        series = _series(report["cells"], key, overlap=overlap)
        if not overlap and not series:  # DDTREE ran with overlap only: DFLASH's other mode is noise
            continue
        dflash = _flat(report["cells"], DFLASH, key, overlap=overlap)
        for i, bs in enumerate(sorted(report["config"]["batch_sizes"])):
            colour = colours[i % len(colours)]
            points = series.get((temp, bs), [])
            if points:
                ax.plot(*zip(*points, strict=True), marker=marker, linestyle=ddtree_style, color=colour,
                        label=f"DDTREE{mode} bs={bs}")
                budgets.update(b for b, _ in points)
            if (temp, bs) in dflash:
                ax.axhline(dflash[(temp, bs)], color=colour, linestyle=dflash_style, label=f"DFLASH{mode} bs={bs}")
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
                    if r["algorithm"] == DDTREE and r.get("reference_acceptance_length") is not None
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
        mine = sorted((r for r in rows if r["batch_size"] == bs), key=lambda r: (r["budget"], not r["overlap"]))
        labels = [f"{r['budget']}" + ("" if r["overlap"] else "\nno overlap") for r in mine]
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
