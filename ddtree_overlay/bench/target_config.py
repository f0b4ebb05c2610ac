"""What a target's `config.json` tells the bench: whether it carries an MTP head (so a NEXTN
arm can run), and its Gated-DeltaNet shape (so the recommendation can state the recurrent-state
memory a verify width costs).

Qwen3.5 / Qwen3.6 keep their text model under ``text_config`` and count the MTP head in
``mtp_num_hidden_layers``; DeepSeek-V3, GLM-4 MoE and MiMo put ``num_nextn_predict_layers`` at
the top level. Gated-DeltaNet layers are the ``linear_attention`` entries of ``layer_types``
(Qwen3-Next, Qwen3.5, Qwen3.6), sized by ``linear_num_value_heads`` heads of
``linear_key_head_dim`` x ``linear_value_head_dim``, kept in ``mamba_ssm_dtype``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")
STATE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class GatedDeltaNet:
    layers: int
    value_heads: int
    key_dim: int
    value_dim: int
    state_bytes: int  # per element of the recurrent state

    def snapshot_bytes_per_token(self, tp_size: int = 1) -> int:
        """One recurrent-state snapshot per verify token of one request, on one rank (value
        heads are split over the TP ranks)."""
        return self.layers * self.value_heads * self.key_dim * self.value_dim * self.state_bytes // tp_size


@dataclass(frozen=True)
class TargetConfig:
    mtp_layers: int  # 0: no MTP head, no NEXTN arm
    gated_deltanet: GatedDeltaNet | None  # None: not a hybrid


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
    return TargetConfig(mtp_layers=mtp, gated_deltanet=_gated_deltanet(text or raw))


def _gated_deltanet(cfg: Mapping[str, Any]) -> GatedDeltaNet | None:
    layers = sum(1 for kind in cfg.get("layer_types") or () if kind == "linear_attention")
    heads, key_dim, value_dim = (
        _int(cfg.get(k)) for k in ("linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    )
    if not (layers and heads and key_dim and value_dim):
        return None
    dtype = str(cfg.get("mamba_ssm_dtype") or "float32")
    return GatedDeltaNet(layers, heads, key_dim, value_dim, STATE_BYTES.get(dtype, 4))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
