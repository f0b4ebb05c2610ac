"""The continuous-batching section of the bench report (`steady`) as markdown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddtree_overlay.bench.arms import Arm
from ddtree_overlay.bench.attention import backend_cells
from ddtree_overlay.bench.compiling import rate_text
from ddtree_overlay.bench.policy_markdown import policy_lines
from ddtree_overlay.bench.table_cells import DASH, cell

STEADY_TITLE = "Steady-state serving: continuous batching"


def _columns(steady: Mapping[str, Any]) -> list[tuple[float, int]]:
    return sorted({(float(r["temperature"]), int(r["concurrency"])) for r in steady["rows"]})


def _versus_text(versus: Mapping[str, Any] | None, what: str) -> str | None:
    if not versus:
        return None
    return f"x{versus['ratio']:.2f} {what} (worst x{versus['worst']:.2f})"


def _cell_text(row: Mapping[str, Any]) -> str:
    if row["status"] != "ok":
        return row["status"]
    text = f"{row['tok_per_s']:.0f}"
    if row["measured_engines"] > 1:
        text += f" ({row['tok_per_s_min']:.0f}{DASH}{row['tok_per_s_max']:.0f})"
    base = Arm.parse(row["vs_dflash"]["base_group"]) if row.get("vs_dflash") else None
    dflash = base.label if base and base.backend else "DFLASH"  # named where it ran on a further backend
    extra = [t for t in (_versus_text(row.get("vs_dflash"), dflash), _versus_text(row.get("vs_target"), "target"))
             if t]
    return text + (f"; {', '.join(extra)}" if extra else "")


def steady_table(steady: Mapping[str, Any], backends: Mapping[str, str] | None = None) -> str:
    """Arms x (T, concurrency): median tok/s (slowest to fastest engine), ratios of medians; with
    ``backends`` (group name -> attention backend, `attention.arm_backends`), each arm's."""
    columns = _columns(steady)
    by_arm: dict[str, dict[tuple[float, int], Mapping[str, Any]]] = {}
    for row in steady["rows"]:
        by_arm.setdefault(Arm.of_row(row).label, {})[(float(row["temperature"]), int(row["concurrency"]))] = row
    head = ["arm", *(["attention"] if backends else []), *(f"T={t:g} c={c}" for t, c in columns)]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for label, cells in by_arm.items():
        texts = backend_cells(backends, cells.values())
        texts += [_cell_text(cells[key]) if key in cells else DASH for key in columns]
        lines.append(f"| {label} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def _per_engine(row: Mapping[str, Any]) -> str:
    return ", ".join(rate_text(e) for e in row["engines"]) or DASH


def _host_text(host: Mapping[str, Any] | None) -> str:
    """The median engine's window: busy cores of all, and its busiest process (the scheduler,
    as a rule: a host-bound arm keeps it near 1.0)."""
    if not host:
        return DASH
    busiest = (host.get("processes") or [None])[0]
    process = f"; {busiest['comm']} {busiest['cpu_per_wall']:.2f}" if busiest else ""
    return f"{cell(host.get('busy_cores'), '.1f')} of {host['cpus']}{process}"


def steady_detail_table(steady: Mapping[str, Any]) -> str:
    """A row per continuous-batching cell: each engine's tok/s, the requests the window held,
    acceptance, DDTREE's round split and the host (the median engine's)."""
    head = (
        "| arm | c | T | tok/s median | per engine | running (mean) | requests in window | tok/round "
        "| DDTREE round ms (draft / verify / other) | busy cores; busiest engine process CPU s/s |"
    )
    lines = [head, "|---" * 10 + "|"]
    for row in steady["rows"]:
        split = (row.get("profile") or {}).get("ms_per_round") or {}
        round_text = (
            " / ".join(cell(split.get(stage), ".2f") for stage in ("draft", "verify", "other")) if split else DASH
        )
        reason = f": {row['reason']}" if row.get("reason") else ""
        lines.append(
            f"| {Arm.of_row(row).label} | {row['concurrency']} | {row['temperature']:g} | "
            f"{cell(row.get('tok_per_s'), '.0f') if row['status'] == 'ok' else row['status'] + reason} | "
            f"{_per_engine(row)} | {cell(row.get('mean_running'), '.1f')} | {cell(row.get('requests'), 'd')} | "
            f"{cell(row.get('tokens_per_round'), '.2f')} | {round_text} | {_host_text(row.get('host'))} |"
        )
    return "\n".join(lines)


def steady_section(report: Mapping[str, Any], backends: Mapping[str, str] | None = None) -> list[str]:
    """The section's lines (``backends`` as `steady_table` takes them); none when the report has
    no continuous-batching cells."""
    steady = report.get("steady")
    if not steady:
        return []
    engines = steady["engines_per_arm"]
    order = {"alternate": "every other round reversed", "cycle": "the same order every round",
             "shuffle": f"shuffled per round (seed {report['config'].get('order_seed', 0)})"}[steady["engine_order"]]
    return [
        f"## {STEADY_TITLE}",
        "",
        f"Each cell keeps `c` requests running ({report['config']['max_new_tokens']} new tokens on average, "
        "each request's length spread over 0.5 to 1.5x that so requests end apart, ignore_eos), a finished "
        "request replaced at once by the next prompt (its first two tokens varied, so nothing is served "
        f"from the prefix cache); after {steady['warmup_s']:g} s of serving, "
        f"tok/s = tokens emitted in the next {steady['window_s']:g} s ÷ {steady['window_s']:g} s (a "
        "request's tokens spread evenly over its submit-to-finish time). "
        + (
            f"{engines} engines per arm, in rounds ({order}): tok/s is the median over the engines, "
            f"(slowest{DASH}fastest) beside it; x DFLASH and x target are ratios of medians (DFLASH in its faster "
            "scheduling mode), worst = this arm's slowest engine ÷ the other's fastest."
            if engines > 1
            else "One engine per arm: a ratio is one engine against another (`--engines-per-arm 3` "
            "gives medians and the spread)."
        )
        + " Ratios hold within this command only.",
        "",
        steady_table(steady, backends),
        "",
        steady_detail_table(steady),
        *policy_lines(
            steady["rows"],
            "Budgets the adaptive and schedule arms' profiled rounds took inside each cell's timed window "
            "(the median engine's; rounds per budget):",
            "the window's last profiled rounds",
        ),
        "",
    ]
