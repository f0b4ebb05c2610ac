"""What `bench` measures and in which order: engine groups, cells, time estimates, for a setting.

Before the timed engines, an untimed primer engine (`primer_run`) decodes one wave and shuts
down, unless ``--max-minutes`` cannot hold it and one timed engine (a note says so).

One engine serves every cell of one (algorithm, budget, scheduling, backend) config: an SGLang
engine start costs ~45 s on an H200 (~130 s for the first, which compiles kernels), far more
than a cell's decode, so cells are grouped by engine and engines are ordered by how much their
numbers tell: target-only and DFLASH in both scheduling modes first (every speedup needs them),
the NEXTN (a target with an MTP head; without overlap scheduling where stock SGLang's overlap
EAGLE worker crashes on the target, `bench.nextn_overlap`) and EAGLE-3 (given a drafter)
baselines, these again on each further baseline backend listed (`bench.attention`), then DDTREE
budgets, the known-good one and the B = 32 cliff first. With random weights only round costs
mean something: target-only goes last and the budgets run widest-spread first. With
`ddtree_no_overlap`, every DDTREE budget also runs without overlap scheduling, right after its
overlap twin. With `adaptive_budgets`, one more DDTREE arm (in each of those modes) lets every
round choose its budget among them; with `budget_schedule`, one more takes its budget from the
batch size. Inside an engine, T = 0 cells run before T = 1 and batch 1 before the widest batch,
so a time box cuts the least informative cells.

With `repeats` N > 1 (engines per arm) the whole list of groups runs N times, in rounds, each
run a fresh engine (`EngineRun`): by default odd rounds in plan order, even rounds reversed
(`engine_order` "cycle" keeps plan order, "shuffle" shuffles each round with a seed), so no
group is always first (on a host-bound setting an early engine is often slower). Round 1 runs
entirely before round 2, so a time box cuts later repeats before it cuts any group's first.
Target-only's waves cells run in round 1 only (with its untimed margins cell).

Two kinds of cell: a waves cell sends its prompts in waves of `batch_size` concurrent requests,
each timed until its slowest request finishes (greedy outputs are judged against target-only's
there); a continuous-batching cell (`concurrencies`) keeps that many requests running, a
finished one replaced at once, and counts the tokens emitted in a timed window after a warm-up.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ddtree_overlay.bench import attention
from ddtree_overlay.bench.arms import (
    DDTREE,
    DFLASH,
    EAGLE3,
    NEXTN,
    TARGET_ONLY,
    Arm,
    BudgetPolicy,
    Schedule,
    engine_keywords,
)
from ddtree_overlay.bench.capacity import asks_for_widest_batch
from ddtree_overlay.bench.estimates import (
    estimate_cell_s,
    estimate_overhead_s,
    estimate_stream_cell_s,
)
from ddtree_overlay.bench.nextn_overlap import only_refusal
from ddtree_overlay.bench.settings import CostModel, Setting
from ddtree_overlay.bench.sglang_env import SglangEnv
from ddtree_overlay.bench.state_memory import DEFAULT_HYBRID_STATE

DEFAULT_BUDGETS = (4, 8, 16, 32, 64, 128, 256)
DEFAULT_BATCH_SIZES = (1, 4, 16)
DEFAULT_TEMPERATURES = (0.0, 1.0)
# Within a round: plan order, every other round reversed (A B C, C B A); plan order every round
# (A B C, A B C); or a seeded shuffle per round.
ENGINE_ORDERS = ("alternate", "cycle", "shuffle")
CHAIN_BUDGET = 15  # the chain control verifies DFLASH's block: 16 tokens

# Every arm gets the same engine options but its attention backend (`bench.attention`): decode
# CUDA graphs captured only for the batch sizes the sweep uses and the powers of two below them (a
# wave that shrinks as its requests finish pads up to the next one), prefill graphs off (prefill is
# not what is measured). Both cut the engine start, which is most of the sweep's time.
ENGINE_COMMON: Mapping[str, Any] = {"disable_prefill_cuda_graph": True}
def capture_batch_sizes(batch_sizes: Sequence[int]) -> list[int]:
    top = max(batch_sizes)
    powers = [1 << i for i in range(top.bit_length()) if 1 << i <= top]
    return sorted(set(powers) | set(batch_sizes))


@dataclass(frozen=True)
class BenchConfig:
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    attention_backend: str = "triton"  # the DDTREE arms'
    baseline_attention_backend: str = attention.AUTO  # every other arm's (`bench.attention`)
    tp_size: int = 1  # tensor-parallel GPUs per engine, every arm alike
    max_new_tokens: int | None = None  # the setting's default when None
    prompts_per_cell: int | None = None
    max_minutes: float | None = None
    ddtree_no_overlap: bool = False  # every DDTREE budget also without overlap scheduling
    adaptive_budgets: tuple[int, ...] = ()  # one more DDTREE arm: a budget per round among these
    budget_schedule: Schedule = ()  # one more DDTREE arm: (smallest batch size, budget) steps
    repeats: int = 1  # engines per arm: every group this many times, one engine each, in rounds
    engine_order: str = "alternate"  # of the groups within a round (ENGINE_ORDERS)
    order_seed: int = 0  # the shuffle's, with engine_order "shuffle"
    # Continuous-batching cells: per concurrency, requests fed as a stream so that this many
    # are running at once; tok/s over a window of window_s after warmup_s of serving.
    concurrencies: tuple[int, ...] = ()
    warmup_s: float = 20.0
    window_s: float = 60.0
    chain_control: bool = False  # one more DDTREE arm: B = 15 verifying DFLASH's top-1 chain
    prompt_tokens: int | None = None  # the random settings' prompt length (their default when None)
    only: tuple[str, ...] = ()  # keep only these groups (arm names); every group when empty
    # A request ends at the target's EOS as well as at max_new_tokens (`compare` replays a run
    # of the reference code, which stops there); the bench decodes max_new_tokens always.
    stop_at_eos: bool = False
    primer: bool = True  # an untimed engine before the timed ones (`primer_run`)
    # DDTREE's verify state on a Gated-DeltaNet target, flat or snapshot: the engines inherit
    # SGLANG_DDTREE_HYBRID_STATE from the bench's environment, read at plan time (`bench.state_memory`)
    hybrid_state: str = DEFAULT_HYBRID_STATE
    # The SGLANG_* switches the engines inherit from the bench's environment, read at plan time
    # (`bench.sglang_env`: SGLang's plan stream among them)
    sglang_env: SglangEnv = ()

    @property
    def baseline_backends(self) -> tuple[str, ...]:
        return attention.baseline_backends(self.baseline_attention_backend)


@dataclass(frozen=True)
class Cell:
    name: str
    batch_size: int
    temperature: float
    prompts: int
    est_s: float
    top2: bool = False  # the target-only margins cell: logprobs on, not timed
    # A continuous-batching cell: batch_size requests kept running for warmup_s, then a timed
    # window of window_s (None: a waves cell)
    window_s: float | None = None
    warmup_s: float = 0.0

    @property
    def stream(self) -> bool:
        return self.window_s is not None


@dataclass(frozen=True)
class EngineGroup:
    """One arm's engine config and the cells it serves; its engine runs (`EngineRun`) carry
    the estimates, since only the sweep's first start pays the kernel compiles."""

    arm: Arm
    engine: Mapping[str, Any]
    cells: tuple[Cell, ...]
    est_overhead_s: float

    @property
    def name(self) -> str:
        return self.arm.name


