"""The deployment recommendation that ends a bench report: what to serve at each measured
concurrency, what it is expected to gain there against every baseline measured, the
recurrent-state memory its verify keeps on a hybrid target (DDTREE's in the mode the run had,
`bench.state_memory`), and the `sglang.launch_server` command (`bench.launch_command`;
DDTREE's with `SGLANG_DDTREE_HYBRID_STATE=snapshot` in front when the run measured the
snapshots; the flat state is the payload's default), each on the attention backend its engines
ran and asking for no more concurrent requests than its engines served at once: a DDTREE server
asked for more on a hybrid target refuses to start.

Only measured cells count: those that ran, at the lowest temperature measured (T = 0 when
there), and, where greedy outputs were judged, passed. They are the waves cells; a sweep without
any is recommended from its continuous-batching cells (tok/s the median over engines, outputs
not judged), their concurrencies in the batch sizes' place. The DDTREE policy is one server's: a
single scheduling mode, and either the schedule made of the fastest fixed budget at each batch
size (its expected tok/s are those fixed-budget cells'), or an adaptive or schedule arm the sweep
measured; of these the one with the highest geometric-mean tok/s over the batch sizes the
schedule covers. At a batch size where that policy is not faster than the best baseline
(target-only, DFLASH, NEXTN, EAGLE-3, each in its faster mode), the baseline is what to serve
there: the recommendation never names a slower configuration. Random weights accept nothing,
so they get no recommendation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddtree_overlay.bench.arms import (
    BLOCK_SIZE,
    CHAIN_DRAFT,
    DDTREE,
    DFLASH,
    EAGLE3,
    NEXTN,
    TARGET_ONLY,
    Arm,
    Budget,
    BudgetPolicy,
    budget_order,
    drafted_nodes,
    verify_width,
)
from ddtree_overlay.bench.correctness import judged_lossy
from ddtree_overlay.bench.launch_command import launch_command
from ddtree_overlay.bench.state_memory import HYBRID_STATE_ENV, SNAPSHOT, state_of, verify_state
from ddtree_overlay.bench.table_cells import DASH
from ddtree_overlay.bench.target_config import TargetConfig

BASELINES = (TARGET_ONLY, DFLASH, NEXTN, EAGLE3)
WAVES, STEADY = "waves", "continuous batching"  # the cells a recommendation is made from


@dataclass(frozen=True)
class Candidate:
    """A DDTREE policy one server could run, with its tok/s row per batch size."""

    policy: BudgetPolicy
    overlap: bool
    rows: Mapping[int, Mapping[str, Any]]
    measured: bool  # False: a schedule assembled from fixed-budget engines

    def score(self, batch_sizes: Sequence[int]) -> float:
        """Geometric mean tok/s over ``batch_sizes``; 0 when one is missing."""
        if not all(bs in self.rows for bs in batch_sizes):
            return 0.0
        return math.exp(sum(math.log(self.rows[bs]["tok_per_s"]) for bs in batch_sizes) / len(batch_sizes))


def recommend(report: Mapping[str, Any], target: TargetConfig) -> dict[str, Any] | None:
    """The recommendation as JSON-ready data, or None when nothing real was measured."""
    if not report["setting"].get("real_weights"):
        return None
    rows, cells = _measured(report)
    if not rows:
        return None
    temperature = min(float(r["temperature"]) for r in rows)
    rows = [r for r in rows if float(r["temperature"]) == temperature]
    sizes = sorted({int(r["batch_size"]) for r in rows})
    candidates = ddtree_candidates(rows)
    chosen = choose(candidates)
    per_bs = [_column(bs, rows, chosen) for bs in sizes]
    config = report["config"]
    served = serving_segments(per_bs)
    ddtree_state = str(config.get("hybrid_state", SNAPSHOT))  # reports from before the flat state: snapshots
    return {
        "cells": cells,
        "temperature": temperature,
        "batch_sizes": sizes,
        "not_judged": _not_judged(rows),
        "ddtree": _policy_entry(chosen) if chosen else None,
        "per_batch_size": per_bs,
        "serve": served,
        "recurrent_state": recurrent_state(target, chosen, served, int(config.get("tp_size", 1)), ddtree_state),
        "launch": [
            launch_command(
                segment,
                report,
                ddtree_flags=_policy_flags(chosen.policy) if chosen else [],
                hybrid=target.gated_deltanet is not None,
                widest_batch=max(sizes),
                engines=_engines_of(segment, chosen, report),
                streaming=cells == STEADY,
                ddtree_state=ddtree_state,
            )
            for segment in _distinct_configs(served)
        ],
    }


def _measured(report: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], str]:
    """The cells to recommend from and which they are: the waves cells, or, in a sweep without
    any, the continuous-batching cells, each with its concurrency as ``batch_size``."""
    if report["cells"]:
        return [r for r in report["cells"] if _servable(r)], WAVES
    steady = (report.get("steady") or {}).get("rows") or ()
    return [dict(r, batch_size=r["concurrency"]) for r in steady if _servable(r)], STEADY


def _servable(row: Mapping[str, Any]) -> bool:
    ok = row.get("status") == "ok" and row.get("tok_per_s") and row.get("algorithm") in (*BASELINES, DDTREE)
    return bool(ok) and not judged_lossy(row)


def _not_judged(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cells whose greedy outputs were never judged against target-only's (sampled, or with
    no target-only output to judge them against), of those to judge: target-only's own are the
    reference."""
    to_judge = [r for r in rows if r["algorithm"] != TARGET_ONLY]
    never = [r for r in to_judge if r.get("lossless") is None]
    return {"cells": len(never), "of": len(to_judge), "batch_sizes": sorted({int(r["batch_size"]) for r in never})}


