"""DDTREE registration and its server-args hook, from a real applied sglang 0.5.14 on CPU.

sglang's own package __init__ needs GPU-era dependencies, so the applied spec_info.py (with its
import hunk), spec_registry.py, speculative_hook.py and the DDTREE modules are copied from the
applied site-packages into a tree with empty package __init__ files, and imported there in a
fresh interpreter that has torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from overlay_helpers import site_packages

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.engine.envprobe import probe_env

pytest.importorskip("torch")

FILES = (
    "sglang/srt/speculative/spec_info.py",
    "sglang/srt/speculative/spec_registry.py",
    "sglang/srt/speculative/ddtree_spec.py",
    "sglang/srt/speculative/ddtree_utils.py",
    "sglang/srt/speculative/ddtree_budget.py",
    "sglang/srt/speculative/ddtree_envs.py",
    "sglang/srt/speculative/ddtree_compat.py",
    "sglang/srt/speculative/ddtree_compat_base.py",
    "sglang/srt/speculative/ddtree_contract.py",
    "sglang/srt/speculative/ddtree_sampling.py",
    "sglang/srt/speculative/ddtree_hybrid.py",
    "sglang/srt/speculative/ddtree_gdn_tree.py",
    "sglang/srt/speculative/ddtree_attention_choice.py",
    "sglang/srt/speculative/ddtree_verify_attention.py",
    "sglang/srt/arg_groups/speculative_hook.py",
)

# The hook reads the target's config through sglang's get_config, whose real module needs
# transformers: this stand-in reads config.json alone.
GET_CONFIG_STAND_IN = """
import json, os, types

def _namespace(value):
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    return value

def get_config(model, trust_remote_code, revision=None, model_override_args=None, **kwargs):
    with open(os.path.join(model, "config.json")) as f:
        config = _namespace(json.load(f))
    text = getattr(config, "text_config", config)
    config.get_text_config = lambda: text
    return config
"""

# Target configs: a dense Qwen3 and Qwen3.5-layout hybrids (3 GDN : 1 attention).
TARGET_CONFIGS = {
    "dense": {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 4},
    "hybrid": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": {
            "linear_num_value_heads": 8, "linear_conv_kernel_dim": 4,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        },
    },
    "hybrid_conv5": {
        "architectures": ["Qwen3NextForCausalLM"], "linear_num_value_heads": 8,
        "linear_conv_kernel_dim": 5, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    },
}

PROBE = r"""
import json, os, types
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.ddtree_spec import _handle_ddtree

algo = SpeculativeAlgorithm.from_string("ddtree")
MODELS = os.environ["DDTREE_TEST_MODELS"]
HYBRID = os.path.join(MODELS, "hybrid")
report = {
    "class": type(algo).__name__,
    "is_dflash": algo.is_dflash(),
    "supports_overlap": algo.supports_overlap,
    "need_topk": algo.need_topk(),
    "draft_tokens_for_draft": algo.get_num_tokens_per_bs_for_target_verify(16, True),
    "cases": {},
}

def grammar_overlap(value):
    if value:
        os.environ["SGLANG_DDTREE_GRAMMAR_OVERLAP"] = value
    try:
        return algo.supports_grammar_overlap()
    except ValueError as error:
        return str(error)
    finally:
        os.environ.pop("SGLANG_DDTREE_GRAMMAR_OVERLAP", None)

report["grammar_overlap"] = {value or "unset": grammar_overlap(value) for value in ("", "0", "1", "yes")}

def server_args(**changes):
    ns = types.SimpleNamespace(
        speculative_ddtree_budget=None, attention_backend="triton", prefill_attention_backend=None,
        decode_attention_backend=None, tp_size=1, speculative_draft_window_size=None,
        speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
        speculative_accept_threshold_acc=1.0, speculative_adaptive=False,
        enable_return_hidden_states=False, speculative_num_draft_tokens=None,
        speculative_dflash_block_size=16, enable_dp_attention=False, pp_size=1,
        speculative_draft_model_path="/draft", speculative_num_steps=None,
        speculative_eagle_topk=None, max_running_requests=None, enable_mixed_chunk=False,
        json_model_override_args="{}", model_path=os.path.join(MODELS, "dense"),
        trust_remote_code=False, revision=None,
    )
    for key, value in changes.items():
        setattr(ns, key, value)
    ns.get_attention_backends = lambda: (
        ns.prefill_attention_backend or ns.attention_backend,
        ns.decode_attention_backend or ns.attention_backend,
    )
    return ns

