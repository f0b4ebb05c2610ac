"""DDTREE ÷ DFLASH projected per batch size from a run's measured round costs and an
acceptance-versus-budget curve measured elsewhere: what a trained pair at this run's shape
would give, before one runs.

A random-weight run (e.g. the Qwen3-8B shape) accepts nothing, so its rounds cost what a real
pair's rounds cost at that shape, batch size and verify width, but its speedups say nothing.
The projection puts a curve's acceptance on those costs. Under continuous batching each
request gains τ tokens per round, so per batch size

    DDTREE ÷ DFLASH = (τ(B) ÷ τ_chain) ÷ (round(B, bs) ÷ round_chain(bs))

with round = the measured wall ms per batch step per request running in a step (fewer than bs
where SGLang's cap queued the rest, as DFLASH's recurrent-state snapshots do on a hybrid), of
each arm in the scheduling mode and backend where that is least, and the best budget B the run
measured and the curve covers. Continuous-batching cells (``report["steady"]``) are projected
per concurrency the same way, a round's cost per request being the cell's tokens per round ÷
its tok/s: each engine measured serving the stream with what its cap let run, so no capped wave
needs bracketing there. ``ASSUMPTIONS`` (and ``STEADY_ASSUMPTION`` with steady columns) are
printed with every projection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.acceptance_curve import PAPER_QWEN3_8B, AcceptanceCurve
from ddtree_overlay.bench.analysis import capped, request_step_ms, step_ratio
from ddtree_overlay.bench.arms import DFLASH, fixed_budget
from ddtree_overlay.bench.attention import on_backend
from ddtree_overlay.bench.round_split import STAGES
from ddtree_overlay.bench.table_cells import DASH

PAPER_SHAPE = "qwen3-8b-random"  # the bench setting whose round costs the paper's curve fits

ASSUMPTIONS = (
    "round cost = the run's wall ms per batch step, each arm in the scheduling mode and backend "
    "where it costs least per request running: "
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
STEADY_ASSUMPTION = (
    "continuous batching (c = concurrency): a round's cost per request = the median engine's tokens "
    "per round ÷ its tok/s in the timed window, each engine serving the stream with as many requests "
    "as its cap let run; the worst case pairs DDTREE's slowest engine with DFLASH's fastest"
)


def _cheapest_round(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The row whose round costs least per request running (`analysis.request_step_ms`), the
    cost the projection divides by: a capped engine's narrower steps cost less each, more per
    request."""
    return min((r for r in rows if r.get("step_ms")), key=request_step_ms, default=None)


def project_steady(report: Mapping[str, Any], curve: AcceptanceCurve) -> list[dict[str, Any]]:
    """Per concurrency at T = 0, from the continuous-batching cells: DFLASH's fastest arm, each
    fixed budget's fastest, their cost per request and round, τ, the projection and its worst
    case, and the τ each budget needs to break even."""
    rows = [r for r in (report.get("steady") or {}).get("rows", ()) if r["status"] == "ok" and r["temperature"] == 0]
    columns = []
    for concurrency in sorted({r["concurrency"] for r in rows}):
        here = [r for r in rows if r["concurrency"] == concurrency and r.get("request_round_s")]
        chain = max((r for r in here if r["algorithm"] == DFLASH), key=lambda r: r["tok_per_s"], default=None)
        fixed = [r for r in here if fixed_budget(r)]
        if chain is None or not fixed:
            continue
        budgets = []
        for budget in sorted({int(r["budget"]) for r in fixed}):
            row = max((r for r in fixed if int(r["budget"]) == budget), key=lambda r: r["tok_per_s"])
            tau = curve.tau(budget)
            # seconds per request and round (`steady.steady_row`): medians over engines, and the
            # worst case of this budget's costliest engine against DFLASH's cheapest
            cost = row["request_round_s"] / chain["request_round_s"]
            worst = row["request_round_s_max"] / chain["request_round_s_min"]
            budgets.append({
                "budget": budget,
                "group": row["group"],
                "tok_per_s": row["tok_per_s"],
                "mean_running": row.get("mean_running"),
                "step_ratio": cost,
                "worst_step_ratio": worst,
                "tau": tau,
                "break_even_tau": curve.break_even_tau(cost),
                "speedup_vs_dflash": curve.speedup(tau, cost),
                "worst_speedup_vs_dflash": curve.speedup(tau, worst),
            })
        projected = [b for b in budgets if b["speedup_vs_dflash"] is not None]
        columns.append({
            "concurrency": concurrency,
            "dflash": {"group": chain["group"], "tok_per_s": chain["tok_per_s"], "mean_running": chain.get("mean_running")},
            "budgets": budgets,
            "best": max(projected, key=lambda b: b["speedup_vs_dflash"]) if projected else None,
        })
    return columns