def _fastest(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return max(rows, key=lambda r: r["tok_per_s"], default=None)


def ddtree_candidates(rows: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """Per scheduling mode: the schedule of the fastest fixed budget at each batch size, then
    every adaptive and schedule arm measured."""
    candidates = []
    ddtree = [r for r in rows if r["algorithm"] == DDTREE and not r.get("chain")]  # a control, not a budget
    for overlap in (True, False):
        mode = [r for r in ddtree if bool(r["overlap"]) == overlap]
        fixed = [r for r in mode if BudgetPolicy.of_row(r).budget is not None]
        best = {
            bs: row
            for bs in sorted({int(r["batch_size"]) for r in fixed})
            if (row := _fastest([r for r in fixed if int(r["batch_size"]) == bs])) is not None
        }
        if best:
            candidates.append(Candidate(_schedule_of(best), overlap, best, measured=False))
        for policy in sorted({BudgetPolicy.of_row(r) for r in mode if BudgetPolicy.of_row(r).budget is None},
                             key=lambda p: p.sort_key):
            own = {int(r["batch_size"]): r for r in mode if BudgetPolicy.of_row(r) == policy}
            candidates.append(Candidate(policy, overlap, own, measured=True))
    return candidates


def _schedule_of(best: Mapping[int, Mapping[str, Any]]) -> BudgetPolicy:
    """One budget for every batch size, or a schedule stepping where the fastest budget changes
    (batch sizes between two measured ones take the smaller one's)."""
    steps: list[tuple[int, int]] = []
    for bs, row in sorted(best.items()):
        budget = int(row["budget"])
        if not steps or steps[-1][1] != budget:
            steps.append((bs if steps else 1, budget))
    return BudgetPolicy.fixed(steps[0][1]) if len(steps) == 1 else BudgetPolicy(schedule=tuple(steps))


def choose(candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate with the highest geometric-mean tok/s over the batch sizes the fixed
    budgets were measured at (of equals, the first: overlap before no overlap, fixed budgets
    before measured policies)."""
    if not candidates:
        return None
    sizes = sorted({bs for c in candidates if not c.measured for bs in c.rows}) or sorted(candidates[0].rows)
    best = max(candidates, key=lambda c: c.score(sizes))
    return best if best.score(sizes) > 0 else max(candidates, key=lambda c: len(c.rows))


def _column(bs: int, rows: Sequence[Mapping[str, Any]], chosen: Candidate | None) -> dict[str, Any]:
    here = [r for r in rows if int(r["batch_size"]) == bs]
    baselines = {
        algorithm: _brief(row)
        for algorithm in BASELINES
        if (row := _fastest([r for r in here if r["algorithm"] == algorithm])) is not None
    }
    ddtree_row = chosen.rows.get(bs) if chosen else None
    ddtree = _brief(ddtree_row) if ddtree_row else None
    best_baseline = max(baselines.values(), key=lambda b: b["tok_per_s"], default=None)
    if ddtree and (best_baseline is None or ddtree["tok_per_s"] > best_baseline["tok_per_s"]):
        serve = dict(ddtree, algorithm=DDTREE)
    else:
        serve = best_baseline
    return {
        "batch_size": bs,
        "ddtree": ddtree,
        "baselines": baselines,
        "speedup": {
            algorithm: ddtree["tok_per_s"] / base["tok_per_s"] for algorithm, base in baselines.items()
        } if ddtree else {},
        "serve": serve,
    }


def _brief(row: Mapping[str, Any]) -> dict[str, Any]:
    arm = Arm.of_row(row)
    return {"algorithm": arm.algorithm, "arm": arm.label, "group": row["group"], "overlap": bool(row["overlap"]),
            "tok_per_s": row["tok_per_s"]}


def serving_segments(per_bs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive batch sizes served alike, as ranges: from batch size 1 (the first) to the
    next range's start - 1, the last one open-ended. A baseline's range keeps the arm it was
    measured as (``group``, ``arm``: its backend among them); DDTREE's is the chosen policy's,
    whichever budget's group measured each batch size (``group`` None)."""
    segments: list[dict[str, Any]] = []
    for column in per_bs:
        serve = column["serve"]
        if serve is None:
            continue
        baseline = serve["algorithm"] != DDTREE
        segment = {
            "algorithm": serve["algorithm"],
            "overlap": serve["overlap"],
            "group": serve["group"] if baseline else None,
            "arm": serve["arm"] if baseline else None,
        }
        if segments and _config_key(segments[-1]) == _config_key(segment):
            segments[-1]["measured_batch_sizes"].append(column["batch_size"])
            continue
        segments.append(segment | {
            "from_batch_size": column["batch_size"] if segments else 1,
            "measured_batch_sizes": [column["batch_size"]],
        })
    for segment, following in itertools.pairwise(segments):
        segment["to_batch_size"] = following["from_batch_size"] - 1
    if segments:
        segments[-1]["to_batch_size"] = None
    return segments


def _config_key(segment: Mapping[str, Any]) -> tuple[str, bool, str | None]:
    """What one server runs: the DDTREE policy in its scheduling mode, or a baseline's arm."""
    return segment["algorithm"], segment["overlap"], segment["group"]


def _distinct_configs(segments: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    seen, distinct = set(), []
    for segment in segments:
        key = _config_key(segment)
        if key not in seen:
            seen.add(key)
            distinct.append(segment)
    return distinct


def _engines_of(
    segment: Mapping[str, Any], chosen: Candidate | None, report: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The engine groups (report rows) that measured ``segment``'s configuration: every one the
    chosen DDTREE policy's rows came from (one server runs them all), or the baseline arm's."""
    groups = report.get("groups") or ()
    if segment["algorithm"] == DDTREE and chosen is not None:
        names = {row["group"] for row in chosen.rows.values()}
        return [g for g in groups if g["name"] in names]
    return [g for g in groups if g["name"] == segment["group"]]


def _policy_entry(candidate: Candidate) -> dict[str, Any]:
    return {
        "policy": candidate.policy.label,
        "flags": _policy_flags(candidate.policy),
        "overlap": candidate.overlap,
        "measured": candidate.measured,
        "widths": sorted({verify_width(drafted_nodes(b)) for b in _budgets(candidate.policy)}),
    }


def _budgets(policy: BudgetPolicy) -> list[Budget]:
    return list(policy.adaptive) or [b for _, b in policy.schedule] or [int(policy.budget or 0)]


def _policy_flags(policy: BudgetPolicy) -> list[str]:
    if policy.adaptive:
        return ["--speculative-ddtree-adaptive-budgets", ",".join(map(str, policy.adaptive))]
    if policy.schedule:
        return ["--speculative-ddtree-budget-schedule", policy.schedule_text]
    return ["--speculative-ddtree-budget", str(policy.budget)]


def recurrent_state(
    target: TargetConfig,
    chosen: Candidate | None,
    served: Sequence[Mapping[str, Any]],
    tp_size: int,
    ddtree_state: str,
) -> dict[str, Any] | None:
    """On a Gated-DeltaNet target: the verify state per request and TP rank at each verify width
    the served configurations use (`state_memory.verify_state`), DDTREE's in ``ddtree_state``,
    the others' snapshots. A DDTREE engine keeps it at its widest width (its pools' stride)."""
    gdn = target.gated_deltanet
    if gdn is None:
        return None
    widths: dict[str, tuple[str, int]] = {}
    for segment in served:
        algorithm = segment["algorithm"]
        if algorithm == DDTREE and chosen is not None:
            for budget in sorted(set(_budgets(chosen.policy)), key=budget_order):
                widths[f"DDTREE B={budget}"] = (algorithm, verify_width(drafted_nodes(budget)))
        elif algorithm == DFLASH:
            widths["DFLASH"] = (algorithm, BLOCK_SIZE)
        elif algorithm in (NEXTN, EAGLE3):
            widths[Arm(algorithm).label] = (algorithm, CHAIN_DRAFT["speculative_num_draft_tokens"])
    per_request = []
    for name, (algorithm, width) in widths.items():
        state = verify_state(gdn, state_of(algorithm, ddtree_state), verify_width=width, tp_size=tp_size)
        per_request.append({
            "config": name,
            "state": state["state"],
            "verify_tokens": width,
            "bytes": state["per_request_bytes"],
            "text": state["per_request_text"],
        })
    return {
        "gated_deltanet_layers": gdn.layers,
        "value_heads": gdn.value_heads,
        "key_dim": gdn.key_dim,
        "value_dim": gdn.value_dim,
        "state_bytes": gdn.state_bytes,
        "tp_size": tp_size,
        "ddtree_state": ddtree_state,
        "per_request": per_request,
    }


def markdown_section(recommendation: Mapping[str, Any] | None) -> list[str]:
    """The report's last section: what to serve per concurrency, the speedups, the memory, the
    launch commands."""
    if not recommendation:
        return []
    rec = recommendation
    lines = ["## Recommendation", "", _basis(rec), ""]
    lines += [f"- {_segment_text(segment, rec)}" for segment in rec["serve"]]
    lines += ["", *_speedup_table(rec)]
    state = rec.get("recurrent_state")
    if state:
        lines += ["", _state_text(state)]
    for launch in rec["launch"]:
        lines += ["", f"{_config_name(launch, rec)}:", "", "```", launch["command"], "```"]
    return [*lines, ""]


def summary_lines(recommendation: Mapping[str, Any] | None) -> list[str]:
    """What to serve per concurrency, for the terminal (the full section is in bench.md)."""
    if not recommendation:
        return []
    head = f"recommendation (T = {recommendation['temperature']:g}; launch commands in bench.md):"
    return [head, *(f"  {_segment_text(s, recommendation)}".replace("**", "") for s in recommendation["serve"])]


def _unit(rec: Mapping[str, Any]) -> str:
    """What the recommendation's batch sizes are: continuous-batching cells' are concurrencies."""
    return "concurrency" if rec.get("cells") == STEADY else "batch size"


def _measured_at(rec: Mapping[str, Any], sizes: Sequence[int]) -> str:
    unit = _unit(rec)
    plural = "s" if len(sizes) > 1 and unit == "batch size" else ""
    return f"{unit}{plural} {', '.join(map(str, sizes))}"


def _basis(rec: Mapping[str, Any]) -> str:
    ddtree = rec["ddtree"]
    if rec.get("cells") == STEADY:
        text = (
            f"From the continuous-batching cells measured at T = {rec['temperature']:g} that ran "
            f"({_measured_at(rec, rec['batch_sizes'])}; their outputs are not judged against target-only's: "
            "waves cells judge them). "
        )
    else:
        kept, unjudged = _lossless_basis(rec)
        text = (
            f"From the cells measured at T = {rec['temperature']:g} that ran{kept} "
            f"({_measured_at(rec, rec['batch_sizes'])}{unjudged}). "
        )
    if ddtree is None:
        return text + f"No DDTREE arm was measured: the fastest baseline per {_unit(rec)}."
    how = (
        "measured as such" if ddtree["measured"]
        else f"its expected tok/s are the fixed-budget engines' at each {_unit(rec)}"
    )
    mode = "overlap scheduling" if ddtree["overlap"] else "without overlap scheduling"
    return text + f"DDTREE policy: {ddtree['policy']}, {mode} ({how}); a baseline wherever it is not faster."


def _lossless_basis(rec: Mapping[str, Any]) -> tuple[str, str]:
    """What the basis says of the waves cells' outputs: after "that ran", and after their batch
    sizes. Only cells judged against target-only's greedy output are said to have kept it."""
    never = rec["not_judged"]
    if rec["temperature"] > 0:
        return "", "; sampled outputs are not judged against target-only's"
    if not never["cells"]:
        return " and kept target-only's greedy output", ""
    why = "no target-only greedy output to judge them against"
    if never["cells"] == never["of"]:
        return "", f"; their greedy outputs were not judged: {why}"
    return (
        " and, where judged, kept target-only's greedy output",
        f"; {never['cells']} of {never['of']} cells not judged, at {_measured_at(rec, never['batch_sizes'])}: {why}",
    )


def _range(segment: Mapping[str, Any]) -> str:
    start, end = segment["from_batch_size"], segment["to_batch_size"]
    if end is None:
        return f"{start} and more concurrent requests"
    if start == end:
        return f"{start} concurrent request{'s' if end > 1 else ''}"
    return f"{start}-{end} concurrent requests"


def _config_name(entry: Mapping[str, Any], rec: Mapping[str, Any]) -> str:
    if entry["algorithm"] == DDTREE and rec["ddtree"]:
        return f"DDTREE {rec['ddtree']['policy']}{'' if entry['overlap'] else ' (no overlap)'}"
    return entry["arm"]


def _segment_text(segment: Mapping[str, Any], rec: Mapping[str, Any]) -> str:
    measured = _measured_at(rec, segment["measured_batch_sizes"])
    text = f"{_range(segment)}: serve **{_config_name(segment, rec)}** (measured at {measured})"
    if segment["algorithm"] != DDTREE and rec["ddtree"]:
        text += "; DDTREE was not faster there"
    return text


def _speedup_table(rec: Mapping[str, Any]) -> list[str]:
    present = [a for a in BASELINES if any(a in c["baselines"] for c in rec["per_batch_size"])]
    head = f"| {_unit(rec)} | serve | DDTREE tok/s | " + " | ".join(f"x {Arm(a).label}" for a in present) + " |"
    lines = [head, "|---" * (3 + len(present)) + "|"]
    for column in rec["per_batch_size"]:
        ddtree = column["ddtree"]
        ratios = [
            f"{column['speedup'][a]:.2f} ({column['baselines'][a]['tok_per_s']:.0f} tok/s)"
            if a in column["speedup"] else DASH
            for a in present
        ]
        serve = column["serve"]["arm"] if column["serve"] else DASH
        tok = f"{ddtree['tok_per_s']:.0f} ({ddtree['arm']})" if ddtree else DASH
        lines.append(f"| {column['batch_size']} | {serve} | {tok} | " + " | ".join(ratios) + " |")
    return lines


def _state_text(state: Mapping[str, Any]) -> str:
    per = "; ".join(
        f"{entry['config']} ({entry['state']}): {entry['text']}" for entry in state["per_request"]
    )
    return (
        f"Verify recurrent state on this hybrid target ({state['gated_deltanet_layers']} Gated-DeltaNet "
        f"layers of {state['value_heads']} value heads x {state['key_dim']} x {state['value_dim']}, "
        f"{state['state_bytes']} B a state element), per request and TP rank at TP {state['tp_size']}, "
        "verify tokens x what each keeps (snapshot: its recurrent state and conv window; flat: its conv "
        f"window and stashed inputs, plus one layer's branch scratch per request): {per}. DDTREE's state is "
        f"{state['ddtree_state']} (`{HYBRID_STATE_ENV}`); a DDTREE engine keeps it at its widest budget's "
        "width, whatever the batch."
    )
