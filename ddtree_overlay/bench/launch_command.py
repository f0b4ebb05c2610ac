"""The `python -m sglang.launch_server` command a deployment recommendation (`bench.recommend`)
prints for each configuration it serves, with the engine settings the bench measured it under."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.arms import CHAIN_DRAFT, DDTREE, DFLASH, EAGLE3, NEXTN, TARGET_ONLY
from ddtree_overlay.bench.attention import AUTO
from ddtree_overlay.bench.capacity import asks_for_widest_batch, launch_max_running
from ddtree_overlay.bench.sglang_env import env_assignments
from ddtree_overlay.bench.state_memory import DEFAULT_HYBRID_STATE, HYBRID_STATE_ENV


def launch_command(
    segment: Mapping[str, Any],
    report: Mapping[str, Any],
    *,
    ddtree_flags: Sequence[str],
    hybrid: bool,
    widest_batch: int,
    engines: Sequence[Mapping[str, Any]],
    streaming: bool,
    ddtree_state: str,
) -> dict[str, Any]:
    """The `python -m sglang.launch_server` line serving ``segment``'s configuration with the
    engine settings the bench measured it under (``ddtree_flags``: the DDTREE budget policy's;
    the SGLang switches every engine inherited in front, ``bench.sglang_env``, among them, on a
    hybrid target measured in a state other than the payload's default, DDTREE's state switch;
    ``streaming``: measured in continuous-batching
    cells), at --max-running-requests the widest batch, or what its ``engines`` served at once
    where that was fewer (`capacity.launch_max_running`)."""
    setting, config = report["setting"], report["config"]
    algorithm = segment["algorithm"]
    inherited = dict(config.get("sglang_env") or {})  # every engine's (`bench.sglang_env`)
    env = env_assignments(inherited, ddtree=algorithm == DDTREE)
    named = algorithm == DDTREE and hybrid and ddtree_state != DEFAULT_HYBRID_STATE
    if named and HYBRID_STATE_ENV not in inherited:  # reports from before they recorded the switches
        env.append(f"{HYBRID_STATE_ENV}={ddtree_state}")
    words = ["python", "-m", "sglang.launch_server", "--model-path", setting["target"]]
    if algorithm == DDTREE:
        words += ["--speculative-algorithm", DDTREE, "--speculative-draft-model-path", setting["draft"]]
        words += list(ddtree_flags)
    elif algorithm == DFLASH:
        words += ["--speculative-algorithm", DFLASH, "--speculative-draft-model-path", setting["draft"]]
    elif algorithm in (NEXTN, EAGLE3):
        draft = setting["target"] if algorithm == NEXTN else setting.get("eagle3_draft")
        words += ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(draft)]
        for key, value in CHAIN_DRAFT.items():
            words += ["--" + key.replace("_", "-"), str(value)]
    # a baseline on the backend its engine ran, whether asked for or SGLang's default there
    backend = config["attention_backend"] if algorithm == DDTREE else engines[0]["attention_backend"]
    words += [] if backend == AUTO else ["--attention-backend", backend]
    if int(config.get("tp_size", 1)) > 1:
        words += ["--tp-size", str(config["tp_size"])]
    if not segment["overlap"]:
        words.append("--disable-overlap-schedule")
    elif hybrid:
        words += ["--mamba-radix-cache-strategy", "extra_buffer"]
    if algorithm != TARGET_ONLY and asks_for_widest_batch(widest_batch, hybrid=hybrid, streaming=streaming):
        words += ["--max-running-requests", str(launch_max_running(engines, widest_batch))]
    return {"algorithm": algorithm, "overlap": segment["overlap"], "arm": segment["arm"], "command": _shell(words, env)}


def _shell(words: Sequence[str], env: Sequence[str] = ()) -> str:
    """One flag and its value per line, continued with backslashes; ``env`` (``NAME=value``)
    before the command on its first line."""
    lines, i = [" ".join(shlex.quote(w) for w in [*env, *words[:3]])], 3
    while i < len(words):
        take = 2 if i + 1 < len(words) and not words[i + 1].startswith("--") else 1
        lines.append(" ".join(shlex.quote(w) for w in words[i : i + take]))
        i += take
    return " \\\n    ".join(lines)
