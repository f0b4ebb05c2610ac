"""What a bench measures on: a bundled fixture pair (dense or Gated-DeltaNet hybrid), a custom
real-weight pair, or a Qwen3-8B-shaped pair with random weights, its prompts, and the rough costs the plan's time
estimates use.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import CHAIN_BASELINES, DFLASH, TARGET_ONLY
from ddtree_overlay.bench.target_config import read_target_config

PACKAGE_DIR = Path(__file__).resolve().parents[1]
FIXTURES = PACKAGE_DIR / "fixtures"
SETTINGS = ("fixture", "hybrid", "qwen3-8b-random")
CUSTOM_PROMPTS_PER_CELL = 8


@dataclass(frozen=True)
class CostModel:
    """Rough seconds for the time box and the dry-run estimate; the runner rescales by what it
    measures. Round time = base + per-token cost x (batch x verify width)."""

    engine_start_s: float
    first_start_extra_s: float  # kernel compilation in a fresh machine
    engine_overhead_s: float  # warm-up, health check, shutdown
    plain_step_ms: float
    spec_round_ms: float
    per_verify_token_us: float
    wave_overhead_s: float = 0.05
    cell_overhead_s: float = 0.6  # the runner's idle gap before a cell, bookkeeping


# Acceptance length (tokens per round) used only for estimates: the fixture's reference
# numbers (docs/BENCHMARKS.md, T = 0); T > 0 accepts about two thirds of that.
_FIXTURE_TAU = {DFLASH: 4.1, 4: 3.5, 8: 4.3, 16: 5.0, 32: 5.5, 64: 5.8, 128: 6.1, 256: 6.4}
_CHAIN_TAU = 2.6  # a 3-token chain at the hybrid fixture MTP head's 0.72 top-1 accuracy


@dataclass(frozen=True)
class Setting:
    name: str
    target: Path
    draft: Path
    prompts: tuple[tuple[int, ...], ...]
    engine: Mapping[str, Any]
    real_weights: bool  # acceptance, losslessness and reference parity mean something
    reference_parity: bool  # run the offline reference decoder (the bundled fixture pair only)
    max_new_tokens: int
    prompts_per_cell: int
    budget_priority: tuple[int, ...]
    cost: CostModel
    note: str
    target_only_last: bool = False  # random weights: target-only is the least telling arm
    nextn: bool = False  # the target carries an MTP head: a NEXTN arm runs
    eagle3_draft: Path | None = None  # an EAGLE-3 drafter for the target: an EAGLE3 arm runs

    def tau(self, algorithm: str, budget: int | None, temperature: float) -> float:
        if not self.real_weights or algorithm == TARGET_ONLY:
            return 1.0
        key: Any = DFLASH if algorithm == DFLASH else budget
        tau = _CHAIN_TAU if algorithm in CHAIN_BASELINES else _FIXTURE_TAU.get(key, 5.0)
        return tau if temperature == 0 else max(1.0, tau * 2 / 3)


FIXTURE_COST = CostModel(
    engine_start_s=45,
    first_start_extra_s=85,
    engine_overhead_s=10,  # full-length warm-up per temperature, health check, shutdown
    plain_step_ms=3.0,
    spec_round_ms=12.0,
    per_verify_token_us=2.0,
)
QWEN3_8B_COST = CostModel(
    engine_start_s=60,
    first_start_extra_s=90,
    engine_overhead_s=20,  # a full-length warm-up costs more at these shapes
    plain_step_ms=8.0,
    spec_round_ms=14.0,
    per_verify_token_us=25.0,
)

QWEN3_8B_NOTE = (
    "Qwen3-8B-shaped target (36 layers, hidden 4096, vocab 151936) and DFlash-shaped drafter "
    "(5 layers, target_layer_ids [1, 9, 17, 25, 33], block 16) with SGLang's dummy (random) "
    "weights: acceptance, losslessness and speedups are meaningless here; only the per-round "
    "cost against budget and batch size is."
)


def qwen3_8b_configs() -> tuple[dict[str, Any], dict[str, Any]]:
    """config.json of the Qwen3-8B-shaped target and of a DFlash drafter for it."""
    common = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "max_position_embeddings": 40960,
        "model_type": "qwen3",
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "use_sliding_window": False,
        "vocab_size": 151936,
    }
    target = common | {
        "architectures": ["Qwen3ForCausalLM"],
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "max_window_layers": 36,
        "num_hidden_layers": 36,
        "use_cache": True,
    }
    draft = common | {
        "architectures": ["DFlashDraftModel"],
        "block_size": 16,
        "dflash_config": {
            "block_size": 16,
            "mask_token_id": 151669,
            "target_layer_ids": [1, 9, 17, 25, 33],
        },
        "layer_types": ["full_attention"] * 5,
        "num_hidden_layers": 5,
        "num_target_layers": 36,
    }
    return target, draft


def write_qwen3_8b_configs(directory: Path) -> tuple[Path, Path]:
    target_cfg, draft_cfg = qwen3_8b_configs()
    dirs = directory / "target", directory / "draft"
    for path, cfg in zip(dirs, (target_cfg, draft_cfg), strict=True):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return dirs


def random_prompts(*, count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(count)]


HYBRID_NOTE = (
    "hybrid fixture pair: byte-level Qwen3.5/3.6-architecture target (8 layers = 2 x (3 Gated "
    "DeltaNet + 1 gated attention), fp32 recurrent state, MTP head) and its DFlash drafter "
    "(block 16), trained here; real acceptance"
)


def load_prompts(path: Path) -> list[list[int]]:
    """A JSON list of token-id lists; ValueError says what is wrong with the file."""
    try:
        prompts = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read it as JSON ({error})") from error
    if not (
        isinstance(prompts, list)
        and prompts
        and all(isinstance(p, list) and p and all(isinstance(t, int) and t >= 0 for t in p) for p in prompts)
    ):
        raise ValueError("it must hold a non-empty JSON list of non-empty token-id lists")
    return prompts


def make_setting(
    name: str,
    *,
    scratch: Path,
    target: Path | None = None,
    draft: Path | None = None,
    prompts: Path | None = None,
    write: bool = True,
    prompt_ids: Sequence[Sequence[int]] | None = None,
    prompt_note: str | None = None,
    eagle3_draft: Path | None = None,
) -> Setting:
    """The fixture pair (or a custom real-weight pair), or the Qwen3-8B-shaped random one
    (whose config.json files are written under ``scratch`` unless ``write`` is False).

    ``prompt_ids`` (chat prompts already tokenized, described by ``prompt_note``) replace the
    ``prompts`` file. A real-weight target with an MTP head gets a NEXTN arm; ``eagle3_draft``
    an EAGLE3 arm."""
    if name == "qwen3-8b-random":
        models = scratch / "qwen3-8b-random"
        target_dir, draft_dir = (
            write_qwen3_8b_configs(models) if write else (models / "target", models / "draft")
        )
        ids = load_prompts(prompts) if prompts else random_prompts(count=16, length=128, vocab=151643)
        return Setting(
            name=name,
            target=target_dir,
            draft=draft_dir,
            prompts=tuple(map(tuple, ids)),
            engine={"load_format": "dummy", "speculative_draft_load_format": "dummy"},
            real_weights=False,
            reference_parity=False,
            max_new_tokens=128,
            prompts_per_cell=4,
            # B = 32 is the round-time target (docs/BENCHMARKS.md); then the span of verify widths (B <= 15
            # verifies 16 tokens, as DFLASH does)
            budget_priority=(32, 256, 64, 128, 16, 8, 4),
            cost=QWEN3_8B_COST,
            note=QWEN3_8B_NOTE,
            target_only_last=True,
        )
    custom = target is not None
    pair = FIXTURES / "hybrid" if name == "hybrid" else FIXTURES
    ids = prompt_ids if prompt_ids is not None else load_prompts(prompts or pair / "heldout_prompts.json")
    pair_note = (
        f"custom pair: target `{target}`, drafter `{draft}`"
        if custom
        else HYBRID_NOTE
        if name == "hybrid"
        else "fixture pair: byte-level Qwen3 target (6 layers, hidden 256) and its DFlash "
        "drafter (3 layers, block 16), trained here; real acceptance"
    )
    return Setting(
        name="custom" if custom else name,
        target=target or pair / "target",
        draft=draft or pair / "draft",
        prompts=tuple(map(tuple, ids)),
        engine={},
        real_weights=True,
        reference_parity=not custom,
        max_new_tokens=256,
        prompts_per_cell=CUSTOM_PROMPTS_PER_CELL,
        budget_priority=(16, 32, 64, 8, 128, 4, 256),
        cost=FIXTURE_COST,
        note=f"{pair_note}; {prompt_note}" if prompt_note else pair_note,
        nextn=read_target_config(target or pair / "target").mtp_layers > 0,
        eagle3_draft=eagle3_draft,
    )
