"""The side compared with an offline run: generations per arm over a list of prompts.

It comes from SGLang (the per-arm records `in_target/engine_runner.py` writes) or from the
tool's own offline reference decoder (`replay.py`). Acceptance is counted one way for every
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
    """A side from engine-runner arm records (`arm`, `outputs`, `meta`, `tok_per_s`,
    `top2_margins`) decoded over `prompts`, in order. ValueError names a record that does not fit."""
    arms = {}
    for record in records:
        if record.get("kind") in ("cell", "engine") or not record.get("ok", True):
            continue
        arm = Arm.parse(str(record["arm"]))
        outputs, metas = record["outputs"], record["meta"]
        if len(outputs) != len(prompts) or len(metas) != len(prompts):
            raise ValueError(f"arm {arm.name}: {len(outputs)} outputs for {len(prompts)} prompts")
        margins = record.get("top2_margins") or [()] * len(outputs)
        arms[arm.name] = ArmResult(
            arm=arm,
            generations=tuple(
                Generation(
                    tokens=tuple(out),
                    acceptance=None if arm.algorithm == TARGET_ONLY else _sglang_acceptance(meta),
                    margins=tuple(margin),
                )
                for out, meta, margin in zip(outputs, metas, margins, strict=True)
            ),
            tokens_per_s=record.get("tok_per_s"),
        )
    return Side(source="sglang", prompts=tuple(tuple(p) for p in prompts), arms=arms)


def _sglang_acceptance(meta: Mapping) -> float | None:
    rounds = meta.get("spec_verify_ct") or 0
    return ((meta.get("completion_tokens") or 0) - 1) / rounds if rounds else None
