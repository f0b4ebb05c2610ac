"""The EAGLE-3 fixture drafter (ddtree_overlay/fixtures/eagle3) as stock SGLang 0.5.14 and 0.5.23 load it.

Each release is pip-installed (--no-deps) into a scratch venv over the matrix's CPU import
closure, where `eagle3_load_probe.py` instantiates the release's own classes on the CPU: the
drafter class its `ModelConfig` resolves, fed the committed checkpoint by its own
`load_weights`, and `Qwen3ForCausalLM` for the fixture target with its EAGLE-3 capture hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT
from release_wheels import release_env

PROBE = Path(__file__).with_name("eagle3_load_probe.py")
FIXTURES = REPO_ROOT / "ddtree_overlay" / "fixtures"

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.slow,
    pytest.mark.matrix,
    pytest.mark.skipif(sys.version_info < (3, 11), reason="0.5.22+ wheels need Python >= 3.11"),
]


def checkpoint_names() -> list[str]:
    from safetensors import safe_open

    with safe_open(str(FIXTURES / "eagle3" / "model.safetensors"), "pt") as f:
        return sorted(f.keys())


@pytest.fixture(scope="module", params=["0.5.14", "0.5.23"])
def report(request, tmp_path_factory: pytest.TempPathFactory) -> dict:
    env = release_env(request.param, tmp_path_factory.mktemp(f"sglang-{request.param}"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [str(env / "bin" / "python"), "-I", str(PROBE), str(FIXTURES / "eagle3"), str(FIXTURES / "target")],
        capture_output=True, text=True, timeout=900, check=False,
        env=environ | {"CUDA_VISIBLE_DEVICES": "", "SGLANG_USE_CPU_ENGINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_release_loads_every_weight_into_its_own_drafter_class(report) -> None:
    draft = report["draft"]
    assert draft["class"] == "LlamaForCausalLMEagle3"
    names = checkpoint_names()
    # d2t becomes hot_token_id and t2d is skipped: the two names no parameter receives
    assert draft["not_placed"] == ["d2t", "t2d"]
    assert sorted(draft["placed"]) == [n for n in names if n not in ("d2t", "t2d")]
    fused = {"qkv_proj": ["'q'", "'k'", "'v'"], "gate_up_proj": ["0", "1"]}
    for param, expected in fused.items():
        shards = [shard for p, shard in draft["placed"].values() if p.endswith(f"{param}.weight")]
        assert sorted(shards) == sorted(expected), (param, shards)
    assert all(draft["equal"].values()), draft["equal"]
    # every parameter filled, but the embedding: the worker hands it the target's (`set_embed`)
    assert {n for n, nan in draft["unwritten"].items() if nan} == {"model.embed_tokens.weight"}
    # only the vocabulary-parallel parameters pad rows past the checkpoint's
    assert {n for n, rows in draft["padding_rows"].items() if rows} == {"model.embed_tokens.weight", "lm_head.weight"}
    assert draft["load_lm_head_from_target"] is False
    assert draft["hot_token_id"] == list(range(len(draft["hot_token_id"])))
    vocab = json.loads((FIXTURES / "target" / "config.json").read_text())["vocab_size"]
    assert len(draft["hot_token_id"]) == vocab


def test_the_target_captures_the_three_named_layers_and_its_default_would_not(report) -> None:
    target, ids = report["target"], report["draft"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert target["class"] == "Qwen3ForCausalLM"
    assert target["capture_before"] == [k + 1 for k in ids]
    assert len(set(target["capture_before"])) == 3 and max(target["capture_before"]) < target["num_hidden_layers"]
    # without the ids a 6-layer target would give fc two features where it reads three
    assert len(set(target["default_capture_before"])) < 3
