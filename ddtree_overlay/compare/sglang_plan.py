"""The bench sweep that replays an offline run through SGLang (`compare --env`).

A `bench.plan` sweep over the run's own prompts in turn order: the token ids it recorded, so
the chat template and enable_thinking the reference code rendered them with are in them. The
run's max new tokens and temperature; a request also ends at the target's EOS, where the
reference code stops. One engine per method the run recorded: target-only (at T = 0 with the
bench's margins cell, the target's top1 - top2 margins), DFLASH, and DDTREE at each recorded
budget, every engine with the bench's settings (triton attention, the baselines' too, decode
CUDA graphs, no prefill graphs). Batch 1: one request at a time, as the reference code decodes, so each
prompt's acceptance is comparable with the run's.
"""

from __future__ import annotations

from pathlib import Path

from ddtree_overlay.bench.plan import BenchConfig, SweepPlan, plan_sweep
from ddtree_overlay.bench.settings import make_setting
from ddtree_overlay.bench.sglang_env import inherited_sglang_env
from ddtree_overlay.bench.state_memory import hybrid_state_from_env
from ddtree_overlay.compare.runfile import OfflineRun, arm_of

REPLAY_BATCH_SIZE = 1


def replay_config(run: OfflineRun) -> BenchConfig:
    return BenchConfig(
        budgets=run.budgets,
        batch_sizes=(REPLAY_BATCH_SIZE,),
        # the bench adds target-only's margins cell at T = 0 exactly
        temperatures=(0.0 if run.greedy else run.temperature,),
        max_new_tokens=run.max_new_tokens,
        prompts_per_cell=len(run.turns),
        only=tuple(arm_of(key).name for key in run.method_keys),
        stop_at_eos=True,
        primer=False,  # outputs and acceptance are compared, not speed
        baseline_attention_backend="triton",  # every engine on DDTREE's backend: one set of numerics
        hybrid_state=hybrid_state_from_env(),  # the engines inherit the switches, as the bench's do
        sglang_env=inherited_sglang_env(),
    )


def replay_plan(run: OfflineRun, target: Path, draft: Path) -> SweepPlan:
    setting = make_setting(
        "fixture",
        scratch=target,  # a real-weight pair: nothing is written there
        target=target,
        draft=draft,
        prompt_ids=[list(turn.prompt) for turn in run.turns],
        prompt_note=f"the {len(run.turns)} prompts of `{run.path}`, in turn order",
    )
    return plan_sweep(setting, replay_config(run))
