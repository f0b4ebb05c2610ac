"""bench.settings' random-weight settings: the Qwen3.6-27B-shaped hybrid pair, prompt lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtree_overlay.bench import settings
from ddtree_overlay.fixture_paths import PAIRS

HYBRID_FIXTURE = PAIRS["hybrid"] / "target" / "config.json"
TOKEN_IDS = {"bos_token_id", "eos_token_id", "pad_token_id", "image_token_id", "video_token_id",
             "vision_start_token_id", "vision_end_token_id"}  # the fixture's tokenizer's; SGLang's defaults serve


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """SGLang's rule (speculative/dflash_utils.py, 0.5.14), for checking the drafter's config."""
    span = num_target_layers - 3 - 1
    return [round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def test_the_27b_target_has_the_hybrid_fixtures_keys_and_qwen3_6_27bs_shape(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3.6-27b-random", scratch=tmp_path)
    target = json.loads((setting.target / "config.json").read_text())
    fixture = json.loads(HYBRID_FIXTURE.read_text())
    # the fixture's config is the layout stock SGLang 0.5.14 and 0.5.23 load (tests/matrix)
    assert set(target) == set(fixture) - TOKEN_IDS
    assert set(target["text_config"]) == set(fixture["text_config"]) - TOKEN_IDS
    assert set(target["vision_config"]) == set(fixture["vision_config"])
    assert (target["model_type"], target["architectures"]) == (fixture["model_type"], fixture["architectures"])
    text = target["text_config"]
    assert text["layer_types"] == (["linear_attention"] * 3 + ["full_attention"]) * 16
    assert text["num_hidden_layers"] == 64
    assert (text["hidden_size"], text["intermediate_size"], text["vocab_size"]) == (5120, 17408, 248320)
    assert (text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]) == (24, 4, 256)
    assert (text["linear_num_value_heads"], text["linear_num_key_heads"]) == (48, 16)
    assert (text["linear_key_head_dim"], text["linear_value_head_dim"], text["linear_conv_kernel_dim"]) == (128, 128, 4)
    assert text["partial_rotary_factor"] == 0.25 and text["attn_output_gate"] and text["mamba_ssm_dtype"] == "float32"
    rotary_half = text["head_dim"] * text["partial_rotary_factor"] // 2
    assert sum(text["rope_parameters"]["mrope_section"]) == rotary_half
    assert target["vision_config"]["out_hidden_size"] == text["hidden_size"]


def test_the_27b_drafter_is_dflash_shaped_for_it(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3.6-27b-random", scratch=tmp_path)
    draft = json.loads((setting.draft / "config.json").read_text())
    assert draft["architectures"] == ["DFlashDraftModel"] and draft["num_hidden_layers"] == 5
    assert draft["dflash_config"]["target_layer_ids"] == build_target_layer_ids(64, 5) == [1, 16, 31, 46, 61]
    assert draft["num_target_layers"] == 64 and draft["hidden_size"] == 5120
    assert 0 <= draft["dflash_config"]["mask_token_id"] < draft["vocab_size"] == 248320
    per_layer = 5120 * (32 + 8 + 8) * 128 + 32 * 128 * 5120 + 3 * 5120 * 17408
    assert 1.5e9 < 5 * per_layer + 5 * 5120 * 5120 < 2.0e9  # z-lab's drafter is "2B", 3.3 GB
    assert setting.engine == {"load_format": "dummy", "speculative_draft_load_format": "dummy",
                              "mem_fraction_static": 0.9}
    assert not setting.real_weights and setting.target_only_last and "meaningless" in setting.note


@pytest.mark.parametrize("name", ["qwen3-8b-random", "qwen3.6-27b-random"])
def test_random_prompts_have_the_asked_length_below_the_special_tokens(tmp_path: Path, name: str) -> None:
    setting = settings.make_setting(name, scratch=tmp_path, prompt_tokens=1024, write=False)
    assert len(setting.prompts) == settings.RANDOM_PROMPTS
    assert {len(p) for p in setting.prompts} == {1024}
    assert all(0 <= t < settings.RANDOM_SHAPES[name].prompt_vocab for p in setting.prompts for t in p)
    default = settings.make_setting(name, scratch=tmp_path, write=False)
    assert {len(p) for p in default.prompts} == {settings.DEFAULT_RANDOM_PROMPT_TOKENS}
    assert not (tmp_path / name).exists()


def test_prompt_tokens_are_for_the_random_settings_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prompt_tokens sets the random prompts"):
        settings.make_setting("fixture", scratch=tmp_path, prompt_tokens=1024)
