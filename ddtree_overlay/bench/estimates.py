"""Rough seconds for the plan's estimates and time box (`bench.plan`): a cell's decode from the
setting's cost model (`settings.CostModel`), a round = base + per-token cost x (batch x verify
width). The engine runner rescales them by what it measures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ddtree_overlay.bench.arms import DFLASH, TARGET_ONLY, verify_width
from ddtree_overlay.bench.settings import Setting

if TYPE_CHECKING:
    from ddtree_overlay.bench.plan import Cell  # plan imports this module


def round_ms(setting: Setting, algorithm: str, budget: int | None, batch_size: int) -> float:
    cost = setting.cost
    if algorithm == TARGET_ONLY:
        return cost.plain_step_ms
    width = 16 if algorithm == DFLASH else verify_width(budget or 0)
    return cost.spec_round_ms + cost.per_verify_token_us * batch_size * width / 1000


def waves(prompts: int, batch_size: int) -> int:
    """How many waves of ``batch_size`` requests decode ``prompts`` prompts."""
    return -(-prompts // batch_size)


def estimate_cell_s(
    setting: Setting,
    *,
    algorithm: str,
    budget: int | None,
    batch_size: int,
    temperature: float,
    prompts: int,
    max_new_tokens: int,
) -> float:
    count = waves(prompts, batch_size)
    rounds = max_new_tokens / setting.tau(algorithm, budget, temperature)
    decode = count * rounds * round_ms(setting, algorithm, budget, batch_size) / 1000
    return decode + count * setting.cost.wave_overhead_s + setting.cost.cell_overhead_s


def estimate_stream_cell_s(
    setting: Setting,
    *,
    algorithm: str,
    budget: int | None,
    concurrency: int,
    temperature: float,
    max_new_tokens: int,
    warmup_s: float,
    window_s: float,
) -> float:
    """Warm-up and window, then the requests still running at the window's end finish."""
    rounds = max_new_tokens / setting.tau(algorithm, budget, temperature)
    prompt_tokens = max((len(p) for p in setting.prompts), default=0)
    request_s = (
        rounds * round_ms(setting, algorithm, budget, concurrency) / 1000
        + prompt_tokens * setting.cost.prefill_token_us / 1e6
    )
    return warmup_s + window_s + request_s + setting.cost.cell_overhead_s


def estimate_overhead_s(setting: Setting, cells: Sequence[Cell]) -> float:
    """An engine's seconds beyond its start and its cells: the health check, the shutdown and,
    with waves cells, the runner's untimed warm-up (`engine_runner._warm_up`), one full-length
    wave per (temperature, batch size), each a wave's share of its cell's estimate. At the
    Qwen3.6-27B shape those waves alone took about 43 s of a DFLASH engine's warm-up (H200,
    2026-12-04). Continuous-batching cells warm up inside their own time."""
    warm_up: dict[tuple[float, int], float] = {}
    for cell in cells:
        if not cell.stream:
            warm_up.setdefault((cell.temperature, cell.batch_size), cell.est_s / waves(cell.prompts, cell.batch_size))
    if not warm_up:
        return setting.cost.stream_only_overhead_s
    return setting.cost.engine_overhead_s + sum(warm_up.values())
