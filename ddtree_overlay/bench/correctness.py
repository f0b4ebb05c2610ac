"""Is a bench run right: greedy outputs against target-only's (lossless up to bf16 near-ties),
and tokens per round against the offline reference decoder's on the same prompts (parity).

Every repeat counts: greedy outputs of every repeat are judged, and parity is checked on every
repeat, showing the one furthest from the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench import decode_compare
from ddtree_overlay.bench.arms import TARGET_ONLY
from ddtree_overlay.bench.plan import Cell, EngineGroup, SweepPlan
from ddtree_overlay.bench.records import Records, planned_repeats, repeat_label

# SGLang (bf16) against the fp32 offline reference on the same prompts: tokens per round may
# differ by bf16 near-ties that change a sequence; a gross bug (a wrong tree, a broken commit)
# moves it far more than this.
PARITY_TOLERANCE = 0.10
PER_PROMPT_TOLERANCE = 0.03  # the per-prompt bar: reported per prompt, not gated


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
        "undecoded": report["undecoded"],
        "unexplained": report["unexplained"],
        "first_divergence": min(divergences, key=lambda d: d["index"]) if divergences else None,
        "worst_divergence": worst,
        "margin_noise": report["margin_noise"],
        "passed": report["passed"],
    }


def judged_lossy(row: Mapping[str, Any]) -> bool:
    """Whether a cell's greedy outputs were judged against target-only's and left them beyond
    bf16 noise. A cell never judged (sampled, or without a target-only output to judge it
    against) is not: nothing says it is lossy."""
    lossless = row.get("lossless")
    return lossless is not None and not lossless.get("passed")


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
        (c for c in target.cells if not (c.top2 or c.stream) and c.temperature == 0 and c.batch_size == batch_size),
        None
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
    """Parity on the group's greedy cell that decoded the most prompts (a time box can cut a
    cell short of its plan), checked on every repeat of it; the row shown is the repeat
    furthest from the reference (``ratios`` has each repeat's)."""
    candidates = []
    for cell in (c for c in group.cells if c.temperature == 0 and not (c.top2 or c.stream)):
        ran = [
            (repeat, records[(cell.name, repeat)])
            for repeat in planned.get(cell.name, ())
            if records.get((cell.name, repeat), {}).get("ok")
        ]
        if ran:
            candidates.append(ran)
    if not candidates:
        return None
    measured = max(candidates, key=lambda ran: max(len(record["outputs"]) for _, record in ran))  # of equals, the first
    rows = [parity_row(group, record, reference) | {"repeat": repeat} for repeat, record in measured]
    row = max(rows, key=_parity_deviation)  # of equals, the first
    row["ratios"] = [{"repeat": r["repeat"], "ratio": r.get("ratio")} for r in rows]
    return row


def judge(
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
            issue = parity_issue(row, repeats)
            if issue:
                issues.append(issue)
    return parity, issues


def parity_issue(row: Mapping[str, Any], repeats: int) -> str | None:
    """The issue a parity row raises: tokens per round off the reference's, or no reference."""
    if row["status"] == "off":
        return (
            f"{repeat_label(row['group'], row.get('repeat', 1), repeats)}: tokens per round "
            f"{row['sglang_tokens_per_round']:.3f} against the offline reference's "
            f"{row['reference_tokens_per_round']:.3f} "
            f"(x{row['ratio']:.3f}, tolerance +-{PARITY_TOLERANCE:.0%})"
        )
    if row["status"] == "missing":
        return f"{row['group']}: no offline reference to compare with ({row['reason']})"
    return None
