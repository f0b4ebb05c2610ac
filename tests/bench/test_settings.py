"""bench.settings: the fixture pairs (dense and hybrid), the Qwen3-8B-shaped random pair, a custom pair, prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench import settings
from ddtree_overlay.bench.supervision import reference_jobs
from ddtree_overlay.fixture_paths import PAIRS


def test_qwen3_8b_setting_writes_its_configs_and_uses_dummy_weights(tmp_path: Path) -> None:
    setting = settings.make_setting("qwen3-8b-random", scratch=tmp_path)
    target = json.loads((setting.target / "config.json").read_text())
    draft = json.loads((setting.draft / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"], target["vocab_size"]) == (36, 4096, 151936)
    assert target["architectures"] == ["Qwen3ForCausalLM"]
    assert draft["architectures"] == ["DFlashDraftModel"] and draft["num_hidden_layers"] == 5
    assert draft["dflash_config"]["target_layer_ids"] == [1, 9, 17, 25, 33]
    assert draft["dflash_config"]["block_size"] == 16
    assert 0 <= draft["dflash_config"]["mask_token_id"] < draft["vocab_size"]
    assert draft["num_target_layers"] == 36 and draft["hidden_size"] == target["hidden_size"]
    assert setting.engine == {"load_format": "dummy", "speculative_draft_load_format": "dummy"}
    assert not setting.real_weights and not setting.reference_parity
    assert "meaningless" in setting.note
    assert all(0 <= t < 151643 for p in setting.prompts for t in p)
    plan = bp.plan_sweep(setting, bp.BenchConfig())
    assert all(g.engine["load_format"] == "dummy" for g in plan.groups)
    assert [g.name for g in plan.groups][:4] == ["dflash", "dflash-no-overlap", "ddtree-b32", "ddtree-b256"]
    assert plan.groups[-1].name == "target-only"  # random weights: the least telling arm goes last
    assert plan.primer is not None and plan.primer.group.name == "ddtree-b32"  # the first DDTREE engine's config
    assert plan.primer.est_start_s > plan.runs[1].est_start_s  # it compiles the kernels


def test_dry_run_setting_writes_nothing(tmp_path: Path) -> None:
    settings.make_setting("qwen3-8b-random", scratch=tmp_path / "s", write=False)
    assert not (tmp_path / "s").exists()


def test_custom_pair_is_real_weights_without_reference_parity(tmp_path: Path) -> None:
    setting = settings.make_setting("fixture", scratch=tmp_path, target=tmp_path / "t", draft=tmp_path / "d")
    assert setting.name == "custom" and setting.real_weights and not setting.reference_parity


@pytest.mark.parametrize(
    "content", ["{", "[]", "[[]]", "[[1, -2]]", '[["a"]]', '{"a": 1}']
)
def test_bad_prompt_files_are_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "prompts.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"as JSON|token-id lists"):
        settings.load_prompts(path)


def test_hybrid_setting_is_the_bundled_hybrid_pair_with_reference_parity(tmp_path: Path) -> None:
    setting = settings.make_setting("hybrid", scratch=tmp_path)
    target = json.loads((setting.target / "config.json").read_text())
    assert target["model_type"] == "qwen3_5" and setting.target.parent.name == "hybrid"
    assert setting.real_weights and setting.reference_parity and setting.name == "hybrid"
    held_out = json.loads((PAIRS["hybrid"] / "heldout_prompts.json").read_text())
    assert [list(p) for p in setting.prompts] == held_out
    plan = bp.plan_sweep(setting, bp.BenchConfig(budgets=(32,), batch_sizes=(1,), temperatures=(0.0,)))
    draft = ["--draft", str(setting.draft)]
    assert reference_jobs(plan) == {"dflash": [*draft, "--algo", "dflash"], "ddtree-b32": [*draft, "--algo", "ddtree", "--budget", "32"]}
