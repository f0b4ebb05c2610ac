"""The continuous-batching cells of a bench report: steady-state tokens/s per arm and
concurrency, over every engine that measured it.

A continuous-batching cell (`plan.Cell.stream`) keeps ``concurrency`` requests running and
counts the tokens emitted in a timed window (`in_target/engine_runner.run_stream_cell`). With
several engines per arm (``--engines-per-arm``), a cell's tok/s is the median over its engines,
with the slowest and fastest beside it; ratios between arms are ratios of those medians, and
the worst case is one arm's slowest engine against the other's fastest. Ratios hold within one
command only: the same arm moves far more between commands than between its engines. An engine
that was compiling during its window (`bench.compiling`) is listed, marked, and left out of the
cell's median and of every ratio and worst case.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.arms import DDTREE, DFLASH, TARGET_ONLY
from ddtree_overlay.bench.compiling import compiling_note, window_compiler
from ddtree_overlay.bench.plan import Cell, EngineGroup, SweepPlan
from ddtree_overlay.bench.records import Records, planned_repeats, repeat_label
from ddtree_overlay.bench.round_split import profile_split

ALL_COMPILING = "every engine was compiling during its timed window"
# A cell's requests running: the stream keeps ``concurrency`` in flight, the engine runs at most
# its cap of them (`bench.capacity`) and queues the rest, so a capped engine's running count is
# its cap, whatever the stream sends.
# A window whose requests ran this far below the concurrency asked for did not hold the batch
# (SGLang capped the running requests, or the clients could not keep up): named in the notes.
HELD_CONCURRENCY = 0.9


def _engine_entry(
    group: EngineGroup,
    repeat: int,
    record: Mapping[str, Any] | None,
    engine: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One engine's measurement of the cell."""
    entry: dict[str, Any] = {"repeat": repeat}
    if record is None:
        return entry | {"status": "not run", "reason": None}
    if not record.get("ok"):
        skipped = record.get("skipped")
        return entry | {"status": "skipped" if skipped else "failed", "reason": skipped or record.get("error")}
    metas = record.get("meta") or ()
    in_flight = record.get("mean_running")  # the stream's requests submitted and not finished
    cap = (engine or {}).get("requests_at_once")
    rounds = sum(int(m.get("spec_verify_ct") or 0) for m in metas)
    completion = sum(int(m.get("completion_tokens") or 0) for m in metas)
    entry |= {
        "status": "ok",
        "reason": None,
        "tok_per_s": record["tok_per_s"],
        "mean_running": in_flight if in_flight is None or cap is None else min(in_flight, cap),
        "requests": record.get("requests_in_window"),
        "tokens_per_round": completion / rounds if rounds and group.arm.algorithm != TARGET_ONLY else None,
        "host": record.get("host"),
        "compiling": window_compiler(record.get("host")),
    }
    if group.arm.algorithm == DDTREE and engine is not None:
        entry["profile"] = profile_split(engine.get("profile") or (), record["t_start"], record["t_end"])
    return entry