def project(report: Mapping[str, Any], curve: AcceptanceCurve) -> dict[str, Any] | None:
    """Per batch size at T = 0: DFLASH's round cost, each fixed budget's round cost, τ and
    projected DDTREE ÷ DFLASH, the best of them, and the τ each budget needs to break even;
    per concurrency the same from the continuous-batching cells (``steady``). None when the run
    has neither greedy DFLASH and fixed-budget DDTREE cells nor such continuous-batching ones."""
    greedy = [r for r in report["cells"] if r["status"] == "ok" and r["temperature"] == 0]
    columns = []
    for bs in sorted({r["batch_size"] for r in greedy}):
        here = [r for r in greedy if r["batch_size"] == bs]
        chain = _cheapest_round([r for r in here if r["algorithm"] == DFLASH])
        fixed = [r for r in here if fixed_budget(r)]
        if chain is None or not fixed:
            continue
        budgets = []
        for budget in sorted({int(r["budget"]) for r in fixed}):
            row = _cheapest_round([r for r in fixed if int(r["budget"]) == budget])
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
                "break_even_tau": curve.break_even_tau(steps),
                "speedup_vs_dflash": curve.speedup(tau, steps),
            }
            if capped(row, chain):
                at_cap = step_ratio(row, chain, at_cap=True)
                entry |= {
                    "step_ratio_at_cap": at_cap,
                    "break_even_tau_at_cap": curve.break_even_tau(at_cap),
                    "speedup_at_cap": curve.speedup(tau, at_cap),
                }
            budgets.append(entry)
        projected = [b for b in budgets if b["speedup_vs_dflash"] is not None]
        best = max(projected, key=lambda b: b["speedup_vs_dflash"]) if projected else None
        columns.append({
            "batch_size": bs,
            "dflash": {"step_ms": chain["step_ms"], "overlap": chain["overlap"],
                       **({"backend": chain["backend"]} if chain.get("backend") else {})},
            "budgets": budgets,
            "best": best,
        })
    steady = project_steady(report, curve)
    if not columns and not steady:
        return None
    assumptions = list(ASSUMPTIONS) + ([STEADY_ASSUMPTION] if steady else [])
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
        "steady": steady,
        "confirm": _confirm(columns, steady),
    }


def _confirm(columns: Sequence[Mapping[str, Any]], steady: Sequence[Mapping[str, Any]]) -> str:
    budgets = ",".join(str(b["budget"]) for b in (columns or steady)[0]["budgets"])
    if columns:
        widths = " --batch-sizes " + ",".join(str(c["batch_size"]) for c in columns)
        repeats, per = " --ddtree-no-overlap --repeats 2", "acceptance ratio ÷ step ratio per batch size"
    else:
        widths = " --concurrency " + ",".join(str(c["concurrency"]) for c in steady)
        repeats, per = " --engines-per-arm 2", "DDTREE ÷ DFLASH per concurrency"
    return (
        "a bench of the trained pair at this shape on the same GPU, e.g. `ddtree-overlay bench --target TARGET "
        f"--draft DFLASH_DRAFTER --prompts PROMPTS --budgets {budgets}{widths} --temperatures 0{repeats}`: its "
        f"{per} is the measured counterpart of this projection"
    )


def _mode(overlap: bool) -> str:
    return "" if overlap else ", no overlap"


