"""The hybrid fixture's config.json and safetensors names, as stock SGLang 0.5.14 and 0.5.23 read them.

Both come from `scripts/train_fixtures.py --pair hybrid` (its config writer and its target's
state-dict names; no training needed). Each release is pip-installed (--no-deps) into a scratch
venv over the matrix's CPU import closure (`ddtree_overlay.matrix.envs`), where
`hybrid_load_probe.py` parses the config with the release's own `Qwen3_5Config` and feeds every
name to the release's own `load_weights` of `Qwen3_5ForConditionalGeneration` (the target) and
`Qwen3_5ForCausalLMMTP` (NEXTN's draft) against stand-in parameters.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT
from release_wheels import release_env

PROBE = Path(__file__).with_name("hybrid_load_probe.py")

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.slow,
    pytest.mark.matrix,
    pytest.mark.skipif(sys.version_info < (3, 11), reason="0.5.22+ wheels need Python >= 3.11"),
]


def training_script():
    spec = importlib.util.spec_from_file_location("train_fixtures", REPO_ROOT / "scripts" / "train_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fixture_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    from ddtree_overlay.reference.hybrid import checkpoint_name

    script = training_script()
    pair = script.PAIRS["hybrid"]
    out = tmp_path_factory.mktemp("hybrid-fixture")
    target = pair.new_target(seed=0)
    pair.save_target(target, out)
    names = sorted(checkpoint_name(n) for n in target.state_dict())
    (out / "names.json").write_text(json.dumps(names))
    return out / "config.json", out / "names.json", names


@pytest.mark.parametrize("release", ["0.5.14", "0.5.23"])
def test_release_parses_the_config_and_places_every_weight(release, fixture_files, tmp_path) -> None:
    config, names_file, names = fixture_files
    env = release_env(release, tmp_path)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [str(env / "bin" / "python"), "-I", str(PROBE), str(config), str(names_file)],
        capture_output=True, text=True, timeout=900, check=False,
        env=environ | {"CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    cfg = report["config"]
    assert cfg["text_model_type"] == "qwen3_5_text"
    assert cfg["layers_block_type"] == ["linear_attention"] * 3 + ["attention"] + ["linear_attention"] * 3 + ["attention"]
    assert cfg["linear_heads"] == [2, 6, 64, 64, 4]
    assert cfg["attention"] == [4, 2, 64, True]
    assert cfg["partial_rotary_factor"] == 0.25
    assert cfg["rope"]["mrope_section"] == [3, 3, 2]
    assert "temporal=torch.float32" in cfg["ssm_state_dtype"]  # mamba_ssm_dtype
    assert cfg["tie_word_embeddings"] is False

    target = report["target"]
    assert target["not_found"] == [], target["not_found"][:5]
    expected_shards = {
        "qkv_proj.weight": ["'q'", "'k'", "'v'"],
        "gate_up_proj.weight": ["0", "1"],
        "in_proj_qkvz.weight": ["(0, 1, 2)", "3"],
        "in_proj_ba.weight": ["0", "1"],
    }
    for param, shards in target["shards"].items():
        fused = next((v for k, v in expected_shards.items() if param.endswith(k)), ["None"])
        assert sorted(shards) == sorted(fused), (param, shards)

    mtp = report["mtp"]
    assert mtp["not_found"] == [], mtp["not_found"][:5]
    for param, shards in mtp["shards"].items():
        fused = next((v for k, v in expected_shards.items() if param.endswith(k)), ["None"])
        assert sorted(shards) == sorted(fused), (param, shards)
    assert sum(n.startswith("mtp.") for n in names) > 0


@pytest.mark.parametrize("release", ["0.5.14", "0.5.23"])
def test_release_parses_the_qwen3_6_27b_random_config(release, tmp_path) -> None:
    """The bench's `qwen3.6-27b-random` target (bench.settings), through the same probe with no
    checkpoint names: its weights are SGLang's dummy ones."""
    from ddtree_overlay.bench.settings import qwen3_6_27b_configs, write_configs

    target_dir, _ = write_configs(tmp_path / "models", *qwen3_6_27b_configs())
    (tmp_path / "names.json").write_text("[]")
    env = release_env(release, tmp_path)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [str(env / "bin" / "python"), "-I", str(PROBE), str(target_dir / "config.json"), str(tmp_path / "names.json")],
        capture_output=True, text=True, timeout=900, check=False,
        env=environ | {"CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = json.loads(done.stdout.strip().splitlines()[-1])["config"]
    assert cfg["text_model_type"] == "qwen3_5_text"
    assert cfg["layers_block_type"] == (["linear_attention"] * 3 + ["attention"]) * 16
    assert cfg["linear_heads"] == [16, 48, 128, 128, 4]
    assert cfg["attention"] == [24, 4, 256, True]
    assert cfg["partial_rotary_factor"] == 0.25 and cfg["rope"]["mrope_section"] == [11, 11, 10]
    assert "temporal=torch.float32" in cfg["ssm_state_dtype"]
