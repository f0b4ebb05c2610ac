"""`compare_runs`'s result as a markdown table, a JSON file and a plot."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.plots import MATPLOTLIB_MISSING
from ddtree_overlay.bench.table_cells import DASH, cell


def _greedy(method: Mapping[str, Any]) -> str:
    if method["greedy_equal"] is None:
        return "n/a (T > 0)"
    text = f"{method['greedy_equal']}/{method['prompts']} equal"
    if method["greedy_unexplained"]:
        text += f", {method['greedy_unexplained']} beyond noise"
    return text


def _verdict(method: Mapping[str, Any]) -> str:
    within = method["acceptance_within"]
    return DASH if within is None else ("within 3 %" if within else "OFF")


def markdown_table(result: Mapping[str, Any]) -> str:
    offline = result["offline"]
    lines = [
        f"Offline run `{offline['path']}` ({offline['target']}, T={offline['temperature']:g}, "
        f"{offline['max_new_tokens']} new tokens) against {result['side']}: "
        f"{result['matched_prompts']} of {offline['turns']} prompts matched",
        "",
        "| method | greedy vs offline target-only | acceptance offline | acceptance | ratio | verdict "
        "| tok/s offline | tok/s | speedup offline | speedup |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in result["methods"]:
        lines.append(
            f"| {m['arm']} | {_greedy(m)} | {cell(m['offline_acceptance'], '.3f')} | {cell(m['acceptance'], '.3f')} "
            f"| {cell(m['acceptance_ratio'], '.4f')} | {_verdict(m)} | {cell(m['offline_tokens_per_s'], '.1f')} "
            f"| {cell(m['tokens_per_s'], '.1f')} | {cell(m['offline_speedup'], '.2f')}x | {cell(m['speedup'], '.2f')}x |"
        )
    for row in result["prompts"]:
        if row["greedy"] == "diverged":
            d = row["divergence"]
            lines.append(
                f"- {row['arm']}, turn {row['turn']}: first divergence at token {d['index']} "
                f"({d['offline_token']} offline, {d['token']} here), target margin {cell(d['margin'], '.3f')}"
            )
    for name in result["missing_arms"]:
        lines.append(f"- not replayed: {name}")
    if result["unmatched_turns"]:
        lines.append(f"- turns without a replayed prompt: {result['unmatched_turns']}")
    lines += ["", "verdict: " + ("agrees" if result["agrees"] else "DISAGREES")]
    return "\n".join(lines) + "\n"


def write_report(result: Mapping[str, Any], out: Path) -> tuple[list[Path], str | None]:
    """compare.json, compare.md and compare.png in `out`; (files, why the plot is missing)."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "compare.json", out / "compare.md"]
    files[0].write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    files[1].write_text(markdown_table(result))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return files, MATPLOTLIB_MISSING
    files.append(_plot(plt, result, out / "compare.png"))
    return files, None


def _plot(plt: Any, result: Mapping[str, Any], path: Path) -> Path:
    """Acceptance and speedup per method, offline bars beside the replay's."""
    methods = result["methods"]
    labels = [m["arm"] for m in methods]
    xs = range(len(methods))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "acceptance", "acceptance length"), (axes[1], "speedup", "speedup vs target-only")):
        offline = [m[f"offline_{key}"] or 0.0 for m in methods]
        replay = [m[key] or 0.0 for m in methods]
        ax.bar([x - 0.2 for x in xs], offline, width=0.4, label="offline run")
        ax.bar([x + 0.2 for x in xs], replay, width=0.4, label=result["side"])
        ax.set_xticks(list(xs), labels, rotation=20)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['offline']['target']}: offline run vs {result['side']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
