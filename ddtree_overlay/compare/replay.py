"""Replay an offline run's prompts through the tool's own reference decoder (fp32 by default).

Same prompts, methods, budgets, temperature and max new tokens as recorded; a stop at the
target's EOS, as the reference code's benchmark stops. At T = 0 the target-only arm also
records the target's top1 - top2 logit margin at every step, for the divergence report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from ddtree_overlay.bench.arms import DFLASH, TARGET_ONLY
from ddtree_overlay.compare.records import ArmResult, Generation, Side, acceptance_length
from ddtree_overlay.compare.runfile import OfflineRun, arm_of


def replay_with_reference(
    run: OfflineRun,
    target_dir: Path,
    draft_dir: Path,
    *,
    device: str = "cpu",
    progress: Callable[[str], None] = lambda _: None,
) -> Side:
    import torch

    from ddtree_overlay.reference.decode import generate_ar, generate_ddtree, generate_dflash
    from ddtree_overlay.reference.model import load_draft, load_target

    target = load_target(target_dir, device=device)
    draft = load_draft(draft_dir, device=device)
    eos = json.loads((target_dir / "config.json").read_text()).get("eos_token_id")
    prompts = [list(turn.prompt) for turn in run.turns]
    arms = {}
    for key in run.method_keys:
        arm = arm_of(key)
        generations, tokens, seconds = [], 0, 0.0
        for i, prompt in enumerate(prompts):
            kw = {
                "max_new_tokens": run.max_new_tokens,
                "temperature": run.temperature,
                "generator": torch.Generator(device=device).manual_seed(i),
                "stop_token": eos,
            }
            start = time.perf_counter()
            if arm.algorithm == TARGET_ONLY:
                result = generate_ar(target, prompt, **kw)
            elif arm.algorithm == DFLASH:
                result = generate_dflash(target, draft, prompt, **kw)
            else:
                result = generate_ddtree(target, draft, prompt, budget=arm.policy_or_fail.budget, **kw)
            seconds += time.perf_counter() - start
            tokens += len(result.tokens)
            generations.append(
                Generation(
                    tokens=result.tokens,
                    acceptance=acceptance_length(result.accept_lens, len(result.tokens)),
                    margins=result.margins,
                )
            )
            progress(f"{arm.label}: prompt {i + 1}/{len(prompts)}")
        arms[arm.name] = ArmResult(arm, tuple(generations), tokens / seconds if seconds > 0 else None)
    return Side(source=f"reference decoder (fp32, {device})", prompts=tuple(map(tuple, prompts)), arms=arms)
