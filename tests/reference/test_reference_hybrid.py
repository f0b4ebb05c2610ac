"""The hybrid (Gated DeltaNet + gated attention) reference target, fp32 on CPU.

- A GDN layer's tree verify (every node from its parent's conv window and recurrent state)
  equals running each root-to-node path on its own as a chain, on random trees with batch > 1.
- The chunked (WY) form of the gated delta rule, used for training, equals the recurrence.
- DFlash and DDTree decode exactly what target-only greedy decodes, on a small random-weight
  hybrid target and on the committed trained hybrid pair (ddtree_overlay/fixtures/hybrid). Random drafters are almost never right, so the lossless checks use a drafter
  that proposes the target's own greedy token at a random rank of a made-up distribution:
  rounds then accept 0..L drafts along several branches, which is what exercises the tree
  verify and the commit of the accepted node's recurrent state.

Tolerances (fp32): the tree verify and the per-path chain run the same operations in the same
order except for batching, so they agree to 1e-5 (outputs are O(1)); the chunked form
reorders sums, 1e-4.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from ddtree_overlay.reference import gdn
from ddtree_overlay.reference import hybrid as HY
from ddtree_overlay.reference import model as M
from ddtree_overlay.reference.decode import generate_ar, generate_ddtree, generate_dflash
from ddtree_overlay.reference.hybrid_cache import HybridCache
from ddtree_overlay.reference.metrics import first_divergence

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = HY.Qwen35Config(
    vocab_size=48,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=6,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
)


def random_tree(rng: random.Random, n: int, max_depth: int) -> list[int]:
    """parents[0] = -1, parents[i] < i, depth <= max_depth; every third node or so branches."""
    parents, depth = [-1], [0]
    for i in range(1, n):
        candidates = [j for j in range(i) if depth[j] < max_depth]
        p = i - 1 if depth[i - 1] < max_depth and rng.random() < 0.6 else rng.choice(candidates)
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


def path_to(parents: list[int], node: int) -> list[int]:
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


@pytest.fixture(scope="module")
def target() -> HY.Qwen35Target:
    model = HY.Qwen35Target(CFG)
    HY.init_hybrid_weights(model, seed=0, std=0.15)
    return model.eval()


def warm_cache(model: HY.Qwen35Target, batch: int, seed: int) -> HybridCache:
    """A cache holding a random prefill per row, so no state or conv window is zero."""
    g = torch.Generator().manual_seed(seed)
    cache = model.new_cache(batch, 64)
    ids = torch.randint(0, CFG.vocab_size, (batch, 6), generator=g)
    model(ids, torch.arange(6).expand(batch, 6), cache=cache)
    return cache


@torch.no_grad()
def test_gdn_tree_verify_equals_each_root_to_node_path_run_alone(target) -> None:
    layer = target.model.layers[0].linear_attn
    rng = random.Random(0)
    batch, n = 3, 24
    trees = [random_tree(rng, n, max_depth=8) for _ in range(batch)]
    assert max(len(path_to(t, i)) for t in trees for i in range(n)) == 9  # depth 8 reached
    assert all(len({p for p in t if p >= 0}) < n - 1 for t in trees)  # branches, not chains
    parents = torch.tensor(trees)
    x = torch.randn(batch, n, CFG.hidden_size, generator=torch.Generator().manual_seed(1))
    cache = warm_cache(target, batch, seed=2)
    window0, state0 = cache.conv[0].clone(), cache.ssm[0].clone()
    tree_out = layer(x, cache=cache, slot=0, parents=parents)
    worst = 0.0
    for b in range(batch):
        for node in range(n):
            path = path_to(trees[b], node)
            alone = HybridCache(CFG, batch=1, max_len=64, like=x)
            alone.conv[0], alone.ssm[0] = window0[b : b + 1], state0[b : b + 1]
            chain_out = layer(x[b : b + 1, path], cache=alone, slot=0, parents=None)
            worst = max(worst, float((chain_out[0, -1] - tree_out[b, node]).abs().max()))
    assert worst < 1e-5, worst


@torch.no_grad()
def test_committing_a_tree_path_leaves_the_state_a_chain_over_it_leaves(target) -> None:
    layer = target.model.layers[1].linear_attn
    trees = [random_tree(random.Random(3), 16, max_depth=6)] * 2  # rows of a cache share a tree
    x = torch.randn(2, 16, CFG.hidden_size, generator=torch.Generator().manual_seed(4))
    tree_cache, chain_cache = warm_cache(target, 2, seed=5), warm_cache(target, 2, seed=5)
    keep = path_to(trees[0], 15)
    tree_cache.begin(6)
    for slot in range(len(tree_cache.ssm)):  # compact commits every GDN layer's stash
        layer(x, cache=tree_cache, slot=slot, parents=torch.tensor(trees))
    tree_cache.compact(6, keep)
    layer(x[:, keep], cache=chain_cache, slot=1, parents=None)
    assert torch.allclose(tree_cache.ssm[1], chain_cache.ssm[1], atol=1e-5)
    assert torch.equal(tree_cache.conv[1], chain_cache.conv[1])


def test_compact_refuses_a_path_that_is_not_root_first(target) -> None:
    cache = warm_cache(target, 1, seed=6)
    parents = [-1, 0, 0, 2]
    mask = torch.ones(1, 1, 4, 10, dtype=torch.bool)
    mask[0, 0, :, 6:] = torch.tensor(
        [[i == j or j in path_to(parents, i) for j in range(4)] for i in range(4)]
    )
    with torch.no_grad():
        target(torch.tensor([[1, 2, 3, 4]]), torch.tensor([[6, 7, 7, 8]]), cache=cache,
               cache_start=6, mask=mask)
    with pytest.raises(AssertionError, match="not a root-first path"):
        cache.compact(6, [0, 1, 3])
    cache.compact(6, [0, 2, 3])


def test_chunked_gated_delta_rule_equals_the_recurrence() -> None:
    g_ = torch.Generator().manual_seed(7)
    b, s, h, hv, k, v = 2, 150, 2, 6, 16, 8  # 150 = two full chunks of 64 and a partial one
    q = gdn.expand_heads(gdn.l2norm(torch.randn(b, s, h, k, generator=g_)), hv) * k**-0.5
    kk = gdn.expand_heads(gdn.l2norm(torch.randn(b, s, h, k, generator=g_)), hv)
    vv = torch.randn(b, s, hv, v, generator=g_)
    g, beta = gdn.gates(
        torch.randn(b, s, hv, generator=g_),
        torch.randn(b, s, hv, generator=g_),
        torch.randn(hv, generator=g_),
        torch.randn(hv, generator=g_),
    )
    state0 = torch.randn(b, hv, k, v, generator=g_)
    o_rec, h_rec = gdn.recurrent_tree(q, kk, vv, g, beta, state0, None)
    o_chunk, h_chunk = gdn.chunked(q, kk, vv, g, beta, state0)
    assert torch.allclose(o_rec, o_chunk, atol=1e-4)
    assert torch.allclose(h_rec, h_chunk, atol=1e-4)


@torch.no_grad()
def test_training_form_equals_the_cached_serving_form(target) -> None:
    ids = torch.randint(0, CFG.vocab_size, (2, 40), generator=torch.Generator().manual_seed(8))
    pos = torch.arange(40).expand(2, 40)
    full = target(ids, pos).logits  # chunked GDN, causal attention, no cache
    cache = target.new_cache(2, 64)
    head = target(ids[:, :30], pos[:, :30], cache=cache).logits
    tail = [target(ids[:, t : t + 1], pos[:, t : t + 1], cache=cache, cache_start=t).logits
            for t in range(30, 40)]
    assert torch.allclose(full, torch.cat([head, *tail], dim=1), atol=1e-4)


class GreedyRankDraft(torch.nn.Module):
    """A stand-in drafter: slot i of a block at `start` gets logits whose rank-r token is the
    target's greedy token at start + i, with r = 0 (p 0.55), 1 (0.2), 2 (0.1) or far (0.15).
    Everything else about it is a `DFlashDraft`'s interface."""

    def __init__(self, target: HY.Qwen35Target, greedy: list[int], seed: int) -> None:
        super().__init__()
        self.cfg = M.DFlashConfig(
            vocab_size=CFG.vocab_size, hidden_size=CFG.hidden_size, intermediate_size=1,
            num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, head_dim=16,
            block_size=8, mask_token_id=CFG.vocab_size - 1, target_layer_ids=(0, 2),
            num_target_layers=CFG.num_hidden_layers,
        )
        self.greedy, self.seed = greedy, seed
        self.to_hidden = torch.linalg.pinv(target.lm_head.weight)  # [H, V]: exact, V <= H

    def new_cache(self, batch: int, max_len: int) -> M.KVCache:
        return M.KVCache(1, batch, 1, max_len, 1, torch.float32, "cpu")

    def forward(self, block_emb, block_positions, **_) -> torch.Tensor:
        start = int(block_positions[0, 0])
        rng = random.Random(self.seed * 100003 + start)
        logits = torch.empty(block_emb.shape[1], self.cfg.vocab_size)
        for i in range(logits.shape[0]):
            order = list(range(self.cfg.vocab_size))
            rng.shuffle(order)
            want = self.greedy[start + i] if start + i < len(self.greedy) else order[0]
            rank = rng.choices([0, 1, 2, 20], weights=[55, 20, 10, 15])[0]
            order.remove(want)
            order.insert(rank, want)
            logits[i, order] = torch.linspace(4.0, -4.0, self.cfg.vocab_size)
        return (logits @ self.to_hidden.T).unsqueeze(0)


