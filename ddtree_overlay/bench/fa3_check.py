"""Before any engine starts: a sweep whose arms would run FA3 in an env without it is refused.

Every arm but DDTREE's runs `--baseline-attention-backend`, by default SGLang's own choice for
the GPU (`bench.attention`), which is fa3 on Hopper. An sglang-kernel trimmed of FA3 (no
``sgl_kernel.flash_ops``, as the bundles for the lent GPU machines are built) then kills the
engine at start: on an H200 (2026-12-04) DFLASH's first engine died with `ImportError: cannot
import name 'flash_ops' from 'sgl_kernel'`, after its start had been paid, and every DFLASH cell
went unmeasured. `in_target/fa3_probe.py` looks for flash_ops without importing CUDA code and,
only where it is missing, resolves the default backend of the engines asking for it as
`sglang.Engine` resolves it (what SGLang picks depends on more than the GPU: its CUDA version,
the model's architecture, speculative settings). DDTREE's arms are not checked: DDTREE refuses
FA3 and runs triton or flashinfer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import DDTREE
from ddtree_overlay.bench.attention import AUTO, planned_backend
from ddtree_overlay.bench.plan import EngineGroup, SweepPlan
from ddtree_overlay.engine.errors import fa3_not_installed
from ddtree_overlay.engine.target import run_script
from ddtree_overlay.in_target.engine_runner import engine_kwargs

FA3 = "fa3"
PROBE_TIMEOUT_S = 300  # an sglang import and a ServerArgs per engine asking for the default


def fa3_candidates(plan: SweepPlan) -> list[EngineGroup]:
    """The groups that may run FA3: every group but DDTREE's asking for fa3 or for SGLang's default."""
    return [g for g in plan.groups if g.arm.algorithm != DDTREE and planned_backend(g.engine) in (FA3, AUTO)]


def probe_engines(plan: SweepPlan, groups: Sequence[EngineGroup]) -> dict[str, dict[str, Any]]:
    """The probe's ENGINES_JSON: each of ``groups`` asking for SGLang's default, with the Engine
    keywords and environment its engine will start with."""
    paths = {"target": str(plan.setting.target), "draft": str(plan.setting.draft)}
    return {
        g.name: {"kwargs": engine_kwargs(paths, dict(g.engine)), "env": g.arm.engine_env(hybrid=plan.setting.hybrid)}
        for g in groups
        if planned_backend(g.engine) == AUTO
    }


def on_missing_fa3(groups: Sequence[EngineGroup], probe: Mapping[str, Any]) -> list[EngineGroup]:
    """Of ``groups``, those that would run FA3 where the probe found sgl_kernel without it."""
    if probe.get("flash_ops") is not False:
        return []
    backends = probe.get("backends") or {}
    return [g for g in groups if planned_backend(g.engine) == FA3 or backends.get(g.name) == FA3]


def check_fa3(python: Path, plan: SweepPlan) -> list[str]:
    """Raise `AttentionBackendMissing` when an arm of ``plan`` would run FA3 and ``python``'s env
    has no FA3; otherwise the notes on what the check could not tell (the engines then show it)."""
    groups = fa3_candidates(plan)
    if not groups:
        return []
    done = run_script(
        python, "fa3_probe", [json.dumps(probe_engines(plan, groups))], timeout=PROBE_TIMEOUT_S, isolated=False
    )
    if done.problem is not None:
        return [f"the FA3 check could not run in `{python}` ({done.problem}): an engine on fa3 may fail at start"]
    on_fa3 = on_missing_fa3(groups, done.result)
    if on_fa3:
        algorithms = list(dict.fromkeys(g.arm.algorithm for g in on_fa3))
        raise fa3_not_installed(algorithms, python, default=any(planned_backend(g.engine) == AUTO for g in on_fa3))
    unknown = done.result.get("errors") or {}
    return [
        f"which attention backend SGLang picks for {name} could not be told before its engine started ({why}): "
        "sgl_kernel here has no FA3, so the engine fails at start if it is fa3"
        for name, why in unknown.items()
    ]
