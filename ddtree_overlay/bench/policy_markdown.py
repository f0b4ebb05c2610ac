"""Which budgets the adaptive and schedule arms' profiled DDTREE rounds took in each cell, and
the adaptive policy's view (`profile_split`'s ``budgets`` and ``adaptive``), as markdown: the
waves cells' (`markdown`) and the continuous-batching cells' (`steady_markdown`) alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.arms import budget_order, parse_budget, policy_label


def policy_lines(rows: Sequence[Mapping[str, Any]], intro: str, end: str) -> list[str]:
    """``intro``, then per row of an adaptive or schedule arm with profiled rounds: its rounds per
    budget, and the policy's view from the last profile window counted (``end`` says where
    that was); none when no row has them."""
    rows = [r for r in rows if policy_label(r) and (r.get("profile") or {}).get("budgets")]
    if not rows:
        return []
    lines = ["", intro, ""]
    for row in rows:
        counts = ", ".join(f"B={b}: {n}" for b, n in row["profile"]["budgets"].items())
        lines.append(f"- {row['name']}: {counts}")
        view = row["profile"].get("adaptive")
        if view:
            lines.append(f"  - policy at {end}: {policy_view(view)}")
    return lines


def policy_view(view: Mapping[str, Any]) -> str:
    """One line of an adaptive policy's snapshot: per graph batch size (and count of
    grammar-constrained requests, timed apart), round ms per width plus the shared gap and the
    width it chooses; then Φ̄ per width and c. Batch sizes and widths in ascending order (the
    profile's JSON sorts them as text)."""
    parts = []
    for bucket, widths in sorted(view.get("round_ms", {}).items(), key=lambda item: bucket_order(item[0])):
        ordered = sorted(widths.items(), key=lambda item: budget_order(parse_budget(item[0])))
        rounds = " ".join(f"{w}:{ms:.2f}" for w, ms in ordered)
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


def bucket_order(bucket: str) -> tuple[int, int]:
    """A snapshot's batch-size key, ``"16"`` or ``"16 grammar 4"``, as numbers."""
    size, _, grammar = bucket.partition(" grammar ")
    return int(size), int(grammar or 0)