PRIMER = "primer"  # the untimed primer engine's name in the records, and its cells' prefix


@dataclass(frozen=True)
class EngineRun:
    """One engine start: a group's cells in one repeat of the sweep (1-based), or the primer:
    an untimed engine of the group's config, before the timed ones (`primer_run`)."""

    group: EngineGroup
    repeat: int
    cells: tuple[Cell, ...]  # the group's, less the margins cell after repeat 1; the primer's own
    est_start_s: float  # only the sweep's first start pays the kernel compiles
    primer: bool = False

    @property
    def name(self) -> str:
        """The engine's name in the records: its group's, or `PRIMER`."""
        return PRIMER if self.primer else self.group.name

    @property
    def label(self) -> str:
        if self.primer:
            return f"{PRIMER} (untimed {self.group.name})"
        return self.group.name if self.repeat == 1 else f"{self.group.name} (repeat {self.repeat})"

    @property
    def est_s(self) -> float:
        return self.est_start_s + self.group.est_overhead_s + sum(c.est_s for c in self.cells)


@dataclass(frozen=True)
class SweepPlan:
    setting: Setting
    config: BenchConfig
    max_new_tokens: int
    groups: tuple[EngineGroup, ...]  # each once, in plan order
    runs: tuple[EngineRun, ...]  # every engine start, in the order they run: the primer first
    expected_to_fit: tuple[bool, ...]  # per run, by the estimates and --max-minutes
    notes: tuple[str, ...] = field(default=())

    @property
    def est_s(self) -> float:
        return sum(r.est_s for r in self.runs)

    @property
    def primer(self) -> EngineRun | None:
        return self.runs[0] if self.runs and self.runs[0].primer else None

    @property
    def timed_runs(self) -> tuple[EngineRun, ...]:
        return tuple(r for r in self.runs if not r.primer)

    @property
    def cells(self) -> tuple[Cell, ...]:
        return tuple(c for g in self.groups for c in g.cells)

    def group(self, name: str) -> EngineGroup:
        return next(g for g in self.groups if g.name == name)


