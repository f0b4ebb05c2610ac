"""The bench report's PNG plots (needs matplotlib): speedup and acceptance length against the
budget (titled with DDTREE's and DFLASH's attention backends where they differ), and DDTREE's
round time by stage."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import DDTREE, DFLASH, BudgetPolicy, policy_label
from ddtree_overlay.bench.attention import versus_backends
from ddtree_overlay.bench.round_split import STAGES

MATPLOTLIB_MISSING = (
    "plots skipped: matplotlib is not installed in the tool's interpreter "
    "(`pip install 'ddtree-overlay[bench]'`)"
)


def _series(
    rows: Iterable[Mapping[str, Any]], key: str, *, overlap: bool = True
) -> dict[tuple[float, int], list[tuple[int, float]]]:
    """(T, bs) -> [(budget, value)] over fixed-budget DDTREE cells of one scheduling mode,
    sorted by budget."""
    series: dict[tuple[float, int], list[tuple[int, float]]] = {}
    for row in rows:
        fixed = row["algorithm"] == DDTREE and not policy_label(row) and not row.get("chain")
        if fixed and row["overlap"] == overlap and row.get(key) is not None:
            series.setdefault((row["temperature"], row["batch_size"]), []).append((row["budget"], row[key]))
    return {k: sorted(v) for k, v in series.items()}


def _flat(
    rows: Iterable[Mapping[str, Any]], algorithm: str, key: str, *, overlap: bool = True, policy: str | None = None
) -> dict[tuple[float, int], float]:
    """One arm's values per (T, bs): DFLASH's, or a DDTREE policy arm's (``policy_label``)."""
    return {
        (r["temperature"], r["batch_size"]): r[key]
        for r in rows
        if r["algorithm"] == algorithm and policy_label(r) == policy and not r.get("chain")
        and r["overlap"] == overlap and r.get(key) is not None
    }


def _plot_lines(ax: Any, report: Mapping[str, Any], temp: float, *, key: str, colours: Sequence[str]) -> list[int]:
    """One panel's DDTREE curves and DFLASH levels per batch size (adaptive budgets and a
    schedule, where run: thin levels, the schedule's thicker); with overlap scheduling solid and
    dashed, without it (where DDTREE ran that way too) dotted and dash-dotted."""
    budgets: set[int] = set()
    policies = sorted({label for r in report["cells"] if (label := policy_label(r))})
    for overlap, marker, ddtree_style, dflash_style, mode in (
        (True, "o", "-", "--", ""),
        (False, "s", ":", "-.", " no overlap"),
    ):
        series = _series(report["cells"], key, overlap=overlap)
        if not overlap and not series:  # DDTREE ran with overlap only: DFLASH's other mode is noise
            continue
        dflash = _flat(report["cells"], DFLASH, key, overlap=overlap)
        levels = {p: _flat(report["cells"], DDTREE, key, overlap=overlap, policy=p) for p in policies}
        for i, bs in enumerate(sorted(report["config"]["batch_sizes"])):
            colour = colours[i % len(colours)]
            points = series.get((temp, bs), [])
            if points:
                ax.plot(*zip(*points, strict=True), marker=marker, linestyle=ddtree_style, color=colour,
                        label=f"DDTREE{mode} bs={bs}")
                budgets.update(b for b, _ in points)
            if (temp, bs) in dflash:
                ax.axhline(dflash[(temp, bs)], color=colour, linestyle=dflash_style, label=f"DFLASH{mode} bs={bs}")
            for j, (policy, values) in enumerate(levels.items()):
                if (temp, bs) in values:
                    ax.axhline(values[(temp, bs)], color=colour, linestyle=ddtree_style, linewidth=0.8 + 0.8 * j,
                               label=f"DDTREE {policy}{mode} bs={bs}")
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
                    if r["algorithm"] == DDTREE and r.get("budget") is not None
                    and r.get("reference_acceptance_length") is not None
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
    versus = versus_backends(report["groups"])
    fig.suptitle(f"{report['setting']['name']}: {title}" + (f" ({versus})" if versus else ""))
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
        mine = sorted((r for r in rows if r["batch_size"] == bs), key=lambda r: (BudgetPolicy.of_row(r).sort_key, not r["overlap"]))
        labels = [BudgetPolicy.of_row(r).label.removeprefix("B=") + ("" if r["overlap"] else "\nno overlap") for r in mine]
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
    """speedup.png, acceptance.png and round_time.png; (files, why not) without matplotlib.
    They plot the waves cells: a sweep of continuous-batching cells only gets none."""
    if not report["cells"]:
        return [], None
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