CASES = {
    "default": {},
    "budget32": {"speculative_ddtree_budget": 32},
    "flashinfer": {"attention_backend": "flashinfer", "speculative_ddtree_budget": 4},
    "budget0": {"speculative_ddtree_budget": 0},
    "fa3": {"attention_backend": "fa3"},
    "fa3_decode": {"decode_attention_backend": "fa3"},
    "tp2": {"tp_size": 2},
    "num_draft_tokens": {"speculative_num_draft_tokens": 16},
    "threshold": {"speculative_accept_threshold_acc": 0.5},
    "window": {"speculative_draft_window_size": 64},
    "dp_attention": {"enable_dp_attention": True},
    "attn_dp_size": {"attn_dp_size": 2},
    "pp2": {"pp_size": 2},
    "elastic_ep": {"elastic_ep_backend": "mooncake"},
    "strict_thinking": {"enable_strict_thinking": True},
    "schedule": {"speculative_ddtree_budget_schedule": "1:64,8:16,32:4"},
    "schedule_and_budget": {"speculative_ddtree_budget_schedule": "1:64", "speculative_ddtree_budget": 32},
    "schedule_from_2": {"speculative_ddtree_budget_schedule": "2:64"},
    "schedule_descending": {"speculative_ddtree_budget_schedule": "1:64,8:16,4:8"},
    "schedule_malformed": {"speculative_ddtree_budget_schedule": "1=64"},
    "schedule_budget0": {"speculative_ddtree_budget_schedule": "1:64,8:0"},
    "adaptive": {"speculative_ddtree_adaptive_budgets": "8,32,128"},
    "adaptive_and_schedule": {
        "speculative_ddtree_adaptive_budgets": "8,32", "speculative_ddtree_budget_schedule": "1:64",
    },
    "adaptive_tp2": {"speculative_ddtree_adaptive_budgets": "8,32,128", "tp_size": 2},
    "adaptive_one": {"speculative_ddtree_adaptive_budgets": "32"},
    "hybrid": {"model_path": HYBRID, "speculative_ddtree_budget": 32},
    "hybrid_adaptive": {"model_path": HYBRID, "speculative_ddtree_adaptive_budgets": "8,32"},
    "hybrid_flashinfer_gdn": {"model_path": HYBRID, "linear_attn_decode_backend": "flashinfer"},
    "hybrid_replayssm": {"model_path": HYBRID, "enable_linear_replayssm_spec": True},
    "hybrid_gdn_replayssm": {"model_path": HYBRID, "enable_gdn_replayssm_spec": True},
    "hybrid_conv5": {"model_path": os.path.join(MODELS, "hybrid_conv5")},
    "schedule_chain": {"speculative_ddtree_budget_schedule": "1:64,17:chain"},
    "schedule_only_chain": {"speculative_ddtree_budget_schedule": "1:chain"},
    "adaptive_chain": {"speculative_ddtree_adaptive_budgets": "chain,8"},
    "adaptive_chain_typo": {"speculative_ddtree_adaptive_budgets": "chian,8"},
    "hybrid_adaptive_chain": {"model_path": HYBRID, "speculative_ddtree_adaptive_budgets": "chain,32"},
    "chain_switch": {"speculative_ddtree_budget": 64, "env": {"SGLANG_DDTREE_TREE_SHAPE": "chain"}},
    "chain_switch_typo": {"env": {"SGLANG_DDTREE_TREE_SHAPE": "chains"}},
    "splitkv_flashinfer": {"attention_backend": "flashinfer", "env": {"SGLANG_DDTREE_VERIFY_ATTENTION": "splitkv"}},
    "verify_attention_typo": {"env": {"SGLANG_DDTREE_VERIFY_ATTENTION": "split"}},
    "splitkv_deterministic": {
        "enable_deterministic_inference": True, "env": {"SGLANG_DDTREE_VERIFY_ATTENTION": "splitkv"},
    },
    "splitkv_dcp": {"dcp_size": 2, "env": {"SGLANG_DDTREE_VERIFY_ATTENTION": "splitkv"}},
    "splitkv": {"env": {"SGLANG_DDTREE_VERIFY_ATTENTION": "splitkv"}},
    "draft_splitkv": {"env": {"SGLANG_DDTREE_DRAFT_ATTENTION": "splitkv"}},
    "draft_splitkv_flashinfer": {
        "speculative_draft_attention_backend": "flashinfer", "env": {"SGLANG_DDTREE_DRAFT_ATTENTION": "splitkv"},
    },
    "draft_splitkv_on_flashinfer_target": {
        "attention_backend": "flashinfer", "env": {"SGLANG_DDTREE_DRAFT_ATTENTION": "splitkv"},
    },
    "draft_attention_typo": {"env": {"SGLANG_DDTREE_DRAFT_ATTENTION": "split"}},
    "draft_default_flashinfer": {"speculative_draft_attention_backend": "flashinfer"},
    "draft_auto_flashinfer": {
        "speculative_draft_attention_backend": "flashinfer", "env": {"SGLANG_DDTREE_DRAFT_ATTENTION": "auto"},
    },
    "draft_auto_on_flashinfer_target": {"attention_backend": "flashinfer", "env": {"SGLANG_DDTREE_DRAFT_ATTENTION": "auto"}},
    "dcp": {"dcp_size": 2},
}
for name, changes in CASES.items():
    env = changes.pop("env", {})
    os.environ.update(env)
    args = server_args(**changes)
    try:
        algo.handle_server_args(args)
        report["cases"][name] = {
            "budget": args.speculative_ddtree_budget,
            "block": args.speculative_dflash_block_size,
            "verify_width": args.speculative_num_draft_tokens,
            "steps": args.speculative_num_steps,
            "topk": args.speculative_eagle_topk,
        }
    except ValueError as error:
        report["cases"][name] = {"error": str(error)}
    for key in env:
        del os.environ[key]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def ddtree_report(pristine_sglang_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp_path = tmp_path_factory.mktemp("ddtree-spec")
    env = tmp_path / "venv"
    subprocess.run(["cp", "-a", str(pristine_sglang_env), str(env)], check=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DDTREE_OVERLAY_STATE_DIR", str(tmp_path / "state"))
        apply(probe_env(env))
    site, tree = site_packages(env), tmp_path / "tree"
    for relative in FILES:
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(site / relative, tree / relative)
    (tree / "sglang/srt/utils").mkdir(parents=True)
    (tree / "sglang/srt/utils/hf_transformers_utils.py").write_text(GET_CONFIG_STAND_IN)
    packages = ("sglang", "sglang/srt", "sglang/srt/speculative", "sglang/srt/arg_groups", "sglang/srt/utils")
    for package in packages:
        (tree / package / "__init__.py").touch()
    models = tmp_path / "models"
    for name, config in TARGET_CONFIGS.items():
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "DDTREE_TEST_MODELS": str(models)},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ddtree_is_registered_by_importing_spec_info_and_answers_as_dflash(ddtree_report: dict) -> None:
    assert ddtree_report["class"] == "DDTreeSpecAlgo"
    assert ddtree_report["is_dflash"] and ddtree_report["supports_overlap"]
    assert not ddtree_report["need_topk"]
    assert ddtree_report["draft_tokens_for_draft"] == 16


def test_grammar_batches_keep_overlap_scheduling_only_when_asked(ddtree_report: dict) -> None:
    assert ddtree_report["grammar_overlap"] == {
        "unset": False, "0": False, "1": True,
        "yes": "SGLANG_DDTREE_GRAMMAR_OVERLAP must be 0 or 1, got 'yes'.",
    }


def test_handle_sets_block_size_and_verify_width(ddtree_report: dict) -> None:
    cases = ddtree_report["cases"]
    assert cases["default"] == {"budget": 15, "block": 16, "verify_width": 16, "steps": 1, "topk": 1}
    assert cases["budget32"]["verify_width"] == 33
    assert cases["flashinfer"]["verify_width"] == 16


def test_a_budget_schedule_sets_the_widest_budgets_verify_width(ddtree_report: dict) -> None:
    assert ddtree_report["cases"]["schedule"] == {
        "budget": 64, "block": 16, "verify_width": 65, "steps": 1, "topk": 1,
    }


def test_adaptive_budgets_set_the_widest_budgets_verify_width(ddtree_report: dict) -> None:
    assert ddtree_report["cases"]["adaptive"] == {
        "budget": 128, "block": 16, "verify_width": 129, "steps": 1, "topk": 1,
    }


def test_adaptive_budgets_are_accepted_under_tensor_parallelism(ddtree_report: dict) -> None:
    assert ddtree_report["cases"]["adaptive_tp2"] == ddtree_report["cases"]["adaptive"]


def test_tensor_parallel_is_accepted_and_resolves_like_one_rank(ddtree_report: dict) -> None:
    assert ddtree_report["cases"]["tp2"] == ddtree_report["cases"]["default"]


def test_splitkv_verify_attention_and_dcp_are_each_accepted_on_triton(
    ddtree_report: dict,
) -> None:
    assert ddtree_report["cases"]["splitkv"] == ddtree_report["cases"]["default"]
    assert ddtree_report["cases"]["draft_splitkv"] == ddtree_report["cases"]["default"]  # the drafter on triton
    assert ddtree_report["cases"]["dcp"] == ddtree_report["cases"]["default"]  # extend: no refusal


def test_auto_leaves_a_drafter_off_triton_on_its_own_kernel_without_refusing(ddtree_report: dict) -> None:
    cases = ddtree_report["cases"]
    assert cases["draft_default_flashinfer"] == cases["draft_auto_flashinfer"] == cases["default"]
    assert cases["draft_auto_on_flashinfer_target"] == cases["default"]  # the drafter on the target's flashinfer


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("budget0", "DDTREE requires --speculative-ddtree-budget >= 1, got 0"),
        ("fa3", "DDTREE requires --attention-backend triton or flashinfer, got fa3 (prefill)"),
        ("fa3_decode", "got fa3 (decode)"),
        ("num_draft_tokens", "do not pass --speculative-num-draft-tokens (got 16)"),
        ("threshold", "to stay lossless"),
        ("window", "--speculative-draft-window-size"),
        ("dp_attention", "DDTREE does not support dp attention"),
        ("attn_dp_size", "DDTREE does not support dp attention"),
        ("pp2", "only supports pp_size == 1"),
        ("elastic_ep", "DDTREE does not support elastic EP (--elastic-ep-backend)."),
        ("strict_thinking", "--enable-strict-thinking's grammar to its tree verify on this sglang release (0.5.17+ can)"),
        ("schedule_and_budget", "one of --speculative-ddtree-budget / --speculative-ddtree-budget-schedule, not several"),
        ("adaptive_and_schedule", "--speculative-ddtree-budget-schedule / --speculative-ddtree-adaptive-budgets"),
        ("adaptive_one", "give at least two budgets to choose from"),
        ("schedule_from_2", "must start at batch size 1"),
        ("schedule_descending", "batch sizes must ascend"),
        ("schedule_malformed", "'1=64' is not BATCH_SIZE:BUDGET"),
        ("schedule_budget0", "every budget must be >= 1"),
        ("adaptive_chain_typo", "expected budgets or 'chain' separated by commas"),
        ("chain_switch_typo", "SGLANG_DDTREE_TREE_SHAPE must be 'tree' or 'chain', got 'chains'"),
        ("splitkv_flashinfer", "splitkv runs in the triton backend's own verify path, and the attention backends are flashinfer"),
        ("verify_attention_typo", "SGLANG_DDTREE_VERIFY_ATTENTION must be 'auto' or 'extend' or 'splitkv', got 'split'"),
        ("hybrid_flashinfer_gdn", "--linear-attn-decode-backend flashinfer has none"),
        ("hybrid_replayssm", "does not support --enable-linear-replayssm-spec"),
        ("hybrid_gdn_replayssm", "does not support --enable-gdn-replayssm-spec"),
        ("splitkv_deterministic", "and --enable-deterministic-inference is set"),
        ("splitkv_dcp", "and --dcp-size is 2: pass --attention-backend triton"),
        ("hybrid_conv5", "got linear_conv_kernel_dim=5"),
        ("draft_splitkv_flashinfer", "SGLANG_DDTREE_DRAFT_ATTENTION=splitkv runs in the triton backend, and the drafter's is flashinfer"),
        ("draft_splitkv_on_flashinfer_target", "and the drafter's is flashinfer: pass --speculative-draft-attention-backend triton"),
        ("draft_attention_typo", "SGLANG_DDTREE_DRAFT_ATTENTION must be 'auto' or 'extend' or 'splitkv', got 'split'"),
    ],
)
def test_unsupported_settings_are_refused_with_a_clear_message(ddtree_report: dict, case: str, fragment: str) -> None:
    assert fragment in ddtree_report["cases"][case]["error"]