def cell_name(group: str, batch_size: int, temperature: float) -> str:
    return f"{group}/bs{batch_size}/t{temperature:g}"


def stream_cell_name(group: str, concurrency: int, temperature: float) -> str:
    return f"{group}/c{concurrency}/t{temperature:g}"


def ordered_budgets(budgets: Sequence[int], priority: Sequence[int]) -> list[int]:
    wanted = sorted(set(budgets))
    first = [b for b in priority if b in wanted]
    return first + [b for b in wanted if b not in first]


def ordered_cells(batch_sizes: Sequence[int], temperatures: Sequence[float]) -> list[tuple[int, float]]:
    """T = 0 before T > 0; batch 1, then the widest, then the ones between."""
    sizes = sorted(set(batch_sizes))
    by_interest = sizes[:1] + sizes[1:][-1:] + sizes[1:-1]
    temps = sorted(set(temperatures))
    return [(bs, t) for t in temps for bs in by_interest]


def prompts_for(setting: Setting, config: BenchConfig, batch_size: int) -> int:
    """A cell decodes the first max(batch, prompts per cell) prompts: at least one full wave,
    and a narrower cell's prompts are a prefix of the widest's."""
    per_cell = config.prompts_per_cell or setting.prompts_per_cell
    return min(len(setting.prompts), max(batch_size, per_cell))