def projection_markdown(projection: Mapping[str, Any]) -> str:
    """The projection as tables (one row per batch size and budget; one per concurrency and
    budget from continuous-batching cells) with its curve and assumptions."""
    curve = projection["curve"]
    taus = ", ".join(f"B = {b}: {t:.2f}" for b, t in curve["budgets"].items())
    lines = [
        f"**A projection, not a measurement.** Acceptance: {curve['name']}; DFLASH τ "
        f"{curve['dflash']:.2f}, DDTREE {taus} (source: {curve['source']}). Round costs: this run "
        f"({projection['setting']}).",
    ]
    if projection["columns"]:
        lines += ["", *_fixed_wave_rows(projection["columns"])]
    if projection.get("steady"):
        lines += ["", "Continuous batching:", "", *_steady_rows(projection["steady"])]
    lines += ["", "Assumptions:", ""]
    lines += [f"- {text}" for text in projection["assumptions"]]
    lines += ["", f"What would confirm it: {projection['confirm']}."]
    return "\n".join(lines)


def _projected(entry: Mapping[str, Any], best: bool, key: str = "speedup_vs_dflash") -> str:
    text = DASH if entry[key] is None else f"x{entry[key]:.2f}"
    return f"**{text}**" if best else text


def _head(*columns: str) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def _fixed_wave_rows(columns: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = _head(
        "bs", "budget", "DDTREE ms / step", "DFLASH ms / step", "step ratio per request", "DDTREE GPU ms per stage",
        "τ (curve)", "τ to break even", "projected DDTREE ÷ DFLASH",
    )
    for column in columns:
        chain = column["dflash"]
        for entry in column["budgets"]:
            stages = ", ".join(f"{stage} {ms:.2f}" for stage, ms in entry["stages_ms"].items() if ms >= 0.05) or DASH
            text = _projected(entry, column["best"] is entry)
            steps, break_even = f"{entry['step_ratio']:.3f}", f"{entry['break_even_tau']:.2f}"
            if "step_ratio_at_cap" in entry:
                steps += f" ({entry['step_ratio_at_cap']:.3f} at the caps)"
                break_even += f" ({entry['break_even_tau_at_cap']:.2f})"
                if entry["speedup_at_cap"] is not None:
                    text += f" (x{entry['speedup_at_cap']:.2f})"
            lines.append(
                f"| {column['batch_size']} | {entry['budget']}{_mode(entry['overlap'])} | {entry['step_ms']:.2f} | "
                f"{chain['step_ms']:.2f}{_mode(chain['overlap'])}{on_backend(chain)} | {steps} | {stages} | "
                f"{_tau(entry)} | {break_even} | {text} |"
            )
    return lines


def _tau(entry: Mapping[str, Any]) -> str:
    return DASH if entry["tau"] is None else format(entry["tau"], ".2f")


def _running(tok_per_s: float, running: float | None) -> str:
    return f"{tok_per_s:.0f}" + ("" if running is None else f" ({running:.1f})")


def _steady_rows(columns: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = _head(
        "c", "budget", "DDTREE tok/s (requests running)", "DFLASH tok/s (requests running)",
        "cost per request and round, DDTREE ÷ DFLASH (worst case)", "τ (curve)", "τ to break even",
        "projected DDTREE ÷ DFLASH (worst case)",
    )
    for column in columns:
        chain = column["dflash"]
        for entry in column["budgets"]:
            worst = _projected(entry, False, "worst_speedup_vs_dflash")
            lines.append(
                f"| {column['concurrency']} | {entry['budget']} | {_running(entry['tok_per_s'], entry['mean_running'])} | "
                f"{_running(chain['tok_per_s'], chain['mean_running'])} | {entry['step_ratio']:.3f} "
                f"({entry['worst_step_ratio']:.3f}) | {_tau(entry)} | {entry['break_even_tau']:.2f} | "
                f"{_projected(entry, column['best'] is entry)} ({worst}) |"
            )
    return lines


def default_curve(report: Mapping[str, Any]) -> AcceptanceCurve | None:
    """The curve a run is projected with when none is given: the paper's Qwen3-8B curve for a
    random-weight run (it accepts nothing of its own), none for a real pair (it measured its
    own acceptance)."""
    return None if report["setting"].get("real_weights") else PAPER_QWEN3_8B
