"""Lossless sampling: at T>0, DDTree (one target sample per node, walk) and DFlash (greedy drafts,
target sample per position) must produce the target's own distribution over continuations.

Toy vocabulary (5 tokens + MASK) with random models; the exact joint distribution of the first
three generated tokens is enumerated from the target and compared with a chi-square test.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare

from ddtree_overlay.reference import model as M
from ddtree_overlay.reference.decode import generate_ddtree, generate_dflash

VOCAB, MASK, PROMPT, TEMP, RUNS = 6, 5, [0, 1, 2, 3], 0.9, 1500


# Tiny models: one intra-op thread is fastest, and avoids oversubscribing shared CI cores.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def toy_pair() -> tuple[M.Qwen3Target, M.DFlashDraft]:
    base = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
    }
    target = M.Qwen3Target(M.Qwen3Config(num_hidden_layers=3, **base))
    draft = M.DFlashDraft(
        M.DFlashConfig(
            num_hidden_layers=1,
            block_size=4,
            mask_token_id=MASK,
            target_layer_ids=(0, 1),
            num_target_layers=3,
            **base,
        )
    )
    M.init_weights(target, seed=11, std=0.35)
    M.init_weights(draft, seed=12, std=0.35)
    return target.eval(), draft.eval()


@torch.no_grad()
def exact_joint(target: M.Qwen3Target) -> dict[tuple[int, int, int], float]:
    seqs = [[*PROMPT, a, b] for a, b in itertools.product(range(VOCAB), repeat=2)]
    x = torch.tensor(seqs)
    logits = target(x, torch.arange(x.shape[1]).expand_as(x)).logits
    p = torch.softmax(logits / TEMP, dim=-1).double()  # [V^2, P+2, V]
    joint = {}
    for n, (a, b) in enumerate(itertools.product(range(VOCAB), repeat=2)):
        for c in range(VOCAB):
            joint[(a, b, c)] = float(
                p[n, len(PROMPT) - 1, a] * p[n, len(PROMPT), b] * p[n, len(PROMPT) + 1, c]
            )
    return joint


def chi2_pvalue(counts: dict, joint: dict) -> float:
    cells = sorted(joint, key=lambda k: -joint[k])
    big = [k for k in cells if joint[k] * RUNS >= 5]
    obs = [counts.get(k, 0) for k in big]
    exp = [joint[k] * RUNS for k in big]
    obs.append(RUNS - sum(obs))
    exp.append(RUNS - sum(exp))
    assert len(big) >= 10, "toy distribution too peaked to test"
    return float(chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("algo", ["ddtree", "dflash"])
def test_sampled_output_matches_the_target_distribution(algo: str) -> None:
    target, draft = toy_pair()
    joint = exact_joint(target)
    counts: dict[tuple[int, ...], int] = {}
    accepted_drafts = 0
    for seed in range(RUNS):
        g = torch.Generator().manual_seed(seed)
        if algo == "ddtree":
            r = generate_ddtree(
                target, draft, PROMPT, budget=6, max_new_tokens=3, temperature=TEMP, generator=g
            )
        else:
            r = generate_dflash(
                target, draft, PROMPT, max_new_tokens=3, temperature=TEMP, generator=g
            )
        counts[r.tokens] = counts.get(r.tokens, 0) + 1
        accepted_drafts += sum(a - 1 for a in r.accept_lens)
    assert accepted_drafts > RUNS * 0.3, (
        "drafts were rarely accepted: the test would not exercise the walk"
    )
    assert chi2_pvalue(counts, joint) > 1e-3