@pytest.fixture(scope="module")
def prompts_and_greedy(target):
    rng = random.Random(9)
    prompts = [[rng.randrange(CFG.vocab_size - 1) for _ in range(rng.randint(3, 9))] for _ in range(3)]
    return [(p, generate_ar(target, p, max_new_tokens=48)) for p in prompts]


def test_dflash_on_the_hybrid_target_equals_target_only_greedy(target, prompts_and_greedy) -> None:
    rounds = []
    for seed, (prompt, greedy) in enumerate(prompts_and_greedy):
        draft = GreedyRankDraft(target, [*prompt, *greedy.tokens], seed)
        out = generate_dflash(target, draft, prompt, max_new_tokens=48)
        assert first_divergence(out, greedy) is None, first_divergence(out, greedy)
        rounds += out.accept_lens
    assert max(rounds) >= 4 and min(rounds) == 1  # partial acceptances, not all or nothing


@pytest.mark.parametrize("budget", [4, 12, 32])
def test_ddtree_on_the_hybrid_target_equals_target_only_greedy(target, prompts_and_greedy, budget) -> None:
    deep_branch = 0
    for seed, (prompt, greedy) in enumerate(prompts_and_greedy):
        draft = GreedyRankDraft(target, [*prompt, *greedy.tokens], seed)
        out = generate_ddtree(target, draft, prompt, budget=budget, max_new_tokens=48,
                              record_trees=True)
        assert first_divergence(out, greedy) is None, first_divergence(out, greedy)
        # accepted nodes popped after a sibling: their parent's state was shared with a branch
        deep_branch += sum(
            any(t.parents[v] == t.parents[u] for u in t.accepted[1:] for v in range(1, u))
            for t in out.trees
        )
    assert deep_branch > 0


