"""DDTREE ÷ DFLASH projected from a round trace (`round_trace.py`): each fixed-budget DDTREE arm's
cost per request and round against the DFLASH arm's of the same trace, with an acceptance curve's
τ on top, as `projection` does for a bench's cells.

A trace decodes fixed waves of ``batch_size`` prompts, of which an engine runs at most its
``requests_at_once``; a step's cost per request is its wall ms (and its GPU kernel ms, traced on
the first wave) over the requests it ran. With random weights every round accepts one token, so
the costs are a round's at that width and the curve supplies what a trained pair would accept.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.acceptance_curve import AcceptanceCurve
from ddtree_overlay.bench.arms import DDTREE, DFLASH, parse_with_settings
from ddtree_overlay.bench.table_cells import DASH, cell


def _running(record: Mapping[str, Any]) -> int:
    return min(int(record["batch_size"]), int(record.get("requests_at_once") or record["batch_size"]))


def _costs(record: Mapping[str, Any]) -> tuple[float, float | None]:
    """Wall and kernel ms per request and round."""
    running = _running(record)
    kernel = (record.get("trace") or {}).get("gpu", {}).get("kernel_ms")
    return record["step_ms"] / running, None if kernel is None else kernel / running


def _by_arm(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    engines: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("step_ms") and not r.get("primer"):
            engines.setdefault(r["arm"], []).append(r)
    return engines


def _median_costs(engines: Sequence[Mapping[str, Any]]) -> tuple[float, float | None]:
    walls, kernels = zip(*(_costs(r) for r in engines), strict=True)
    return statistics.median(walls), None if None in kernels else statistics.median(kernels)


def project_trace(records: Sequence[Mapping[str, Any]], curve: AcceptanceCurve) -> list[dict[str, Any]]:
    """One row per fixed-budget DDTREE arm whose budget the curve covers, against the trace's
    cheapest DFLASH arm per request and round (none without one): the cost ratios, τ, the τ that
    breaks even on wall time, and the projected DDTREE ÷ DFLASH on wall and on kernel time. An
    arm that ran several engines counts the median of their costs; its worst case is its
    dearest engine's wall time against the DFLASH arm's cheapest engine's."""
    engines = _by_arm(records)
    chains = {arm: runs for arm, runs in engines.items() if parse_with_settings(arm)[0].algorithm == DFLASH}
    if not chains:
        return []
    chain_arm = min(chains, key=lambda arm: _median_costs(chains[arm])[0])
    chain_wall, chain_kernel = _median_costs(chains[chain_arm])
    chain_cheapest = min(_costs(r)[0] for r in chains[chain_arm])
    rows = []
    for name, runs in engines.items():
        arm = parse_with_settings(name)[0]
        budget = arm.policy.budget if arm.algorithm == DDTREE and not arm.chain else None
        tau = None if budget is None else curve.tau(budget)
        if tau is None:
            continue
        wall, kernel = _median_costs(runs)
        kernel_ratio = None if None in (kernel, chain_kernel) else kernel / chain_kernel
        worst_wall_ratio = max(_costs(r)[0] for r in runs) / chain_cheapest
        rows.append({
            "arm": name,
            "dflash": chain_arm,
            "engines": len(runs),
            "dflash_engines": len(chains[chain_arm]),
            "budget": budget,
            "tau": tau,
            "wall_ratio": wall / chain_wall,
            "kernel_ratio": kernel_ratio,
            "worst_wall_ratio": worst_wall_ratio,
            "break_even_tau": curve.break_even_tau(wall / chain_wall),
            "speedup_vs_dflash": curve.speedup(tau, wall / chain_wall),
            "kernel_speedup_vs_dflash": curve.speedup(tau, kernel_ratio),
            "worst_speedup_vs_dflash": curve.speedup(tau, worst_wall_ratio),
        })
    return rows


def trace_projection_lines(rows: Sequence[Mapping[str, Any]], curve: AcceptanceCurve) -> list[str]:
    if not rows:
        return []

    def x(value: float | None) -> str:
        return DASH if value is None else f"x{value:.2f}"

    lines = [
        "",
        f"**A projection, not a measurement**: DDTREE ÷ DFLASH with {curve.name} (DFLASH τ {curve.chain:g}) "
        f"on this trace's costs per request and round, against {rows[0]['dflash']} (its cheapest DFLASH arm, "
        f"{rows[0]['dflash_engines']} engine(s); an arm's engines count by their median, the worst case is its dearest "
        "engine against DFLASH's cheapest; random weights: one token per round, so a real round's commit of τ tokens is not in them)",
        "",
        "| arm | engines | τ (curve) | wall ratio | kernel ratio | τ to break even (wall) | projected (wall) | worst case (wall) | projected (kernel) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kernel = cell(r["kernel_ratio"], ".3f")
        lines.append(
            f"| {r['arm']} | {r['engines']} | {r['tau']:.2f} | {r['wall_ratio']:.3f} | {kernel} | {r['break_even_tau']:.2f} | "
            f"{x(r['speedup_vs_dflash'])} | {x(r['worst_speedup_vs_dflash'])} | {x(r['kernel_speedup_vs_dflash'])} |"
        )
    return lines
