"""The reference decoders on the committed fixture pair (ddtree_overlay/fixtures), fp32 on CPU.

Lossless at T=0: DFlash and DDTree must reproduce target-only greedy output token for token.
In fp32 a mismatch is a bug unless the target's top1-top2 logit margin at the first divergent
step is within float noise (the message prints it).

Where the acceptance-length numbers come from: these tests only check exactness and shapes.
The fixture pair's measured acceptance lengths (DFlash tau on held-out prompts, DDTree at
several budgets) are produced by `python -m ddtree_overlay.reference` and recorded, with the
command, in ddtree_overlay/fixtures/README.md and docs/BENCHMARKS.md ("Dense pair: acceptance in
the offline reference").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ddtree_overlay.reference import model as M
from ddtree_overlay.reference.decode import generate_ar, generate_ddtree, generate_dflash
from ddtree_overlay.reference.metrics import first_divergence

FIXTURES = Path(__file__).resolve().parents[2] / "ddtree_overlay" / "fixtures"
NEW_TOKENS = 64


# Tiny models: one intra-op thread is fastest, and avoids oversubscribing shared CI cores.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def pair() -> tuple[M.Qwen3Target, M.DFlashDraft, list[list[int]]]:
    torch.manual_seed(0)
    target = M.load_target(FIXTURES / "target", dtype=torch.float32)
    draft = M.load_draft(FIXTURES / "draft", dtype=torch.float32)
    prompts = json.loads((FIXTURES / "heldout_prompts.json").read_text())
    return target, draft, prompts


@pytest.fixture(scope="module")
def greedy(pair) -> dict[int, object]:
    target, _, prompts = pair
    return {i: generate_ar(target, prompts[i], max_new_tokens=NEW_TOKENS) for i in (0, 1, 2)}


def assert_same_as_greedy(result, baseline) -> None:
    div = first_divergence(result, baseline)
    assert div is None, f"{result.algo} diverged from target-only greedy: {div}"


def test_fixture_files_have_the_sglang_formats() -> None:
    t = json.loads((FIXTURES / "target" / "config.json").read_text())
    d = json.loads((FIXTURES / "draft" / "config.json").read_text())
    assert t["architectures"] == ["Qwen3ForCausalLM"] and t["model_type"] == "qwen3"
    assert d["architectures"] == ["DFlashDraftModel"] and d["model_type"] == "qwen3"
    assert t["tie_word_embeddings"] is False and t["head_dim"] == 64 and t["hidden_size"] % 16 == 0
    assert d["hidden_size"] == t["hidden_size"] and d["head_dim"] == 64
    dc = d["dflash_config"]
    assert d["block_size"] == dc["block_size"] == 16
    assert max(dc["target_layer_ids"]) <= t["num_hidden_layers"] - 2
    assert d["num_target_layers"] == t["num_hidden_layers"]
    assert 0 <= dc["mask_token_id"] < t["vocab_size"]
    prompts = json.loads((FIXTURES / "heldout_prompts.json").read_text())
    assert len(prompts) >= 64
    assert all(dc["mask_token_id"] not in p for p in prompts)
    size = sum((FIXTURES / d / "model.safetensors").stat().st_size for d in ("target", "draft"))
    assert size <= 12_000_000, size


@pytest.mark.parametrize("i", [0, 1, 2])
def test_dflash_equals_target_greedy(pair, greedy, i: int) -> None:
    target, draft, prompts = pair
    r = generate_dflash(target, draft, prompts[i], max_new_tokens=NEW_TOKENS)
    assert_same_as_greedy(r, greedy[i])
    assert sum(r.accept_lens) >= NEW_TOKENS - 1 and all(1 <= a <= 16 for a in r.accept_lens)


@pytest.mark.parametrize(("i", "budget"), [(0, 8), (1, 32), (2, 64), (0, 1)])
def test_ddtree_equals_target_greedy(pair, greedy, i: int, budget: int) -> None:
    target, draft, prompts = pair
    r = generate_ddtree(
        target, draft, prompts[i], budget=budget, max_new_tokens=NEW_TOKENS, record_trees=True
    )
    assert_same_as_greedy(r, greedy[i])
    for tree, accept_len in zip(r.trees, r.accept_lens, strict=True):
        assert len(tree.tokens) == 1 + budget  # exactly B drafted nodes (V^15 prefixes reachable)
        assert tree.accepted[0] == 0 and len(tree.accepted) == accept_len


def test_ddtree_budget_zero_is_target_only(pair, greedy) -> None:
    target, draft, prompts = pair
    r = generate_ddtree(target, draft, prompts[0], budget=0, max_new_tokens=16)
    assert r.tokens == greedy[0].tokens[:16]
    assert set(r.accept_lens) == {1}


def test_bf16_path_runs(pair) -> None:
    target = M.load_target(FIXTURES / "target", dtype=torch.bfloat16)
    draft = M.load_draft(FIXTURES / "draft", dtype=torch.bfloat16)
    prompt = pair[2][3]
    r = generate_ddtree(target, draft, prompt, budget=16, max_new_tokens=24)
    assert len(r.tokens) == 24 and all(0 <= t < 272 for t in r.tokens)


def test_aux_feature_k_is_the_output_of_layer_k(pair) -> None:
    """SGLang captures `hidden_states + residual` before layer k+1 for id k, i.e. HF
    hidden_states[k+1]. Check: feature k fed through layers k+1..L-1 + norm + lm_head gives
    the model's logits, and feature 0 is embed -> layer 0."""
    target, _, prompts = pair
    cfg = target.cfg
    ids = torch.tensor([prompts[4]])
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    ks = tuple(range(cfg.num_hidden_layers - 1))  # 0..L-2: every capturable id
    out = target(ids, pos, capture=ks)
    feats = out.aux.split(cfg.hidden_size, dim=-1)
    cos, sin = M.rope_cos_sin(pos, cfg.head_dim, cfg.rope_theta)
    kw = {"cache": None, "cache_start": 0, "mask": None, "causal": True}
    h0 = target.model.layers[0](target.model.embed_tokens(ids), cos, sin, index=0, **kw)
    torch.testing.assert_close(feats[0], h0, rtol=0, atol=0)
    for k in ks:
        h = feats[k]
        for j in range(k + 1, cfg.num_hidden_layers):
            h = target.model.layers[j](h, cos, sin, index=j, **kw)
        torch.testing.assert_close(
            target.lm_head(target.model.norm(h)).float(), out.logits, rtol=1e-5, atol=1e-5
        )
    with pytest.raises(AssertionError, match="not capturable"):
        target(ids, pos, capture=(cfg.num_hidden_layers - 1,))


