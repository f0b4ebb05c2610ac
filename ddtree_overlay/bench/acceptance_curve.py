"""Acceptance versus budget: DDTREE's mean tokens per verify round at each budget B, and
DFLASH's chain's, for one pair on one workload; the DDTree paper's Qwen3-8B curve, and curves
read from a file (JSON, CSV) or from a real pair's bench report. `bench.projection` puts them
on measured round costs."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import DFLASH, fixed_budget


@dataclass(frozen=True)
class AcceptanceCurve:
    """Mean tokens per verify round (bonus included: the paper's τ, SGLang's tokens per round)
    of DDTREE per budget, and of DFLASH's chain, for one pair on one workload."""

    name: str
    source: str
    chain: float  # DFLASH's τ
    budgets: Mapping[int, float]  # budget B -> DDTREE's τ

    def tau(self, budget: int) -> float | None:
        """τ at ``budget``: a listed budget's, else linear in log2 B between the two listed
        budgets around it; None outside the listed range (never extrapolated)."""
        if budget in self.budgets:
            return self.budgets[budget]
        below = [b for b in self.budgets if b < budget]
        above = [b for b in self.budgets if b > budget]
        if not below or not above:
            return None
        lo, hi = max(below), min(above)
        weight = (math.log2(budget) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return self.budgets[lo] + weight * (self.budgets[hi] - self.budgets[lo])

    def break_even_tau(self, cost_ratio: float) -> float:
        """The τ at which a DDTREE round costing ``cost_ratio`` x DFLASH's ties it."""
        return self.chain * cost_ratio

    def speedup(self, tau: float | None, cost_ratio: float | None) -> float | None:
        """DDTREE ÷ DFLASH tokens per second: (τ ÷ DFLASH's τ) ÷ the round cost ratio."""
        return None if tau is None or cost_ratio is None else tau / self.chain / cost_ratio

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "dflash": self.chain,
            "budgets": {str(b): t for b, t in sorted(self.budgets.items())},
        }


# The DDTree paper's budget sweep (Fig. 3): Qwen3-8B with z-lab/Qwen3-8B-DFlash-b16, MATH-500,
# T = 0, batch 1, HF Transformers; values read off the plot (±0.05), B = 512 from Table 1.
# Source: /work/shared/docs/research/ddtree_algorithm_and_peers.md, "Budget sweep".
PAPER_QWEN3_8B = AcceptanceCurve(
    name="DDTree paper, Qwen3-8B, MATH-500, T = 0",
    source="DDTree paper Fig. 3, values read off the plot ±0.05; B = 512 and DFlash from Table 1",
    chain=7.79,
    budgets={16: 8.6, 32: 9.27, 64: 9.75, 128: 10.2, 256: 10.42, 512: 10.73, 1024: 10.97},
)


class BadCurve(ValueError):
    """An acceptance-curve file that cannot be read as one."""


def load_curve(path: Path) -> AcceptanceCurve:
    """A curve from JSON (``{"name": ..., "dflash": τ, "budgets": {"16": τ, ...}}``) or CSV
    (rows ``budget,acceptance``, one row ``dflash,τ``; a header row is skipped); a bench report
    (bench.json) gives its own measured tokens per round (`measured_curve`)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise BadCurve(f"cannot read acceptance curve {path}: {error.strerror}") from None
    if path.suffix.lower() == ".csv":
        return _curve_from_csv(text, path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadCurve(f"acceptance curve {path} is not JSON (line {error.lineno}): {error.msg}") from None
    if isinstance(data, dict) and "cells" in data and "setting" in data:
        return measured_curve(data, source=str(path))
    if not isinstance(data, dict) or "dflash" not in data or not isinstance(data.get("budgets"), dict):
        raise BadCurve(f"acceptance curve {path} needs a \"dflash\" τ and a \"budgets\" object of budget: τ")
    budgets = {_budget(key, path): _tau(value, path) for key, value in data["budgets"].items()}
    return _checked(AcceptanceCurve(str(data.get("name") or path.name), str(path), _tau(data["dflash"], path), budgets), path)


def _curve_from_csv(text: str, path: Path) -> AcceptanceCurve:
    chain, budgets = None, {}
    for row in csv.reader(io.StringIO(text)):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 2:
            raise BadCurve(f"acceptance curve {path}: row {','.join(row)!r} is not budget,acceptance")
        key, value = (cell.strip() for cell in row)
        if key.lower() == "dflash":
            chain = _tau(value, path)
        elif key.isdigit():
            budgets[_budget(key, path)] = _tau(value, path)
        elif budgets or chain is not None:
            raise BadCurve(f"acceptance curve {path}: {key!r} is neither a budget nor dflash")
    if chain is None:
        raise BadCurve(f"acceptance curve {path} has no dflash row (DFLASH's τ)")
    return _checked(AcceptanceCurve(path.stem, str(path), chain, budgets), path)


def _budget(key: Any, path: Path) -> int:
    try:
        budget = int(key)
    except (TypeError, ValueError):
        raise BadCurve(f"acceptance curve {path}: budget {key!r} is not an integer") from None
    if budget < 1:
        raise BadCurve(f"acceptance curve {path}: budget {budget} is below 1")
    return budget


def _tau(value: Any, path: Path) -> float:
    try:
        tau = float(value)
    except (TypeError, ValueError):
        raise BadCurve(f"acceptance curve {path}: acceptance {value!r} is not a number") from None
    if not math.isfinite(tau) or tau < 1:
        raise BadCurve(f"acceptance curve {path}: acceptance {value!r} is below 1 token per round")
    return tau


def _checked(curve: AcceptanceCurve, path: Path) -> AcceptanceCurve:
    if not curve.budgets:
        raise BadCurve(f"acceptance curve {path} lists no budget")
    return curve


def measured_curve(report: Mapping[str, Any], *, source: str = "bench report") -> AcceptanceCurve:
    """The tokens per round a real-weight bench run measured, at T = 0 and its smallest batch
    size: DFLASH's (the faster mode's) and each fixed DDTREE budget's (the chain control's are
    DFLASH's chain's, no budget's)."""
    if not report["setting"].get("real_weights"):
        raise BadCurve(f"{source}: a random-weight run accepts nothing; its tokens per round are no curve")
    greedy = [r for r in report["cells"] if r["status"] == "ok" and r["temperature"] == 0 and r.get("tokens_per_round")]
    if not greedy:
        raise BadCurve(f"{source}: no greedy cell measured tokens per round")
    smallest = min(r["batch_size"] for r in greedy)
    here = [r for r in greedy if r["batch_size"] == smallest]
    chain = [r for r in here if r["algorithm"] == DFLASH]
    trees = [r for r in here if fixed_budget(r)]
    if not chain or not trees:
        raise BadCurve(f"{source}: needs DFLASH and fixed-budget DDTREE cells at T = 0")
    fastest_chain = max(chain, key=lambda r: r.get("tok_per_s") or 0)
    budgets: dict[int, float] = {}
    for row in sorted(trees, key=lambda r: r.get("tok_per_s") or 0):  # the faster mode's wins
        budgets[int(row["budget"])] = float(row["tokens_per_round"])
    name = f"measured: {report['setting']['name']} at bs {smallest}, T = 0"
    return AcceptanceCurve(name, source, float(fastest_chain["tokens_per_round"]), budgets)