def _group(setting: Setting, config: BenchConfig, *, arm: Arm, max_new_tokens: int) -> EngineGroup:
    name, algorithm = arm.name, arm.algorithm
    priced = arm.policy.widest if arm.policy else None
    cells = []
    for bs, temp in ordered_cells(config.batch_sizes, config.temperatures):
        n_prompts = prompts_for(setting, config, bs)
        est = estimate_cell_s(
            setting,
            algorithm=algorithm,
            budget=priced,  # a policy arm is priced as its widest budget: an upper bound
            batch_size=bs,
            temperature=temp,
            prompts=n_prompts,
            max_new_tokens=max_new_tokens,
        )
        cells.append(Cell(cell_name(name, bs, temp), bs, temp, n_prompts, round(est, 1)))
    if algorithm == TARGET_ONLY and 0.0 in config.temperatures and config.batch_sizes:
        widest = max(config.batch_sizes)
        n_prompts = prompts_for(setting, config, widest)
        est = 1.5 * estimate_cell_s(
            setting,
            algorithm=algorithm,
            budget=None,
            batch_size=widest,
            temperature=0.0,
            prompts=n_prompts,
            max_new_tokens=max_new_tokens,
        )
        margins = Cell(f"{name}/margins", widest, 0.0, n_prompts, round(est, 1), top2=True)
        after_t0 = sum(1 for c in cells if c.temperature == 0)
        cells.insert(after_t0, margins)
    for concurrency, temp in ordered_cells(config.concurrencies, config.temperatures):
        est = estimate_stream_cell_s(
            setting,
            algorithm=algorithm,
            budget=priced,
            concurrency=concurrency,
            temperature=temp,
            max_new_tokens=max_new_tokens,
            warmup_s=config.warmup_s,
            window_s=config.window_s,
        )
        cells.append(
            Cell(
                stream_cell_name(name, concurrency, temp),
                concurrency,
                temp,
                prompts_for(setting, config, concurrency),
                round(est, 1),
                window_s=config.window_s,
                warmup_s=config.warmup_s,
            )
        )
    baseline = arm.backend or config.baseline_backends[0]
    backend = config.attention_backend if algorithm == DDTREE else baseline
    engine: dict[str, Any] = {
        **engine_keywords(backend),
        "tp_size": config.tp_size,
        "cuda_graph_bs_decode": capture_batch_sizes(served_batch_sizes(config)),
        **ENGINE_COMMON,
        **setting.engine,
        **arm.engine_args(),
        **baseline_draft(setting, arm),
    }
    widest = max(served_batch_sizes(config))
    if asks_for_widest_batch(widest, hybrid=setting.hybrid, streaming=bool(config.concurrencies)):
        engine["max_running_requests"] = widest
    overhead = estimate_overhead_s(setting, cells, algorithm=algorithm, budget=priced)
    return EngineGroup(arm=arm, engine=engine, cells=tuple(cells), est_overhead_s=overhead)


def baseline_arms(setting: Setting, backend: str) -> list[Arm]:
    """The baselines users serve beside DFLASH that this pair can run on ``backend``: NEXTN with
    the target's MTP head (no overlap where stock SGLang crashes with it), EAGLE-3 with a drafter."""
    nextn = Arm(NEXTN, overlap=backend not in setting.nextn_without_overlap)
    return [nextn] * setting.nextn + [Arm(EAGLE3)] * (setting.eagle3_draft is not None)


def baseline_draft(setting: Setting, arm: Arm) -> dict[str, Any]:
    """The draft model of a NEXTN arm (the target's directory: SGLang loads its MTP head from
    there) or an EAGLE3 arm; DFLASH and DDTREE arms take the pair's drafter (the runner's)."""
    if arm.algorithm == NEXTN:
        return {"speculative_draft_model_path": str(setting.target)}
    if arm.algorithm == EAGLE3:
        return {"speculative_draft_model_path": str(setting.eagle3_draft)}
    return {}


def served_batch_sizes(config: BenchConfig) -> list[int]:
    """Every running-batch size a cell asks for: the waves' and the streams' concurrencies."""
    return sorted(set(config.batch_sizes) | set(config.concurrencies))


def round_order(groups: Sequence[EngineGroup], repeat: int, order: str, seed: int) -> list[EngineGroup]:
    """The groups of round ``repeat`` (from 1) in the order they run (`ENGINE_ORDERS`)."""
    if order == "cycle" or (order == "alternate" and repeat % 2):
        return list(groups)
    if order == "alternate":
        return list(groups[::-1])
    shuffled = list(groups)
    random.Random(f"{seed}/{repeat}").shuffle(shuffled)
    return shuffled


