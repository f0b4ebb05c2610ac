"""A DDTREE engine's round split: the mean GPU ms of each stage of a round, from the profile
windows the payload wrote while a cell ran (``SGLANG_DDTREE_PROFILE``, ddtree_profile.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddtree_overlay.bench.arms import budget_order, parse_budget

# Stages of a DDTREE round, as ddtree_profile records them; "other" is the rest of the round.
STAGES = ("draft", "topk", "tree", "verify", "accept", "commit")


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
        "budgets": dict(sorted(budgets.items(), key=lambda item: budget_order(parse_budget(item[0])))),
        "adaptive": policy[-1] if policy else None,  # the policy's view at the cell's end
    }