def test_random_drafter_runs_on_the_hybrid_target(target, prompts_and_greedy) -> None:
    """The real `DFlashDraft` against the hybrid's embed, lm_head and aux features."""
    cfg = M.DFlashConfig(
        vocab_size=CFG.vocab_size, hidden_size=CFG.hidden_size, intermediate_size=96,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        block_size=8, mask_token_id=CFG.vocab_size - 1, target_layer_ids=(0, 2),
        num_target_layers=CFG.num_hidden_layers,
    )
    draft = M.DFlashDraft(cfg)
    M.init_weights(draft, seed=1)
    prompt, greedy = prompts_and_greedy[0]
    out = generate_ddtree(target, draft.eval(), prompt, budget=8, max_new_tokens=48)
    assert first_divergence(out, greedy) is None


def test_checkpoint_round_trip_keeps_sglang_names_and_outputs(target, tmp_path) -> None:
    from safetensors import safe_open

    vision = {"model_type": "qwen3_5", "depth": 1, "hidden_size": 64, "num_heads": 2}
    config = HY.qwen35_config_json(CFG, bos=1, eos=2, pad=3, vision=vision)
    M.save_checkpoint(target, config, tmp_path, rename=HY.checkpoint_name)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in names
    assert "model.language_model.layers.3.self_attn.q_proj.weight" in names
    assert {"lm_head.weight", "mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight"} <= names
    assert not any(n.startswith("model.layers.") for n in names)
    loaded = HY.load_any_target(tmp_path)
    assert isinstance(loaded, HY.Qwen35Target) and loaded.cfg == CFG
    text = config["text_config"]
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert sum(text["rope_parameters"]["mrope_section"]) == CFG.rotary_dim // 2
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = target.to(torch.bfloat16).float()(ids, torch.arange(4)[None]).logits
        got = loaded(ids, torch.arange(4)[None]).logits
    target.float()
    assert torch.allclose(want, got)


FIXTURE = Path(__file__).resolve().parents[2] / "ddtree_overlay" / "fixtures" / "hybrid"


def test_trained_hybrid_pair_fits_its_weight_budget() -> None:
    size = sum((FIXTURE / d / "model.safetensors").stat().st_size for d in ("target", "draft"))
    assert size <= 16_000_000, size


@pytest.mark.parametrize("algo", ["dflash", "ddtree"])
def test_trained_hybrid_pair_decodes_exactly_target_only_greedy(algo) -> None:
    """The committed pair (fp32): speculative output equals greedy, and the drafter is useful."""
    target = HY.load_any_target(FIXTURE / "target")
    draft = M.load_draft(FIXTURE / "draft")
    prompt = json.loads((FIXTURE / "heldout_prompts.json").read_text())[0]
    greedy = generate_ar(target, prompt, max_new_tokens=32)
    if algo == "dflash":
        out = generate_dflash(target, draft, prompt, max_new_tokens=32)
    else:
        out = generate_ddtree(target, draft, prompt, budget=16, max_new_tokens=32)
    assert first_divergence(out, greedy) is None, first_divergence(out, greedy)
    assert sum(out.accept_lens) / len(out.accept_lens) > 1.5
