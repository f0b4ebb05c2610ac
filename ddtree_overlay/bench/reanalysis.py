"""A finished bench run's report rebuilt from its raw records with this checkout's analysis, no
GPU: the plan from bench.json's setting and config, the cells from ``records.jsonl`` (or its
xz-packed copy, as under docs/bench/). The config and the context (commit, GPU, start time)
stay the run's own, and so do its acceptance-parity rows unless reference results are given."""

from __future__ import annotations

import dataclasses
import json
import lzma
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.analysis import analyse
from ddtree_overlay.bench.arms import BudgetPolicy
from ddtree_overlay.bench.correctness import parity_issue
from ddtree_overlay.bench.plan import PRIMER, BenchConfig, plan_sweep
from ddtree_overlay.bench.records import read_records
from ddtree_overlay.bench.settings import SETTINGS, make_setting
from ddtree_overlay.bench.state_memory import SNAPSHOT
from ddtree_overlay.bench.supervision import REFERENCE_RESULTS, load_references
from ddtree_overlay.engine.errors import bench_run_invalid

PROMPTS_FILE = "prompts.json"  # the chat prompts' token ids, in a run's --out
RECORDS_FILES = ("records.jsonl", "records.jsonl.xz")  # the runner's, or docs/bench/'s packed copy


def config_from_report(raw: Mapping[str, Any]) -> BenchConfig:
    """The config a bench report records (its ``config``), as the plan that made it read it:
    lists as tuples, the schedule from its flag text, absent fields (older reports) at their
    defaults, but for the primer, which they did not run, DDTREE's hybrid state, which was
    the snapshot one before reports recorded it, and the baseline arms' attention backend, which
    was every arm's one before."""
    known = {f.name for f in dataclasses.fields(BenchConfig)}
    values = {key: tuple(v) if isinstance(v, list) else v for key, v in raw.items() if key in known}
    values.setdefault("primer", False)
    values.setdefault("hybrid_state", SNAPSHOT)
    values.setdefault("baseline_attention_backend", values.get("attention_backend", BenchConfig.attention_backend))
    values["sglang_env"] = tuple(sorted(dict(values.get("sglang_env") or {}).items()))
    schedule = values.get("budget_schedule")
    if isinstance(schedule, str):
        values["budget_schedule"] = BudgetPolicy.parse_schedule(schedule).schedule if schedule else ()
    return BenchConfig(**values)


def _recorded_report(run: Path) -> dict[str, Any]:
    """The run's bench.json, once it and the records beside it are there to re-analyse."""
    try:
        old = json.loads((run / "bench.json").read_text())
    except FileNotFoundError:
        raise bench_run_invalid(run, "it has no bench.json") from None
    except (OSError, ValueError) as error:
        raise bench_run_invalid(run, f"its bench.json cannot be read ({type(error).__name__}: {error})") from None
    if not isinstance(old, dict) or not {"setting", "config", "context"} <= old.keys():
        raise bench_run_invalid(run, "its bench.json is not a bench report (no setting, config and context)")
    setting = old["setting"] if isinstance(old["setting"], dict) else {}
    name = setting.get("name")
    if name not in (*SETTINGS, "custom"):
        raise bench_run_invalid(run, f"its bench.json's setting is {name!r}, none of {', '.join(SETTINGS)} or custom")
    missing = [key for key in ("target", "draft") if name == "custom" and not setting.get(key)]
    if missing:
        raise bench_run_invalid(run, f"its bench.json's custom setting has no {' or '.join(missing)}")
    if not any((run / file).exists() for file in RECORDS_FILES):
        raise bench_run_invalid(run, f"it has neither {' nor '.join(RECORDS_FILES)}")
    return old


def reanalysed_report(run: Path, reference_dir: Path | None = None) -> dict[str, Any]:
    """The report of the run in ``run`` (a bench ``--out`` dir) from its records; with
    ``reference_dir`` (by default the run's own ``reference/``, where the bench writes the
    references it runs beside the sweep), acceptance parity against the offline reference
    results there."""
    old = _recorded_report(run)
    if reference_dir is None and (run / REFERENCE_RESULTS).is_dir():
        reference_dir = run / REFERENCE_RESULTS
    recorded = old["setting"]
    custom = recorded["name"] == "custom"
    chat = run / PROMPTS_FILE
    try:
        config = config_from_report(old["config"])
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise bench_run_invalid(run, f"its bench.json's config cannot be read ({type(error).__name__}: {error})") from None
    setting = make_setting(
        recorded["name"],
        scratch=run / "models",
        target=Path(recorded["target"]) if custom else None,
        draft=Path(recorded["draft"]) if custom else None,
        prompts=chat if chat.exists() else None,
        prompt_tokens=config.prompt_tokens,
        write=False,
        prompt_note=recorded.get("prompts"),
        eagle3_draft=Path(recorded["eagle3_draft"]) if recorded.get("eagle3_draft") else None,
    )
    # the NEXTN arm as the run had it (runs from before it existed had none; before the rule
    # that runs it without overlap scheduling on some targets, it ran with it; before that rule
    # was per backend, one reason held for every baseline backend)
    why = recorded.get("nextn_without_overlap") or {}
    if isinstance(why, str):
        why = dict.fromkeys(config.baseline_backends, why)
    setting = replace(setting, nextn=bool(recorded.get("nextn")), nextn_without_overlap=why)
    try:
        cells, engines = read_records(run / "records.jsonl")
    except (OSError, ValueError, KeyError, lzma.LZMAError) as error:
        raise bench_run_invalid(run, f"its records cannot be read ({type(error).__name__}: {error})") from None
    # The engines the run started, not what today's estimates would fit in its time box: its
    # primer where its records have one; cells it skipped say so in their own records.
    try:
        plan = plan_sweep(setting, replace(config, primer=(PRIMER, 1) in engines, max_minutes=None))
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise bench_run_invalid(run, f"its bench.json's config cannot be planned ({type(error).__name__}: {error})") from None
    references = load_references(plan, reference_dir) if reference_dir else None
    report = analyse(plan, cells, engines, references=references, context=old["context"])
    report["config"]["max_minutes"] = config.max_minutes
    if references is None and old.get("parity"):
        # Without the offline reference results the run's own parity rows (and their issues)
        # stand, rather than vanishing.
        repeats = plan.config.repeats
        report["parity"] = old["parity"]
        report["issues"] += [issue for row in old["parity"] if (issue := parity_issue(row, repeats))]
        report["notes"].append("acceptance parity as the run itself judged it (no --reference-dir)")
    report["setting"] |= {"prompts": recorded.get("prompts"), "eagle3_draft": recorded.get("eagle3_draft")}
    # what the run noted while planning (time box, primer, overlay): runs from before they were
    # kept have none
    report["plan_notes"] = old.get("plan_notes", [])
    report["notes"] = [*report["plan_notes"], *report["notes"]]
    return report