def test_training_block_form_equals_serving_form(pair) -> None:
    """The drafter's batched training pass (many anchors, context < anchor) equals the serving
    pass (context = committed prefix in the draft cache, block at anchor..anchor+15)."""
    target, draft, prompts = pair
    seq = prompts[5] + list(generate_ar(target, prompts[5], max_new_tokens=40).tokens)
    x = torch.tensor([seq])
    s = x.shape[1]
    aux = target(
        x, torch.arange(s).unsqueeze(0), capture=draft.cfg.target_layer_ids, logits=False
    ).aux
    anchors = torch.tensor([[len(prompts[5]), s - 20, s - 2]])
    q = draft.cfg.block_size
    block = torch.full((1, 3, q), draft.cfg.mask_token_id)
    block[0, :, 0] = x[0, anchors[0]]
    batched = draft.forward_anchor_blocks(target.model.embed_tokens(block), anchors, aux)
    for n, a in enumerate(anchors[0].tolist()):
        cache = draft.new_cache(1, s + q)
        served = draft(
            target.model.embed_tokens(block[:, n]),
            a + torch.arange(q).unsqueeze(0),
            cache=cache,
            ctx_aux=aux[:, :a],
            ctx_positions=torch.arange(a).unsqueeze(0),
            ctx_start=0,
        )
        torch.testing.assert_close(batched[:, n], served, rtol=1e-4, atol=1e-4)


def test_incremental_draft_context_equals_a_fresh_pass(pair) -> None:
    """The drafter cache grows round by round from verify-pass features of accepted tokens;
    a fresh pass over the whole committed prefix (features from one target prefill) must
    draft the same block."""
    target, draft, prompts = pair
    prompt = prompts[6]
    r = generate_dflash(target, draft, prompt, max_new_tokens=NEW_TOKENS, record_trees=True)
    ids_k, q = draft.cfg.target_layer_ids, draft.cfg.block_size
    for i in (1, 2, len(r.trees) - 1):
        committed = prompt + list(r.tokens[: sum(r.accept_lens[:i])])
        root = r.trees[i].tokens[0]
        assert root == r.tokens[sum(r.accept_lens[:i])]
        x = torch.tensor([committed])
        aux = target(x, torch.arange(x.shape[1]).unsqueeze(0), capture=ids_k, logits=False).aux
        block = torch.tensor([[root] + [draft.cfg.mask_token_id] * (q - 1)])
        h = draft(
            target.model.embed_tokens(block),
            len(committed) + torch.arange(q).unsqueeze(0),
            cache=draft.new_cache(1, len(committed) + q),
            ctx_aux=aux,
            ctx_positions=torch.arange(len(committed)).unsqueeze(0),
            ctx_start=0,
        )
        assert target.lm_head(h[0, 1:]).argmax(-1).tolist() == list(r.trees[i].tokens[1:])
