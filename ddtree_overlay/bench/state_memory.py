"""What a hybrid (Gated-DeltaNet) target's recurrent state costs per request, from its config.json.

A speculative verify on a GDN target keeps, per request, one recurrent-state snapshot per verify
token (SGLang's ``intermediate_ssm_state_cache``: ``[GDN layers, requests + 1, verify tokens,
value heads, key dim, value dim]`` in the ``mamba_ssm_dtype``) and one conv window per verify
token (``intermediate_conv_window``, ``[GDN layers, requests + 1, verify tokens, conv dim,
kernel - 1]`` in the model dtype; DDTREE's tree verify keeps the dense layout). So the snapshot
path costs, per request,

    verify width x GDN layers x (value heads x key dim x value dim x 4 B  +  conv dim x (kernel - 1) x 2 B)

at TP = 1, divided by the TP size on each GPU (the heads split over the ranks). The payload logs the same from the pools it sees
(``RecurrentStateCommit.describe`` in ``ddtree_hybrid.py``); this is the plan's view, before an
engine starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddtree_overlay.bench.settings import RANDOM_SHAPES, Setting

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class GdnStateShape:
    gdn_layers: int
    value_heads: int
    key_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    ssm_bytes: int  # per element of the recurrent state (mamba_ssm_dtype)
    conv_bytes: int  # per element of the conv window (the model dtype)

    @classmethod
    def of_config(cls, config: Mapping[str, Any]) -> GdnStateShape | None:
        """From a target's config.json (top level, or its ``text_config``); None when it has no
        Gated-DeltaNet layers."""
        text = config.get("text_config") or config
        if text.get("linear_num_value_heads") is None:
            return None
        layer_types = text.get("layer_types") or ()
        return cls(
            gdn_layers=sum(1 for kind in layer_types if kind == "linear_attention"),
            value_heads=int(text["linear_num_value_heads"]),
            key_heads=int(text["linear_num_key_heads"]),
            key_dim=int(text["linear_key_head_dim"]),
            value_dim=int(text["linear_value_head_dim"]),
            conv_kernel=int(text["linear_conv_kernel_dim"]),
            ssm_bytes=DTYPE_BYTES[text.get("mamba_ssm_dtype", "float32")],
            conv_bytes=DTYPE_BYTES[text.get("dtype") or config.get("dtype") or "bfloat16"],
        )

    @property
    def ssm_bytes_per_token(self) -> int:
        """One request's recurrent state, every GDN layer."""
        return self.gdn_layers * self.value_heads * self.key_dim * self.value_dim * self.ssm_bytes

    @property
    def conv_bytes_per_token(self) -> int:
        """One request's conv window, every GDN layer."""
        conv_dim = 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
        return self.gdn_layers * conv_dim * (self.conv_kernel - 1) * self.conv_bytes

    @property
    def bytes_per_verify_token(self) -> int:
        return self.ssm_bytes_per_token + self.conv_bytes_per_token


def shape_of(setting: Setting) -> GdnStateShape | None:
    """The setting's target's GDN state shape (a random setting's from the config it writes,
    which a dry run does not); None when it is not a hybrid or its config is unreadable."""
    shape = RANDOM_SHAPES.get(setting.name)
    if shape is not None:
        return GdnStateShape.of_config(shape.configs()[0])
    try:
        config = json.loads((setting.target / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return GdnStateShape.of_config(config)


def snapshot_memory(shape: GdnStateShape, *, verify_width: int, concurrency: int, tp_size: int = 1) -> dict[str, Any]:
    """The snapshot path's bytes on each GPU for one arm at one concurrency: per request, and for
    ``concurrency`` requests plus the pool's spare slot; ``live_bytes`` are the requests' own
    states beside them (one per request, more with the radix cache's extra slots); ``text`` says
    it in a line."""
    per_token = shape.bytes_per_verify_token // tp_size
    per_request = verify_width * per_token
    entry = {
        "verify_width": verify_width,
        "concurrency": concurrency,
        "tp_size": tp_size,
        "per_verify_token_bytes": per_token,
        "per_request_bytes": per_request,
        "total_bytes": (concurrency + 1) * per_request,
        "live_bytes": concurrency * per_token,
    }
    return entry | {"text": describe(entry)}


def size_text(nbytes: float) -> str:
    """``4.7 GiB``, ``147 MiB``, ``0.58 MiB``."""
    if nbytes >= GIB:
        return f"{nbytes / GIB:.1f} GiB"
    return f"{nbytes / MIB:.0f} MiB" if nbytes >= 10 * MIB else f"{nbytes / MIB:.2f} MiB"


def describe(entry: Mapping[str, Any]) -> str:
    """``33 x 147 MiB = 4.7 GiB per request, 80.4 GiB at concurrency 16 (+ 2.3 GiB live)``."""
    return (
        f"{entry['verify_width']} x {size_text(entry['per_verify_token_bytes'])} = "
        f"{size_text(entry['per_request_bytes'])} per request, "
        f"{size_text(entry['total_bytes'])} at concurrency {entry['concurrency']} "
        f"(+ {size_text(entry['live_bytes'])} live)"
    )
