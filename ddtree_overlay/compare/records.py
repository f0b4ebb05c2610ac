"""The side compared with an offline run: generations per arm over a list of prompts.

It comes from SGLang (the records `in_target/engine_runner.py` writes, per arm or per bench
cell: `compare --env` runs a bench plan, `sglang_plan.py`) or from the tool's own offline
reference decoder (`replay.py`). Acceptance is counted one way for every
side, SGLang's: committed tokens per verify round with the prefill's token excluded, over the
rounds it took to produce the output (an offline loop that runs one round past the last
kept token does not count that round).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ddtree_overlay.bench.arms import TARGET_ONLY, Arm


@dataclass(frozen=True)
class Generation:
    tokens: tuple[int, ...]  # generated tokens
    acceptance: float | None  # committed tokens per verify round (None for target-only)
    margins: tuple[float | None, ...] = ()  # target-only: top1 - top2 log-prob per token


@dataclass(frozen=True)
class ArmResult:
    arm: Arm
    generations: tuple[Generation, ...]  # one per prompt of the side
    tokens_per_s: float | None  # output tokens per second over the arm's whole decode


@dataclass(frozen=True)
class Side:
    """What ran against the offline run: `source` names it (`sglang`, `reference decoder`)."""

    source: str
    prompts: tuple[tuple[int, ...], ...]
    arms: Mapping[str, ArmResult]  # arm name -> result


def acceptance_length(acceptance_lengths: Sequence[int], generated: int) -> float | None:
    """(generated - 1) / the rounds needed to commit them: round r adds acceptance_lengths[r]
    tokens after the prefill's one. None without a round or with one token only."""
    if generated <= 1 or not acceptance_lengths:
        return None
    committed = 1
    for rounds, length in enumerate(acceptance_lengths, start=1):
        committed += length
        if committed >= generated:
            return (generated - 1) / rounds
    return (generated - 1) / len(acceptance_lengths)


def side_from_engine_records(prompts: Sequence[Sequence[int]], records: Iterable[Mapping]) -> Side:
    """A side from the engine runner's records of `prompts`, decoded in order: arm records
    (`arm`, `outputs`, `meta`, `tok_per_s`, `top2_margins`), or the cell records a bench plan
    has it write (`kind` "cell", `group` naming the arm; target-only's untimed margins cell
    gives its `top2_margins`). Engine records, a bench's untimed primer engine and failed or
    skipped decodes are left out. ValueError names a record that does not fit."""
    decodes: dict[str, tuple[Arm, Mapping]] = {}
    margins: dict[str, Mapping] = {}  # arm name -> its margins cell
    for record in records:
        if record.get("kind") == "engine" or record.get("primer") or not record.get("ok", True):
            continue
        cell = record.get("kind") == "cell"
        arm = Arm.parse(str(record["group"] if cell else record["arm"]))
        if cell and not record.get("timed", True):
            margins[arm.name] = record
            continue
        if arm.name in decodes:
            raise ValueError(f"arm {arm.name}: more than one decode of the prompts")
        decodes[arm.name] = (arm, record)
    arms = {
        name: _arm_result(arm, record, margins.get(name, record), len(prompts))
        for name, (arm, record) in decodes.items()
    }
    return Side(source="sglang", prompts=tuple(tuple(p) for p in prompts), arms=arms)


def _arm_result(arm: Arm, record: Mapping, along: Mapping, prompts: int) -> ArmResult:
    """`record`'s decode, with the margins `along` (itself, or its margins cell) recorded."""
    outputs, metas = record["outputs"], record["meta"]
    if len(outputs) != prompts or len(metas) != prompts:
        raise ValueError(f"arm {arm.name}: {len(outputs)} outputs for {prompts} prompts")
    top2 = along.get("top2_margins") or [()] * prompts
    generations = tuple(
        Generation(
            tokens=tuple(out),
            acceptance=None if arm.algorithm == TARGET_ONLY else _sglang_acceptance(meta),
            # margins describe the output they were taken along: only where that is this one
            margins=tuple(margin) if list(taken) == list(out) else (),
        )
        for out, meta, taken, margin in zip(outputs, metas, along["outputs"], top2, strict=True)
    )
    return ArmResult(arm=arm, generations=generations, tokens_per_s=record.get("tok_per_s"))


def _sglang_acceptance(meta: Mapping) -> float | None:
    rounds = meta.get("spec_verify_ct") or 0
    return ((meta.get("completion_tokens") or 0) - 1) / rounds if rounds else None
