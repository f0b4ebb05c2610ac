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


# New tokens per request of the untimed wave the runner sends at each stream cell's concurrency
# before the engine's first cell (`in_target/engine_runner._warm_up`; the plan carries it).
STREAM_WARM_UP_TOKENS = 32


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


def _request_s(
    setting: Setting, *, algorithm: str, budget: int | None, running: int, temperature: float, new_tokens: int,
    prefills: int,
) -> float:
    """A request's decode of ``new_tokens`` among ``running`` requests, and ``prefills`` prompts'
    prefill."""
    rounds = new_tokens / setting.tau(algorithm, budget, temperature)
    prompt_tokens = max((len(p) for p in setting.prompts), default=0)
    return (
        rounds * round_ms(setting, algorithm, budget, running) / 1000
        + prefills * prompt_tokens * setting.cost.prefill_token_us / 1e6
    )


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
    request_s = _request_s(setting, algorithm=algorithm, budget=budget, running=concurrency, temperature=temperature,
                           new_tokens=max_new_tokens, prefills=1)
    return warmup_s + window_s + request_s + setting.cost.cell_overhead_s


def estimate_overhead_s(setting: Setting, cells: Sequence[Cell], *, algorithm: str, budget: int | None) -> float:
    """An engine's seconds beyond its start and its cells: the health check, the shutdown and
    the runner's untimed warm-up (`engine_runner._warm_up`): with waves cells one full-length
    wave per (temperature, batch size), each a wave's share of its cell's estimate (at the
    Qwen3.6-27B shape those waves alone took about 43 s of a DFLASH engine's warm-up, H200,
    2026-12-04), with continuous-batching cells one short wave per (temperature, concurrency),
    prefills included."""
    warm_up: dict[tuple[float, int], float] = {}
    streams: dict[tuple[float, int], float] = {}
    for cell in cells:
        if not cell.stream:
            warm_up.setdefault((cell.temperature, cell.batch_size), cell.est_s / waves(cell.prompts, cell.batch_size))
            continue
        streams.setdefault((cell.temperature, cell.batch_size), _request_s(
            setting, algorithm=algorithm, budget=budget, running=cell.batch_size, temperature=cell.temperature,
            new_tokens=STREAM_WARM_UP_TOKENS, prefills=cell.batch_size,
        ))
    fixed = setting.cost.engine_overhead_s if warm_up else setting.cost.stream_only_overhead_s
    return fixed + sum(warm_up.values()) + sum(streams.values())
