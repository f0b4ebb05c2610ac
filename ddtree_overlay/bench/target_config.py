"""What a target's `config.json` tells the bench: whether it carries an MTP head (so a NEXTN
arm can run), its Gated-DeltaNet shape (so the plan and the recommendation can state the
recurrent-state memory a verify costs, `bench.state_memory`), its context length and its heads
(so prompts that do not fit, or a --tp-size its heads do not split over, are refused before any
engine starts).

Qwen3.5 / Qwen3.6 keep their text model under ``text_config`` and count the MTP head in
``mtp_num_hidden_layers``; DeepSeek-V3, GLM-4 MoE and MiMo put ``num_nextn_predict_layers`` at
the top level. Gated-DeltaNet layers are the ``linear_attention`` entries of ``layer_types``
(Qwen3-Next, Qwen3.5, Qwen3.6), with ``linear_num_value_heads`` value and
``linear_num_key_heads`` key heads of ``linear_value_head_dim`` / ``linear_key_head_dim``, a
causal conv of ``linear_conv_kernel_dim`` taps over their [q | k | v] channels, the recurrent
state kept in ``mamba_ssm_dtype``, the conv windows and activations in the model's ``dtype``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
GDN_KEYS = (
    "linear_num_value_heads",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


@dataclass(frozen=True)
class GatedDeltaNet:
    """A hybrid target's Gated-DeltaNet layers, at TP = 1."""

    layers: int
    value_heads: int
    key_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    state_bytes: int  # per element of the recurrent state (mamba_ssm_dtype)
    activation_bytes: int  # per element of the conv windows and activations (the model dtype)

    @property
    def conv_channels(self) -> int:
        """The conv's channels: [q | k | v]."""
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim


@dataclass(frozen=True)
class TargetConfig:
    mtp_layers: int  # 0: no MTP head, no NEXTN arm
    gated_deltanet: GatedDeltaNet | None  # None: not a hybrid
    # max_position_embeddings: SGLang's context length unless told another; None: not stated
    context_tokens: int | None = None
    attention_heads: int = 0  # query heads of the attention layers; 0: not stated
    kv_heads: int = 0  # key-value heads; 0: not stated
    attention_layers: int = 0  # full-attention layers (a hybrid's others are Gated-DeltaNet); 0: not stated

    def tp_refusal(self, tp_size: int) -> str | None:
        """Why SGLang cannot shard this target over ``tp_size`` GPUs (its heads do not split);
        None where they do, or the config does not say."""
        gdn = self.gated_deltanet
        split = [("attention heads", self.attention_heads)]
        split += [("Gated-DeltaNet value heads", gdn.value_heads), ("Gated-DeltaNet key heads", gdn.key_heads)] if gdn else []
        for what, heads in split:
            if heads and heads % tp_size:
                return f"its {heads} {what} do not split over --tp-size {tp_size}"
        # SGLang splits the key-value heads, or replicates them where there are fewer than ranks
        if self.kv_heads and self.kv_heads % tp_size and tp_size % self.kv_heads:
            return f"its {self.kv_heads} key-value heads neither split over nor replicate across --tp-size {tp_size}"
        return None


def read_target_config(target: Path) -> TargetConfig:
    """The target's facts; a missing or unreadable config.json reads as a plain target."""
    try:
        raw = json.loads((target / "config.json").read_text())
    except (OSError, ValueError):
        return TargetConfig(0, None)
    return target_config(raw if isinstance(raw, Mapping) else {})


def target_config(raw: Mapping[str, Any]) -> TargetConfig:
    text = raw.get("text_config") if isinstance(raw.get("text_config"), Mapping) else {}
    mtp = max((_int(cfg.get(key)) for cfg in (raw, text) for key in MTP_KEYS), default=0)
    model = text or raw
    context = max((_int(cfg.get("max_position_embeddings")) for cfg in (raw, text)), default=0)
    return TargetConfig(
        mtp_layers=mtp,
        gated_deltanet=_gated_deltanet(model, raw),
        context_tokens=context or None,
        attention_heads=_int(model.get("num_attention_heads")),
        kv_heads=_int(model.get("num_key_value_heads")),
        attention_layers=_attention_layers(model),
    )


def _attention_layers(cfg: Mapping[str, Any]) -> int:
    kinds = cfg.get("layer_types")
    if kinds:
        return sum(1 for kind in kinds if kind == "full_attention")
    return _int(cfg.get("num_hidden_layers"))


def _gated_deltanet(cfg: Mapping[str, Any], top: Mapping[str, Any]) -> GatedDeltaNet | None:
    layers = sum(1 for kind in cfg.get("layer_types") or () if kind == "linear_attention")
    value_heads, key_heads, key_dim, value_dim, conv_kernel = (_int(cfg.get(key)) for key in GDN_KEYS)
    if not (layers and value_heads and key_heads and key_dim and value_dim and conv_kernel):
        return None
    dtype = cfg.get("dtype") or cfg.get("torch_dtype") or top.get("dtype") or top.get("torch_dtype")
    return GatedDeltaNet(
        layers=layers,
        value_heads=value_heads,
        key_heads=key_heads,
        key_dim=key_dim,
        value_dim=value_dim,
        conv_kernel=conv_kernel,
        state_bytes=DTYPE_BYTES.get(str(cfg.get("mamba_ssm_dtype") or "float32"), 4),
        activation_bytes=DTYPE_BYTES.get(str(dtype or "bfloat16"), 2),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