def plan_runs(
    groups: Sequence[EngineGroup],
    repeats: int,
    cost: CostModel,
    *,
    order: str = "alternate",
    seed: int = 0,
    primed: str | None = None,
) -> tuple[EngineRun, ...]:
    """Round k runs every group, in `round_order` (alternate: A B C, C B A, A B C, ...: over an
    even number of rounds every group's mean position is the same). The first run pays the
    kernel compiles unless a primer (on backend ``primed``) ran first, and so does the first on
    each backend compiled at first use (`attention.COMPILED_AT_FIRST_USE`).

    Target-only's waves cells run in round 1 only: they are the correctness reference and the
    x-target-only column, not the DDTREE-against-DFLASH comparison that repeats are for. Its
    continuous-batching cells run in every round, like every other arm's: their ratios are
    of medians over engines."""
    runs, compiled = [], {primed}
    for repeat in range(1, repeats + 1):
        for group in round_order(groups, repeat, order, seed):
            if repeat == 1:
                backend = attention.planned_backend(group.engine)
                compiles = backend in attention.COMPILED_AT_FIRST_USE and backend not in compiled
                start = cost.first_start_s(first=not (runs or primed), compiles=compiles)
                compiled.add(backend)
                runs.append(EngineRun(group, repeat, group.cells, start))
                continue
            if group.arm.algorithm == TARGET_ONLY:
                cells = tuple(c for c in group.cells if c.stream)
            else:
                cells = tuple(c for c in group.cells if not c.top2)
            if cells:
                runs.append(EngineRun(group, repeat, cells, cost.engine_start_s))
    return tuple(runs)


def primer_run(runs: Sequence[EngineRun], setting: Setting, max_new_tokens: int) -> EngineRun | None:
    """The untimed engine to start before ``runs``: the first DDTREE run's config (the first
    speculative run's, without DDTREE; None without either), decoding one wave at that group's
    first cell's batch size and temperature, at full length (attention kernels compile per shape
    as sequences grow). It pays the sweep's first-start kernel compiles.

    On a fresh H200 the first DDTREE engine of a command ran 2.0-2.7x slower per step than later
    DDTREE engines of the same payload, although it had decoded the same prompts untimed before
    (round_trace, hybrid fixture, B = 32, sglang 0.5.14, 2026-12-02); the cause is not known. The
    primer's records are named apart (`PRIMER`) and tagged, so no table, ratio or check reads them."""
    speculative = [r for r in runs if r.group.arm.algorithm != TARGET_ONLY]
    first = next((r for r in speculative if r.group.arm.algorithm == DDTREE), speculative[0] if speculative else None)
    if first is None:
        return None
    group = first.group
    bs, temperature = group.cells[0].batch_size, group.cells[0].temperature
    prompts = min(len(setting.prompts), bs)
    budget = group.arm.policy.widest if group.arm.policy else None
    est = estimate_cell_s(setting, algorithm=group.arm.algorithm, budget=budget, batch_size=bs,
                          temperature=temperature, prompts=prompts, max_new_tokens=max_new_tokens)
    cell = Cell(cell_name(PRIMER, bs, temperature), bs, temperature, prompts, round(est, 1))
    compiles = attention.planned_backend(group.engine) in attention.COMPILED_AT_FIRST_USE
    return EngineRun(group, 1, (cell,), setting.cost.first_start_s(first=True, compiles=compiles), primer=True)