def test_a_gated_deltanet_target_gets_sglangs_tree_paths(ddtree_report: dict) -> None:
    """topk > 1 after DFLASH's hook forced 1: dense per-node conv windows and tree kernels."""
    cases = ddtree_report["cases"]
    assert cases["hybrid"] == {"budget": 32, "block": 16, "verify_width": 33, "steps": 1, "topk": 2}
    assert cases["hybrid_adaptive"]["topk"] == 2
    assert cases["hybrid_adaptive"]["verify_width"] == 33


def test_the_chain_verifies_the_block_and_only_widens_nothing(ddtree_report: dict) -> None:
    """The chain's width is the block (root + 15 drafted): a schedule or adaptive list with it
    keeps its widest tree's width, and the chain alone verifies what DFLASH does."""
    cases = ddtree_report["cases"]
    dflash_like = {"budget": 15, "block": 16, "verify_width": 16, "steps": 1, "topk": 1}
    assert cases["schedule_only_chain"] == cases["adaptive_chain"] == dflash_like
    assert cases["chain_switch"] == dflash_like  # whatever the budget flag said
    assert cases["schedule_chain"] == {"budget": 64, "block": 16, "verify_width": 65, "steps": 1, "topk": 1}
    assert cases["hybrid_adaptive_chain"]["topk"] == 2
    assert cases["hybrid_adaptive_chain"]["verify_width"] == 33