def _median_entry(ok: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The median engine by tok/s (of two middle ones the slower)."""
    ranked = sorted(ok, key=lambda e: e["tok_per_s"])
    return ranked[(len(ranked) - 1) // 2]


def steady_row(
    cell: Cell,
    group: EngineGroup,
    records: Records,
    engines: Records,
    repeats: Sequence[int],
) -> dict[str, Any]:
    """A continuous-batching cell over its engines: median, slowest and fastest tok/s and
    seconds per request and round (each engine's tokens per round ÷ its tok/s); the median
    engine's tokens per round, requests running and round split; each engine's entry.
    Engines that were compiling in their window count in none of these (``compiling_engines``);
    where every engine that ran was, the cell's status is "compiling" and it has no tok/s."""
    per_engine = [
        _engine_entry(group, k, records.get((cell.name, k)), engines.get((group.name, k)))
        for k in repeats
    ]
    ran = [e for e in per_engine if e["status"] == "ok"]
    ok = [e for e in ran if not e["compiling"]]
    failed = [e for e in per_engine if e["status"] == "failed"]
    row: dict[str, Any] = {
        "name": cell.name,
        "group": group.name,
        **group.arm.row(),
        "concurrency": cell.batch_size,
        "temperature": cell.temperature,
        "window_s": cell.window_s,
        "warmup_s": cell.warmup_s,
        "engines": per_engine,
        "measured_engines": len(ok),
        "compiling_engines": len(ran) - len(ok),
    }
    if failed:
        return row | {"status": "failed", "reason": f"engine {failed[0]['repeat']}: {failed[0]['reason']}"}
    if ran and not ok:
        return row | {"status": "compiling", "reason": ALL_COMPILING}
    if not ok:
        first = per_engine[0] if per_engine else {"status": "not run", "reason": None}
        return row | {"status": first["status"], "reason": first["reason"]}
    rates = [e["tok_per_s"] for e in ok]
    # seconds per request and round, each engine's own: its tokens per round ÷ its tok/s
    costs = [e["tokens_per_round"] / e["tok_per_s"] for e in ok if e.get("tokens_per_round") and e["tok_per_s"]]
    median = _median_entry(ok)
    return row | {
        "status": "ok",
        "reason": None,
        "tok_per_s": statistics.median(rates),
        "tok_per_s_min": min(rates),
        "tok_per_s_max": max(rates),
        "request_round_s": statistics.median(costs) if costs else None,
        "request_round_s_min": min(costs, default=None),
        "request_round_s_max": max(costs, default=None),
        "median_engine": median["repeat"],
        "tokens_per_round": median.get("tokens_per_round"),
        "mean_running": median.get("mean_running"),
        "requests": median.get("requests"),
        "profile": median.get("profile"),
        "host": median.get("host"),
    }


def _versus(row: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, float] | None:
    """Ratio of medians, and the worst case: this arm's slowest engine ÷ the base's fastest."""
    if base is None or not base.get("tok_per_s"):
        return None
    return {
        "ratio": row["tok_per_s"] / base["tok_per_s"],
        "worst": row["tok_per_s_min"] / base["tok_per_s_max"],
        "base_group": base["group"],
    }


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each measured row against target-only and against DFLASH's faster scheduling mode (by
    median) at its concurrency and temperature."""
    ok = [r for r in rows if r["status"] == "ok"]

    def base(algorithm: str, key: tuple[int, float]) -> Mapping[str, Any] | None:
        here = [r for r in ok if r["algorithm"] == algorithm and (r["concurrency"], r["temperature"]) == key]
        return max(here, key=lambda r: r["tok_per_s"], default=None)

    for row in ok:
        key = (row["concurrency"], row["temperature"])
        if row["algorithm"] != TARGET_ONLY:
            row["vs_target"] = _versus(row, base(TARGET_ONLY, key))
        if row["algorithm"] == DDTREE:
            row["vs_dflash"] = _versus(row, base(DFLASH, key))


def steady_state(plan: SweepPlan, records: Records, engines: Records) -> dict[str, Any] | None:
    """The report's ``steady`` section: a row per continuous-batching cell, with ratios and
    notes; None when the plan has no such cells."""
    planned = planned_repeats(plan)
    rows = [
        steady_row(cell, group, records, engines, planned.get(cell.name, ()))
        for group in plan.groups
        for cell in group.cells
        if cell.stream
    ]
    if not rows:
        return None
    add_ratios(rows)
    notes, issues = [], []
    repeats = plan.config.repeats
    for row in rows:
        for entry in row["engines"]:
            label = repeat_label(row["name"], entry["repeat"], repeats)
            if entry["status"] == "failed":
                issues.append(f"{label}: {entry['reason']}")
            if entry.get("compiling"):
                notes.append(compiling_note(label, entry))
            running = entry.get("mean_running")
            if entry["status"] == "ok" and running is not None and running < HELD_CONCURRENCY * row["concurrency"]:
                notes.append(
                    f"{label}: {running:.1f} requests running on average against {row['concurrency']} "
                    "asked for (SGLang capped its running batch, or the host could not keep the stream full)"
                )
        if row["status"] == "compiling":
            notes.append(f"{row['name']}: no tok/s: {ALL_COMPILING}")
    short = [
        f"{row['name']} ({row['measured_engines']} of {len(row['engines'])})"
        for row in rows
        if row["status"] not in ("failed", "compiling")
        and row["measured_engines"] + row["compiling_engines"] < len(row["engines"])
    ]
    if short:
        notes.append(
            f"{len(short)} continuous-batching cell(s) measured by fewer engines than planned (time box, "
            f"or their engine failed): {', '.join(short)}"
        )
    config = plan.config
    return {
        "concurrencies": list(config.concurrencies),
        "warmup_s": config.warmup_s,
        "window_s": config.window_s,
        "engines_per_arm": repeats,
        "engine_order": config.engine_order,
        "rows": rows,
        "notes": notes,
        "issues": issues,
    }
