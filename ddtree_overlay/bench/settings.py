"""What a bench measures on: a bundled fixture pair (dense or Gated-DeltaNet hybrid), a custom
real-weight pair, or a Qwen3-8B- or Qwen3.6-27B-shaped pair with random weights, its prompts,
and the rough costs the plan's time estimates use.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import CHAIN_BASELINES, DFLASH, TARGET_ONLY
from ddtree_overlay.bench.target_config import TargetConfig, read_target_config, target_config
from ddtree_overlay.fixture_paths import PAIRS

SETTINGS = ("fixture", "hybrid", "qwen3-8b-random", "qwen3.6-27b-random")
RANDOM_PROMPTS = 64  # distinct random prompts: one full wave at batch 64
DEFAULT_RANDOM_PROMPT_TOKENS = 128
CUSTOM_PROMPTS_PER_CELL = 8


@dataclass(frozen=True)
class CostModel:
    """Rough seconds for the time box and the dry-run estimate; the runner rescales by what it
    measures. Round time = base + per-token cost x (batch x verify width)."""

    engine_start_s: float
    first_start_extra_s: float  # kernel compilation in a fresh machine
    # health check, shutdown, and a warm-up's cost beyond its waves' decode (first-use compiles);
    # the waves themselves are estimated from the cells (`estimates.estimate_overhead_s`)
    engine_overhead_s: float
    plain_step_ms: float
    spec_round_ms: float
    per_verify_token_us: float
    wave_overhead_s: float = 0.05
    cell_overhead_s: float = 0.6  # the runner's idle gap before a cell, bookkeeping
    prefill_token_us: float = 0.0  # per prompt token (matters for 1 K / 8 K prompts)
    stream_only_overhead_s: float = 5.0  # health check, shutdown: no waves to warm up
    # the first engine on a backend compiled at first use (`attention.COMPILED_AT_FIRST_USE`),
    # start and warm-up beyond engine_start_s; first_start_extra_s where not measured
    first_compile_extra_s: float | None = None

    def first_start_s(self, *, first: bool, compiles: bool) -> float:
        """An engine's start: the machine's first pays the compiles, and so does the first on a
        backend compiled at first use."""
        compile_extra = self.first_start_extra_s if self.first_compile_extra_s is None else self.first_compile_extra_s
        return self.engine_start_s + max(self.first_start_extra_s if first else 0.0, compile_extra if compiles else 0.0)


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
    # Per baseline attention backend, why its NEXTN arm runs without overlap scheduling
    # (`bench.nextn_overlap`); a backend not listed runs it with overlap
    nextn_without_overlap: Mapping[str, str] = field(default_factory=dict)
    # what the target's config.json says (its context length and heads, `bench.target_config`)
    facts: TargetConfig = field(default_factory=lambda: TargetConfig(0, None))

    @property
    def hybrid(self) -> bool:
        """The target has Gated-DeltaNet layers."""
        return self.facts.gated_deltanet is not None

    def tau(self, algorithm: str, budget: int | None, temperature: float) -> float:
        if not self.real_weights or algorithm == TARGET_ONLY:
            return 1.0
        key: Any = DFLASH if algorithm == DFLASH else budget
        tau = _CHAIN_TAU if algorithm in CHAIN_BASELINES else _FIXTURE_TAU.get(key, 5.0)
        return tau if temperature == 0 else max(1.0, tau * 2 / 3)


def context_overflow(setting: Setting, prompts: int, max_new_tokens: int) -> str | None:
    """Why the first ``prompts`` prompts and ``max_new_tokens`` new tokens do not fit the
    target's context (SGLang would refuse every such request once its engine is up); None
    where they fit or the context is not known."""
    longest = max((len(p) for p in setting.prompts[:prompts]), default=0)
    context = setting.facts.context_tokens
    if context is None or longest + max_new_tokens <= context:
        return None
    return (
        f"a prompt of {longest} tokens and {max_new_tokens} new tokens exceed the target's context of "
        f"{context} tokens (max_position_embeddings in its config.json)"
    )


FIXTURE_COST = CostModel(
    engine_start_s=45,
    first_start_extra_s=85,
    engine_overhead_s=10,
    plain_step_ms=3.0,
    spec_round_ms=12.0,
    per_verify_token_us=2.0,
)
# On an H100 (2026-12-06, 1 K-token prompts, c = 16) engines started in 21-24 s on a machine that
# had started one, the fresh machine's first in 38 s with the carried compile cache, and each
# engine's health check, warm-up compiles and shutdown took about 5 s beyond its waves.
QWEN3_8B_COST = CostModel(
    engine_start_s=30,
    first_start_extra_s=90,
    engine_overhead_s=10,
    plain_step_ms=8.0,
    spec_round_ms=14.0,
    per_verify_token_us=25.0,
    prefill_token_us=30.0,  # ~2 x 8 G FLOP per token at ~550 TFLOP/s
)
# The rounds scaled from the 8B by the weights read per step (54 against 16 GB) and the verify's
# FLOPs per token (2 x 27 G at ~700 TFLOP/s), plus the recurrent-state snapshot each verify token
# writes (147 MiB at ~4 TB/s: ~38 us; DDTREE's flat state writes a 3.6 MiB conv window and input
# stash per node instead, so it estimates high for that mode). On an H200 (2026-12-02, 1 K-token
# prompts) DFLASH's step took 24.68 / 28.17 / 40.09 ms at bs 1 / 4 / 8 and DDTREE B = 32's (flat)
# 26.88 / 31.86 / 47.91; engines started in 21-47 s after a primer, the first on a fresh machine
# in 86-130 s (docs/BENCHMARKS.md). DFLASH's first engine on flashinfer on a fresh machine took
# 229, 289 and 326 s to start and warm up (2026-12-04, three commands; 55-60 s on a machine that
# had compiled them).
QWEN3_6_27B_COST = CostModel(
    engine_start_s=60,
    first_start_extra_s=90,
    first_compile_extra_s=270,
    engine_overhead_s=30,
    plain_step_ms=17.0,
    spec_round_ms=24.0,
    per_verify_token_us=115.0,
    prefill_token_us=100.0,
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


def write_configs(directory: Path, target_cfg: Mapping[str, Any], draft_cfg: Mapping[str, Any]) -> tuple[Path, Path]:
    """``directory``/target and /draft, each with its config.json."""
    dirs = directory / "target", directory / "draft"
    for path, cfg in zip(dirs, (target_cfg, draft_cfg), strict=True):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return dirs


def write_qwen3_8b_configs(directory: Path) -> tuple[Path, Path]:
    return write_configs(directory, *qwen3_8b_configs())


QWEN3_6_27B_VOCAB = 248320
QWEN3_6_27B_LAYERS = 64
QWEN3_6_27B_NOTE = (
    "Qwen3.6-27B-shaped hybrid target (64 layers = 16 x (3 Gated-DeltaNet + 1 gated attention), "
    "hidden 5120, GDN 48 value / 16 key heads of 128, fp32 recurrent state, vocab 248320) and a "
    "DFlash-shaped drafter (5 layers of hidden 5120, target_layer_ids [1, 16, 31, 46, 61], block 16) "
    "with SGLang's dummy (random) weights: acceptance, losslessness and speedups are meaningless "
    "here; only the per-round cost, recurrent-state upkeep included (snapshots, or DDTREE's flat "
    "state), against budget and concurrency is."
)


def qwen3_6_27b_configs() -> tuple[dict[str, Any], dict[str, Any]]:
    """config.json of a Qwen3.6-27B-shaped target, as SGLang's ``qwen3_5`` model loads it (the
    layout of the hybrid fixture's), and of a DFlash drafter for it.

    The text model has Qwen3.6-27B's shape. The vision tower is the fixture's one-block stand-in:
    prompts are token ids and no decode step runs it, so its real size (about 0.4 B parameters)
    would only take memory from the KV cache and the recurrent states. The drafter's shape gives
    z-lab's Qwen3.6-27B-DFlash size ("2B", 3.3 GB of safetensors): five Qwen3 layers of hidden
    5120 and intermediate 17408 (1.6 B) plus the fc over five target layers; it shares the
    target's embedding and LM head, and its layers come from SGLang's own rule
    (``build_target_layer_ids(64, 5)``)."""
    layer_types = (["linear_attention"] * 3 + ["full_attention"]) * (QWEN3_6_27B_LAYERS // 4)
    text = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "initializer_range": 0.02,
        "intermediate_size": 17408,
        "layer_types": layer_types,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 32768,  # 8 K prompts and their decode; less to plan for than 262144
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,  # Qwen3.6-27B ships a one-layer MTP head (NEXTN's draft)
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": 24,
        "num_hidden_layers": QWEN3_6_27B_LAYERS,
        "num_key_value_heads": 4,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000.0,
            "rope_type": "default",
        },
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": QWEN3_6_27B_VOCAB,
    }
    target = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "dtype": "bfloat16",
        "model_type": "qwen3_5",
        "text_config": text,
        "tie_word_embeddings": False,
        "vision_config": {
            "deepstack_visual_indexes": [],
            "depth": 1,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 64,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 128,
            "model_type": "qwen3_5",
            "num_heads": 2,
            "num_position_embeddings": 64,
            "out_hidden_size": 5120,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    }
    draft = {
        "architectures": ["DFlashDraftModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": 16,
        "dflash_config": {
            "block_size": 16,
            "mask_token_id": QWEN3_6_27B_VOCAB - 1,  # random weights: any id serves
            "target_layer_ids": [1, 16, 31, 46, 61],
        },
        "dtype": "bfloat16",
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "initializer_range": 0.02,
        "intermediate_size": 17408,
        "layer_types": ["full_attention"] * 5,
        "max_position_embeddings": 32768,
        "model_type": "qwen3",
        "num_attention_heads": 32,
        "num_hidden_layers": 5,
        "num_key_value_heads": 8,
        "num_target_layers": QWEN3_6_27B_LAYERS,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000000.0, "rope_type": "default"},
        "rope_theta": 10000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_sliding_window": False,
        "vocab_size": QWEN3_6_27B_VOCAB,
    }
    return target, draft


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
    prompt_tokens: int | None = None,
    write: bool = True,
    prompt_ids: Sequence[Sequence[int]] | None = None,
    prompt_note: str | None = None,
    eagle3_draft: Path | None = None,
) -> Setting:
    """A fixture pair (dense or hybrid) or a custom real-weight pair, or a random-weight one
    (whose config.json files are written under ``scratch`` unless ``write`` is False; its random
    prompts are ``prompt_tokens`` long).

    ``prompt_ids`` (chat prompts already tokenized, described by ``prompt_note``) replace the
    ``prompts`` file. A real-weight target with an MTP head gets a NEXTN arm; ``eagle3_draft``
    an EAGLE3 arm."""
    if name in RANDOM_SHAPES:
        return _random_setting(name, scratch=scratch, prompts=prompts, prompt_tokens=prompt_tokens, write=write)
    if prompt_tokens is not None:
        raise ValueError(f"prompt_tokens sets the random prompts of {' and '.join(RANDOM_SHAPES)}, not of {name}")
    custom = target is not None
    pair = PAIRS["hybrid" if name == "hybrid" else "dense"]
    ids = prompt_ids if prompt_ids is not None else load_prompts(prompts or pair / "heldout_prompts.json")
    facts = read_target_config(target or pair / "target")
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
        nextn=facts.mtp_layers > 0,
        eagle3_draft=eagle3_draft,
        facts=facts,
    )


@dataclass(frozen=True)
class RandomShape:
    """A random-weight setting's models and what differs between them."""

    configs: Callable[[], tuple[dict[str, Any], dict[str, Any]]]
    prompt_vocab: int  # random prompt ids stay below the special tokens
    engine: Mapping[str, Any]
    budget_priority: tuple[int, ...]
    cost: CostModel
    note: str


