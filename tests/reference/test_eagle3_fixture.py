"""The committed EAGLE-3 drafter of the dense fixture target (ddtree_overlay/fixtures/eagle3), from
scripts/train_eagle3_fixture.py: its files, the acceptance its training log records (rerun on
the first held-out prompts with the reference chain decoder), and the script's smoke run.

What stock SGLang's own loader makes of the files: tests/matrix/test_eagle3_fixture_sglang.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from ddtree_overlay.reference import model as M
from ddtree_overlay.reference.decode import generate_ar, generate_eagle3
from ddtree_overlay.reference.eagle3 import Eagle3Config, Eagle3Draft, load_eagle3_draft

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "ddtree_overlay" / "fixtures"
DRAFT = FIXTURES / "eagle3"
SCRIPT = REPO / "scripts" / "train_eagle3_fixture.py"
RERUN_PROMPTS = 3

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_config_names_the_drafter_class_and_target_layers_sglang_can_capture() -> None:
    draft, target = read_json(DRAFT / "config.json"), read_json(FIXTURES / "target" / "config.json")
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"] and draft["model_type"] == "llama"
    assert draft["num_hidden_layers"] == 1 and draft["tie_word_embeddings"] is False
    # the full vocabulary: d2t maps it onto itself, the target's lm_head rows are not taken
    assert draft["draft_vocab_size"] == draft["vocab_size"] == target["vocab_size"]
    assert draft["hidden_size"] == target["hidden_size"]  # the worker shares the target's embedding
    assert draft["max_position_embeddings"] >= target["max_position_embeddings"]
    ids = draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    # SGLang captures id k before layer k + 1, so k <= L - 2; fc reads three distinct features
    assert len(set(ids)) == len(ids) == 3
    assert all(0 <= k <= target["num_hidden_layers"] - 2 for k in ids)


def test_checkpoint_holds_exactly_the_drafter_module_weights() -> None:
    module = Eagle3Draft(Eagle3Config.from_dict(read_json(DRAFT / "config.json")))
    expected = module.state_dict()
    with safe_open(str(DRAFT / "model.safetensors"), "pt") as f:
        stored = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    assert sorted(stored) == sorted(expected)
    for name, tensor in stored.items():
        assert tensor.shape == expected[name].shape, name
        floating = expected[name].is_floating_point()
        assert tensor.dtype == (torch.bfloat16 if floating else expected[name].dtype), name
    assert not stored["d2t"].any() and stored["t2d"].all()
    assert not any("embed_tokens" in name for name in stored)


def test_the_checkpoint_stays_under_2_5_mb_and_its_log_records_its_size() -> None:
    sizes = {f.name: f.stat().st_size for f in DRAFT.iterdir()}
    assert sizes["model.safetensors"] < 2_500_000, sizes
    assert read_json(DRAFT / "training_log.json")["bytes"]["model.safetensors"] == sizes["model.safetensors"]


@pytest.fixture(scope="module")
def rerun() -> tuple[dict, list]:
    """The logged evaluation and the reference chain rerun on its first prompts, with the
    target-only greedy tokens beside each."""
    logged = read_json(DRAFT / "training_log.json")["eval_eagle3"]
    target = M.load_target(FIXTURES / "target", dtype=torch.float32)
    draft = load_eagle3_draft(DRAFT)
    prompts = read_json(FIXTURES / "heldout_prompts.json")[:RERUN_PROMPTS]
    kw = {"max_new_tokens": logged["max_new_tokens"]}
    runs = [
        (generate_eagle3(target, draft, p, num_steps=logged["num_steps"], **kw), generate_ar(target, p, **kw))
        for p in prompts
    ]
    return logged, runs


def test_the_committed_drafter_reproduces_the_logged_accept_lengths(rerun) -> None:
    logged, runs = rerun
    assert logged["dtype"] == "float32" and logged["prompts"] >= RERUN_PROMPTS
    for i, (chain, _) in enumerate(runs):
        assert list(chain.accept_lens) == logged["accept_lens_per_prompt"][i], i


def test_the_drafter_accepts_more_than_one_token_per_round_and_stays_lossless(rerun) -> None:
    logged, runs = rerun
    assert logged["accept_len_mean"] > 1.5 and logged["divergent_prompts"] == 0
    lens = [a for chain, _ in runs for a in chain.accept_lens]
    assert sum(lens) / len(lens) > 1.5
    assert max(lens) == logged["num_steps"] + 1  # some rounds accept every draft
    for chain, greedy in runs:
        assert chain.tokens == greedy.tokens


def test_smoke_run_trains_saves_and_measures_a_loadable_drafter(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    log = read_json(tmp_path / "training_log.json")
    assert log["draft"]["steps"] == log["args"]["train_steps"]
    assert log["draft"]["curve"][-1]["loss"] < log["draft"]["curve"][0]["loss"]
    evaluation = log["eval_eagle3"]
    assert evaluation["prompts"] == len(evaluation["accept_lens_per_prompt"]) == 2
    assert evaluation["divergent_prompts"] == 0
    draft = load_eagle3_draft(tmp_path)
    assert draft.cfg == Eagle3Config.from_dict(read_json(DRAFT / "config.json"))
