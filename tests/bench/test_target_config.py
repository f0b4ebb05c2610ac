"""bench.target_config: the MTP head (NEXTN) and the Gated-DeltaNet shape read from config.json."""

from __future__ import annotations

import json
from pathlib import Path

from ddtree_overlay.bench.settings import FIXTURES
from ddtree_overlay.bench.target_config import GatedDeltaNet, read_target_config, target_config

MIB = 1 << 20


def test_the_hybrid_fixture_has_an_mtp_head_and_six_gated_deltanet_layers() -> None:
    config = read_target_config(FIXTURES / "hybrid" / "target")
    assert config.mtp_layers == 1
    assert config.gated_deltanet == GatedDeltaNet(layers=6, value_heads=6, key_dim=64, value_dim=64, state_bytes=4)


def test_the_dense_fixture_is_neither() -> None:
    config = read_target_config(FIXTURES / "target")
    assert config.mtp_layers == 0 and config.gated_deltanet is None


def test_qwen3_6_27b_shape_costs_144_mib_per_verify_token_and_half_under_tp_2() -> None:
    text = {
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
        "linear_num_value_heads": 48, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
    }
    config = target_config({"model_type": "qwen3_5", "text_config": text})
    assert config.mtp_layers == 1 and config.gated_deltanet is not None
    assert config.gated_deltanet.snapshot_bytes_per_token() == 144 * MIB
    assert config.gated_deltanet.snapshot_bytes_per_token(tp_size=2) == 72 * MIB


def test_a_top_level_nextn_count_and_an_unreadable_config(tmp_path: Path) -> None:
    assert target_config({"num_nextn_predict_layers": 1}).mtp_layers == 1
    assert target_config({"num_nextn_predict_layers": 0, "mtp_num_hidden_layers": True}).mtp_layers == 0
    (tmp_path / "config.json").write_text("{not json")
    assert read_target_config(tmp_path).mtp_layers == 0
    (tmp_path / "config.json").write_text(json.dumps([1, 2]))
    assert read_target_config(tmp_path).gated_deltanet is None
