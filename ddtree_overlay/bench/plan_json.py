"""A sweep plan (`bench.plan`) as JSON: the plan file `in_target/engine_runner.py` reads, and
the description a dry run prints (with each group's attention backend, and, on a hybrid target,
each group's verify state: snapshots, or DDTREE's flat state, per `bench.state_memory`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import (
    BLOCK_SIZE,
    CHAIN_DRAFT,
    DDTREE,
    DFLASH,
    EAGLE3,
    NEXTN,
    TARGET_ONLY,
    verify_width,
)
from ddtree_overlay.bench.attention import backend_text, planned_backend
from ddtree_overlay.bench.capacity import DRY_RUN_LINE
from ddtree_overlay.bench.estimates import STREAM_WARM_UP_TOKENS
from ddtree_overlay.bench.plan import SweepPlan
from ddtree_overlay.bench.state_memory import memory_entry, state_of


def runner_plan(
    plan: SweepPlan,
    *,
    deadline: float | None,
    profile_path: Path | None,
    max_family_failures: int = 2,
) -> dict[str, Any]:
    """The JSON plan `in_target/engine_runner.py` reads: an arm per engine run, in run order.
    The primer's arm is tagged (``primer``) and its own family: its failure does not count
    against its algorithm's engines."""
    arms = []
    for run in plan.runs:
        group = run.group
        cells = []
        for cell in run.cells:
            sampling = {
                "temperature": cell.temperature,
                "max_new_tokens": plan.max_new_tokens,
                "ignore_eos": not plan.config.stop_at_eos,
            }
            entry = {
                "name": cell.name,
                "batch_size": cell.batch_size,
                "prompts": cell.prompts,
                "sampling": sampling,
                "top2": cell.top2,
                "est_s": cell.est_s,
            }
            if cell.stream:
                entry["stream"] = {"concurrency": cell.batch_size, "warmup_s": cell.warmup_s, "window_s": cell.window_s}
            cells.append(entry)
        arm = {
            "name": run.name,
            "repeat": run.repeat,
            "family": run.name if run.primer else group.arm.algorithm,
            "engine": dict(group.engine),
            "est_start_s": run.est_start_s,
            "profile": group.arm.algorithm == DDTREE,
            "cells": cells,
        }
        env = group.arm.engine_env(hybrid=plan.setting.hybrid)
        arms.append(arm | ({"env": env} if env else {}) | ({"primer": True} if run.primer else {}))
    n_prompts = max((c.prompts for c in plan.cells), default=0)
    return {
        "target": str(plan.setting.target),
        "draft": str(plan.setting.draft),
        "prompts": [list(p) for p in plan.setting.prompts[:n_prompts]],
        "deadline": deadline,
        "profile_path": str(profile_path) if profile_path else None,
        "max_family_failures": max_family_failures,
        # whichever engine starts first compiles the kernels, also when the first arm is skipped
        "cold_start_s": plan.setting.cost.first_start_s(first=True, compiles=False),
        "stream_warm_up_tokens": STREAM_WARM_UP_TOKENS,
        "arms": arms,
    }


def state_memory(plan: SweepPlan) -> dict[str, list[dict[str, Any]]] | None:
    """On a hybrid target: per speculative group, the verify state its width keeps at each
    concurrency (batch size) its cells run, in the mode the group's engine runs (DDTREE's from
    the plan's config, the others' snapshots; `state_memory.memory_entry`); None for a target
    without Gated-DeltaNet layers."""
    shape = plan.setting.facts.gated_deltanet
    if shape is None:
        return None
    memory = {}
    for group in plan.groups:
        arm = group.arm
        if arm.algorithm == TARGET_ONLY:
            continue
        if arm.algorithm == DFLASH:
            width = BLOCK_SIZE
        elif arm.algorithm in (NEXTN, EAGLE3):
            width = CHAIN_DRAFT["speculative_num_draft_tokens"]
        else:
            width = verify_width(arm.policy_or_fail.widest)
        state = state_of(arm.algorithm, plan.config.hybrid_state)
        memory[group.name] = [
            memory_entry(shape, state, verify_width=width, concurrency=bs, tp_size=plan.config.tp_size)
            for bs in sorted({c.batch_size for c in group.cells})
        ]
    return memory


def attention_backends(plan: SweepPlan) -> list[dict[str, Any]]:
    """Each planned attention backend (`bench.attention`), in prose, with the groups that ask for
    it, in plan order."""
    groups: dict[str, list[str]] = {}
    for group in plan.groups:
        groups.setdefault(planned_backend(group.engine), []).append(group.name)
    return [{"backend": backend, "text": backend_text(backend), "groups": names} for backend, names in groups.items()]


def describe_plan(plan: SweepPlan) -> dict[str, Any]:
    """JSON-ready summary: the groups, every engine run in order (the primer first, tagged), the
    estimates, and on a hybrid target DDTREE's state mode, each group's verify state and, with
    DDTREE engines, that they serve SGLang's cap of concurrent requests (``capacity``)."""
    fits = list(zip(plan.runs, plan.expected_to_fit, strict=True))
    timed = [(r, f) for r, f in fits if not r.primer]
    first_runs: dict[str, Any] = {}
    for run in plan.timed_runs:
        first_runs.setdefault(run.group.name, run)
    return {
        "setting": plan.setting.name,
        "max_new_tokens": plan.max_new_tokens,
        "repeats": plan.config.repeats,
        "estimated_minutes": round(plan.est_s / 60, 1),
        "max_minutes": plan.config.max_minutes,
        "groups": [
            {
                "name": g.name,
                **g.arm.row(),
                "engine": dict(g.engine),
                "attention_backend": planned_backend(g.engine),
                "cells": [c.name for c in g.cells],
                "estimated_s": round(first_runs[g.name].est_s),
                "expected_to_fit": any(f for r, f in timed if r.group.name == g.name and r.repeat == 1),
                "expected_repeats": sum(f for r, f in timed if r.group.name == g.name),
            }
            for g in plan.groups
        ],
        "engines": [
            {
                "group": r.group.name,
                "repeat": r.repeat,
                "cells": len(r.cells),
                "estimated_s": round(r.est_s),
                "expected_to_fit": fit,
                **({"primer": True} if r.primer else {}),
            }
            for r, fit in fits
        ],
        "attention_backends": attention_backends(plan),
        "hybrid_state": plan.config.hybrid_state if plan.setting.hybrid else None,
        "state_memory": state_memory(plan),
        "capacity": DRY_RUN_LINE if plan.setting.hybrid and any(g.arm.algorithm == DDTREE for g in plan.groups) else None,
        "notes": list(plan.notes),
    }