RANDOM_SHAPES = {
    "qwen3-8b-random": RandomShape(
        configs=qwen3_8b_configs,
        prompt_vocab=151643,
        engine={},
        # B = 32 is the round-time target (docs/BENCHMARKS.md); then the span of verify widths
        # (B <= 15 verifies 16 tokens, as DFLASH does)
        budget_priority=(32, 256, 64, 128, 16, 8, 4),
        cost=QWEN3_8B_COST,
        note=QWEN3_8B_NOTE,
    ),
    "qwen3.6-27b-random": RandomShape(
        configs=qwen3_6_27b_configs,
        prompt_vocab=248044,
        # 54 GB of weights, the KV cache and the recurrent states (a snapshot per verify token,
        # or the flat state's far smaller nodes) share one H200: SGLang's default static share
        # would leave too little (docs/bench.md)
        engine={"mem_fraction_static": 0.9},
        # B = 15 verifies DFLASH's 16 tokens; in the snapshot state every wider budget costs a
        # snapshot per verify token, and from about B = 23 batch 16 no longer fits; the flat
        # state fits every budget at batch 16 by the same arithmetic (docs/bench.md)
        budget_priority=(15, 8, 16, 4, 32, 64, 128, 256),
        cost=QWEN3_6_27B_COST,
        note=QWEN3_6_27B_NOTE,
    ),
}


def _random_setting(
    name: str, *, scratch: Path, prompts: Path | None, prompt_tokens: int | None, write: bool
) -> Setting:
    shape = RANDOM_SHAPES[name]
    models = scratch / name
    target_dir, draft_dir = write_configs(models, *shape.configs()) if write else (models / "target", models / "draft")
    length = prompt_tokens or DEFAULT_RANDOM_PROMPT_TOKENS
    facts = target_config(shape.configs()[0])
    ids = load_prompts(prompts) if prompts else random_prompts(count=RANDOM_PROMPTS, length=length, vocab=shape.prompt_vocab)
    return Setting(
        name=name,
        target=target_dir,
        draft=draft_dir,
        prompts=tuple(map(tuple, ids)),
        engine={"load_format": "dummy", "speculative_draft_load_format": "dummy", **shape.engine},
        real_weights=False,
        reference_parity=False,
        max_new_tokens=128,
        prompts_per_cell=4,
        budget_priority=shape.budget_priority,
        cost=shape.cost,
        note=shape.note,
        target_only_last=True,
        facts=facts,
    )
