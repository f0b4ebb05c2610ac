"""bench.target_config: the MTP head (NEXTN), the Gated-DeltaNet shape and the context length read from config.json."""

from __future__ import annotations

import json
from pathlib import Path

from ddtree_overlay.bench.settings import qwen3_6_27b_configs
from ddtree_overlay.bench.target_config import GatedDeltaNet, read_target_config, target_config
from ddtree_overlay.fixture_paths import FIXTURES

QWEN3_6_27B = GatedDeltaNet(
    layers=48, value_heads=48, key_heads=16, key_dim=128, value_dim=128, conv_kernel=4, state_bytes=4,
    activation_bytes=2,
)


def test_the_hybrid_fixture_has_an_mtp_head_and_six_gated_deltanet_layers() -> None:
    config = read_target_config(FIXTURES / "hybrid" / "target")
    assert config.mtp_layers == 1
    assert config.gated_deltanet == GatedDeltaNet(
        layers=6, value_heads=6, key_heads=2, key_dim=64, value_dim=64, conv_kernel=4, state_bytes=4,
        activation_bytes=2,
    )


def test_the_dense_fixture_is_neither() -> None:
    config = read_target_config(FIXTURES / "target")
    assert config.mtp_layers == 0 and config.gated_deltanet is None


def test_the_27b_shape_is_read_from_its_text_config() -> None:
    config = target_config(qwen3_6_27b_configs()[0])
    assert config.mtp_layers == 1 and config.gated_deltanet == QWEN3_6_27B
    assert QWEN3_6_27B.conv_channels == 2 * 16 * 128 + 48 * 128


def test_a_top_level_gdn_config_takes_its_dtypes_from_their_keys() -> None:
    text = qwen3_6_27b_configs()[0]["text_config"]
    flat = {k: v for k, v in text.items() if k != "dtype"} | {"torch_dtype": "float32", "mamba_ssm_dtype": "bfloat16"}
    gdn = target_config(flat).gated_deltanet
    assert gdn is not None and (gdn.state_bytes, gdn.activation_bytes) == (2, 4)
    undeclared = {k: v for k, v in flat.items() if k not in ("torch_dtype", "mamba_ssm_dtype")}
    gdn = target_config(undeclared).gated_deltanet
    assert gdn is not None and (gdn.state_bytes, gdn.activation_bytes) == (4, 2)  # fp32 state, bf16 model


def test_a_gdn_config_missing_a_dimension_is_no_hybrid() -> None:
    text = qwen3_6_27b_configs()[0]["text_config"]
    for key in ("linear_num_key_heads", "linear_conv_kernel_dim", "layer_types"):
        assert target_config({k: v for k, v in text.items() if k != key}).gated_deltanet is None
    assert target_config(text | {"linear_num_value_heads": "48"}).gated_deltanet is None


def test_a_top_level_nextn_count_and_an_unreadable_config(tmp_path: Path) -> None:
    assert target_config({"num_nextn_predict_layers": 1}).mtp_layers == 1
    assert target_config({"num_nextn_predict_layers": 0, "mtp_num_hidden_layers": True}).mtp_layers == 0
    (tmp_path / "config.json").write_text("{not json")
    assert read_target_config(tmp_path).mtp_layers == 0
    (tmp_path / "config.json").write_text(json.dumps([1, 2]))
    assert read_target_config(tmp_path).gated_deltanet is None


def test_the_context_length_is_read_at_the_top_or_from_the_text_config() -> None:
    assert read_target_config(FIXTURES / "target").context_tokens == 2048
    assert read_target_config(FIXTURES / "hybrid" / "target").context_tokens == 2048  # under text_config
    assert target_config(qwen3_6_27b_configs()[0]).context_tokens == 32768
    assert target_config({}).context_tokens is None


def test_a_tp_size_the_heads_do_not_split_over_is_named() -> None:
    qwen = target_config(qwen3_6_27b_configs()[0])  # 24 attention, 4 kv, 48 / 16 GDN heads
    assert (qwen.attention_heads, qwen.kv_heads) == (24, 4)
    assert [qwen.tp_refusal(tp) for tp in (1, 2, 4, 8)] == [None] * 4
    assert qwen.tp_refusal(3) == "its 16 Gated-DeltaNet key heads do not split over --tp-size 3"
    assert qwen.tp_refusal(16) == "its 24 attention heads do not split over --tp-size 16"
    gqa = target_config({"num_attention_heads": 12, "num_key_value_heads": 4})
    assert gqa.tp_refusal(12) is None  # 4 kv heads replicated three times each
    assert gqa.tp_refusal(6) == "its 4 key-value heads neither split over nor replicate across --tp-size 6"
    assert target_config({}).tp_refusal(3) is None  # a config that says nothing refuses nothing