def sweep_arms(
    config: BenchConfig,
    *,
    budget_priority: Sequence[int] = (),
    target_only_last: bool = False,
    baselines: Callable[[str], Sequence[Arm]] = lambda backend: (),
) -> list[Arm]:
    """The sweep's arms in plan order, ``baselines(backend)`` beside DFLASH on each baseline
    backend (`--only` applied); ValueError names an `--only` arm the sweep does not have."""
    budgets = ordered_budgets(config.budgets, budget_priority)
    # (algorithm, budget, overlap): both DFLASH modes first, since every speedup is against
    # DFLASH's faster one; a budget's no-overlap arm, when asked for, right after its overlap one
    modes = (True, False) if config.ddtree_no_overlap else (True,)
    policies = [BudgetPolicy.fixed(b) for b in budgets]
    if config.adaptive_budgets:
        policies.append(BudgetPolicy.of_choices(config.adaptive_budgets))
    if config.budget_schedule:
        policies.append(BudgetPolicy(schedule=tuple(config.budget_schedule)))
    arms = [] if target_only_last else [Arm(TARGET_ONLY)]
    backends = config.baseline_backends
    for backend in backends:  # the first as the plain arms, the others as `<arm>@<backend>`
        on = [Arm(DFLASH), Arm(DFLASH, overlap=False), *baselines(backend)]
        arms += on if backend == backends[0] else [replace(arm, backend=backend) for arm in on]
    arms += [Arm.ddtree(policy, overlap=o) for policy in policies for o in modes]
    if config.chain_control:
        arms.append(Arm(DDTREE, BudgetPolicy.fixed(CHAIN_BUDGET), chain=True))
    arms += [Arm(TARGET_ONLY)] if target_only_last else []
    if not config.only:
        return arms
    unknown = sorted(set(config.only) - {arm.name for arm in arms})
    if unknown:
        raise ValueError(f"no arm {', '.join(unknown)} in this sweep (arms: {', '.join(arm.name for arm in arms)})")
    return [arm for arm in arms if arm.name in config.only]


def plan_sweep(setting: Setting, config: BenchConfig) -> SweepPlan:
    """Every engine run in the order it runs, with estimates and the time box applied."""
    if config.repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {config.repeats}")
    if config.engine_order not in ENGINE_ORDERS:
        raise ValueError(f"engine order must be one of {', '.join(ENGINE_ORDERS)}, got {config.engine_order!r}")
    if config.concurrencies and (config.warmup_s < 0 or config.window_s <= 0):
        raise ValueError(f"a window needs window_s > 0 and warmup_s >= 0, got {config.window_s}, {config.warmup_s}")
    max_new = config.max_new_tokens or setting.max_new_tokens
    nextn_without_overlap = setting.nextn_without_overlap if setting.nextn else {}
    if refusal := only_refusal(config.only, nextn_without_overlap, config.baseline_backends[0]):
        raise ValueError(refusal)
    arms = sweep_arms(
        config,
        budget_priority=setting.budget_priority,
        target_only_last=setting.target_only_last,
        baselines=partial(baseline_arms, setting),
    )
    groups = tuple(_group(setting, config, arm=arm, max_new_tokens=max_new) for arm in arms)
    limit = None if config.max_minutes is None else config.max_minutes * 60
    notes = []
    timed_runs = partial(plan_runs, groups, config.repeats, setting.cost, order=config.engine_order, seed=config.order_seed)
    runs = timed_runs()
    primer = primer_run(runs, setting, max_new) if config.primer else None
    primed = timed_runs(primed=attention.planned_backend(primer.group.engine)) if primer else runs
    if primer is not None and limit is not None and primer.est_s + primed[0].est_s > limit:
        notes.append(
            f"--max-minutes {config.max_minutes:g} cannot hold the untimed primer engine (~{primer.est_s:.0f} s) "
            f"and one timed engine: no primer, so the first {primer.group.arm.algorithm} engine may run slow "
            "(docs/bench.md#the-primer-engine)"
        )
        primer = None
    runs = (primer, *primed) if primer else runs
    fit, spent = [], 0.0
    for run in runs:
        spent += run.est_s
        fit.append(limit is None or spent <= limit)
    if not all(fit):
        cut = [r.label for r, f in zip(runs, fit, strict=True) if not f]
        notes.append(
            f"by the estimates, --max-minutes {config.max_minutes:g} leaves out: {', '.join(cut)} "
            "(the runner decides with measured times)"
        )
    return SweepPlan(setting, config, max_new, groups, runs, tuple(fit), tuple(notes))
