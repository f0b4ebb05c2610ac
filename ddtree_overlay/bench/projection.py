"""DDTREE ÷ DFLASH projected per batch size from a run's measured round costs and an
acceptance-versus-budget curve measured elsewhere: what a trained pair at this run's shape
would give, before one runs.

A random-weight run (e.g. the Qwen3-8B shape) accepts nothing, so its rounds cost what a real
pair's rounds cost at that shape, batch size and verify width, but its speedups say nothing.
The projection puts a curve's acceptance on those costs. Under continuous batching each
request gains τ tokens per round, so per batch size

    DDTREE ÷ DFLASH = (τ(B) ÷ τ_chain) ÷ (round(B, bs) ÷ round_chain(bs))

with round = the measured wall ms per batch step of each arm in its faster scheduling mode, per
request running in a step (fewer than bs where SGLang's cap queued the rest, as DFLASH's
recurrent-state snapshots do on a hybrid), and the best budget B the run measured and the
curve covers. ``ASSUMPTIONS`` are printed with every projection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.acceptance_curve import PAPER_QWEN3_8B, AcceptanceCurve
from ddtree_overlay.bench.analysis import STAGES, capped, step_ratio
from ddtree_overlay.bench.arms import DDTREE, DFLASH
from ddtree_overlay.bench.table_cells import DASH

PAPER_SHAPE = "qwen3-8b-random"  # the bench setting whose round costs the paper's curve fits

ASSUMPTIONS = (
    "round cost = the run's wall ms per batch step, each arm in its faster scheduling mode: "
    "scheduler gaps and host work included, measured with the run's own acceptance (random "
    "weights: 1 token per round, so a real round's commit of τ tokens per request is not in it)",
    "every request of the batch accepts the curve's mean τ, whatever the batch size, and keeps "
    "its slot between rounds (continuous batching: tokens per second = requests running x τ ÷ "
    "round cost; an engine capped below bs ran its wave in narrower steps, which cost it more "
    "per request than steady serving at its cap would: where one was, the figures after 'at "
    "the caps' count its steps per request its cap lets run, as if the narrower steps cost what "
    "full ones do, the other end of the range)",
    "τ between two budgets of the curve is linear in log2 B; budgets outside the curve are left out",
    "the curve's pair and workload stand for the deployment's (its name says which they are)",
)


def _fastest_step(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    timed = [r for r in rows if r.get("step_ms")]
    return min(timed, key=lambda r: r["step_ms"]) if timed else None


def project(report: Mapping[str, Any], curve: AcceptanceCurve) -> dict[str, Any] | None:
    """Per batch size at T = 0: DFLASH's round cost, each fixed budget's round cost, τ and
    projected DDTREE ÷ DFLASH, the best of them, and the τ each budget needs to break even.
    None when the run has no greedy DFLASH and fixed-budget DDTREE cells."""
    greedy = [r for r in report["cells"] if r["status"] == "ok" and r["temperature"] == 0]
    columns = []
    for bs in sorted({r["batch_size"] for r in greedy}):
        here = [r for r in greedy if r["batch_size"] == bs]
        chain = _fastest_step([r for r in here if r["algorithm"] == DFLASH])
        fixed = [r for r in here if r["algorithm"] == DDTREE and r.get("budget") and not r.get("adaptive") and not r.get("schedule")]
        if chain is None or not fixed:
            continue
        budgets = []
        for budget in sorted({int(r["budget"]) for r in fixed}):
            row = _fastest_step([r for r in fixed if int(r["budget"]) == budget])
            if row is None:
                continue
            tau = curve.tau(budget)
            steps = step_ratio(row, chain)
            split = (row.get("profile") or {}).get("ms_per_round") or {}
            entry = {
                "budget": budget,
                "overlap": row["overlap"],
                "step_ms": row["step_ms"],
                "step_ratio": steps,
                "stages_ms": {stage: split[stage] for stage in (*STAGES, "other") if stage in split},
                "tau": tau,
                "break_even_tau": curve.chain * steps,
                "speedup_vs_dflash": tau / curve.chain / steps if tau is not None else None,
            }
            if capped(row, chain):
                at_cap = step_ratio(row, chain, at_cap=True)
                entry |= {
                    "step_ratio_at_cap": at_cap,
                    "break_even_tau_at_cap": curve.chain * at_cap,
                    "speedup_at_cap": tau / curve.chain / at_cap if tau is not None else None,
                }
            budgets.append(entry)
        projected = [b for b in budgets if b["speedup_vs_dflash"] is not None]
        best = max(projected, key=lambda b: b["speedup_vs_dflash"]) if projected else None
        columns.append({
            "batch_size": bs,
            "dflash": {"step_ms": chain["step_ms"], "overlap": chain["overlap"]},
            "budgets": budgets,
            "best": best,
        })
    if not columns:
        return None
    assumptions = list(ASSUMPTIONS)
    if curve is PAPER_QWEN3_8B and report["setting"]["name"] != PAPER_SHAPE:
        assumptions.append(
            f"this run's shape is {report['setting']['name']}, the curve's model Qwen3-8B: a pair of "
            "this shape accepts differently; give its own curve with --acceptance-curve"
        )
    return {
        "setting": report["setting"]["name"],
        "curve": curve.as_dict(),
        "assumptions": assumptions,
        "columns": columns,
        "confirm": (
            "a bench of the trained pair at this shape on the same GPU, e.g. `ddtree-overlay bench "
            "--target TARGET --draft DFLASH_DRAFTER --prompts PROMPTS --budgets "
            + ",".join(str(b["budget"]) for b in columns[0]["budgets"])
            + " --batch-sizes " + ",".join(str(c["batch_size"]) for c in columns)
            + " --temperatures 0 --ddtree-no-overlap --repeats 2`: its acceptance ratio ÷ step ratio per "
            "batch size is the measured counterpart of this projection"
        ),
    }


def _mode(overlap: bool) -> str:
    return "" if overlap else ", no overlap"


def projection_markdown(projection: Mapping[str, Any]) -> str:
    """The projection as a table (one row per batch size and budget) with its curve and
    assumptions."""
    curve = projection["curve"]
    taus = ", ".join(f"B = {b}: {t:.2f}" for b, t in curve["budgets"].items())
    lines = [
        f"**A projection, not a measurement.** Acceptance: {curve['name']}; DFLASH τ "
        f"{curve['dflash']:.2f}, DDTREE {taus} (source: {curve['source']}). Round costs: this run "
        f"({projection['setting']}).",
        "",
        "| bs | budget | DDTREE ms / step | DFLASH ms / step | step ratio per request | DDTREE GPU ms per stage | τ (curve) | τ to break even | projected DDTREE ÷ DFLASH |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for column in projection["columns"]:
        chain = column["dflash"]
        for entry in column["budgets"]:
            stages = ", ".join(f"{stage} {ms:.2f}" for stage, ms in entry["stages_ms"].items() if ms >= 0.05) or DASH
            speedup = entry["speedup_vs_dflash"]
            text = DASH if speedup is None else f"x{speedup:.2f}"
            if column["best"] is entry:
                text = f"**{text}**"
            steps, break_even = f"{entry['step_ratio']:.3f}", f"{entry['break_even_tau']:.2f}"
            if "step_ratio_at_cap" in entry:
                steps += f" ({entry['step_ratio_at_cap']:.3f} at the caps)"
                break_even += f" ({entry['break_even_tau_at_cap']:.2f})"
                if entry["speedup_at_cap"] is not None:
                    text += f" (x{entry['speedup_at_cap']:.2f})"
            lines.append(
                f"| {column['batch_size']} | {entry['budget']}{_mode(entry['overlap'])} | {entry['step_ms']:.2f} | "
                f"{chain['step_ms']:.2f}{_mode(chain['overlap'])} | {steps} | {stages} | "
                f"{DASH if entry['tau'] is None else format(entry['tau'], '.2f')} | {break_even} | {text} |"
            )
    lines += ["", "Assumptions:", ""]
    lines += [f"- {text}" for text in projection["assumptions"]]
    lines += ["", f"What would confirm it: {projection['confirm']}."]
    return "\n".join(lines)


def default_curve(report: Mapping[str, Any]) -> AcceptanceCurve | None:
    """The curve a run is projected with when none is given: the paper's Qwen3-8B curve for a
    random-weight run (it accepts nothing of its own), none for a real pair (it measured its
    own acceptance)."""
    return None if report["setting"].get("real_weights") else PAPER_QWEN3_8B
