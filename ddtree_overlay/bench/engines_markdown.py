"""The bench report's engines table: a row per engine (per engine run with repeats), what each
served and ran."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddtree_overlay.bench import attention
from ddtree_overlay.bench.capacity import served_fewer_notes
from ddtree_overlay.bench.engine_paths import paths_text
from ddtree_overlay.bench.table_cells import DASH, cell


def _run_cells(run: Mapping[str, Any], warmed: bool, at_once: bool, named: bool, pathed: bool) -> list[str]:
    """An engine run's status, start s, warm-up s (when ``warmed``), requests at once (when
    ``at_once``), health, attention backend (when ``named``) and DDTREE paths (when ``pathed``)."""
    status = run["status"] + (f": {run['reason']}" if run["reason"] else "")
    warm_up = [cell(run.get("warm_up_s"), ".1f")] if warmed else []
    served = [cell(run.get("requests_at_once"), "d")] if at_once else []
    backend = [attention.backend_text(run["attention_backend"])] if named else []
    paths = [paths_text(run.get("paths"))] if pathed else []
    return [status, cell(run["start_s"], ".1f"), *warm_up, *served, run["health"] or DASH, *backend, *paths]


def engines_table(report: Mapping[str, Any]) -> str:
    """A row per engine group, the untimed primer first; with several repeats, a row per engine
    run; the requests each served at once where the runs recorded them, the attention backend each
    ran where the arms ran more than one, the DDTREE paths each ran where recorded
    (`bench.engine_paths`), and the engines that served fewer than a cell asked for."""
    repeats = report["config"].get("repeats", 1) > 1
    rows = []  # (first cells, run)
    if report.get("primer"):
        rows.append(([f"primer (untimed): {report['primer']['group']}", *([DASH] if repeats else [])], report["primer"]))
    for group in report["groups"]:
        for run in group["repeats"] if repeats else [group]:
            rows.append(([group["name"], *([str(run["repeat"])] if repeats else [])], run))
    # runs recorded before these fields existed have neither
    warmed = any(run.get("warm_up_s") is not None for _, run in rows)
    at_once = any(run.get("requests_at_once") is not None for _, run in rows)
    named = attention.arm_backends(report["groups"]) is not None
    pathed = any(run.get("paths") for _, run in rows)
    columns = ["engine", *(["repeat"] if repeats else []), "status", "start s", *(["warm-up s"] if warmed else []),
               *(["requests at once"] if at_once else []), "health", *(["attention"] if named else []),
               *(["DDTREE paths"] if pathed else [])]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    lines += ["| " + " | ".join([*first, *_run_cells(run, warmed, at_once, named, pathed)]) + " |" for first, run in rows]
    fewer = served_fewer_notes(report)
    return "\n".join(lines + ([""] + [f"- {note}" for note in fewer] if fewer else []))
