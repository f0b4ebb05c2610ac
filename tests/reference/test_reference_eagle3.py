"""The reference's EAGLE-3 drafter and chain decoder (`reference.eagle3`, `decode.generate_eagle3`)
on the committed dense fixture target, fp32 on CPU, with randomly initialised drafters: what
they compute, not how well (the trained drafter's acceptance:
tests/reference/test_eagle3_fixture.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ddtree_overlay.reference import model as M
from ddtree_overlay.reference.decode import draft_eagle3_chain, generate_ar, generate_eagle3
from ddtree_overlay.reference.eagle3 import Eagle3Config, Eagle3Draft, load_eagle3_draft

FIXTURES = Path(__file__).resolve().parents[2] / "ddtree_overlay" / "fixtures"
STEPS = 3

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def target() -> M.Qwen3Target:
    return M.load_target(FIXTURES / "target", dtype=torch.float32)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return json.loads((FIXTURES / "heldout_prompts.json").read_text())


def random_drafter(target: M.Qwen3Target, seed: int) -> Eagle3Draft:
    t = target.cfg
    cfg = Eagle3Config(
        vocab_size=t.vocab_size,
        hidden_size=t.hidden_size,
        intermediate_size=384,
        num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_key_value_heads,
        head_dim=t.head_dim,
        aux_layer_ids=(1, 3, 4),
    )
    draft = Eagle3Draft(cfg)
    M.init_weights(draft, seed=seed)
    return draft.eval()


@torch.no_grad()
def test_training_time_test_form_equals_the_serving_chain(target, prompts) -> None:
    """Step k of the training form at position j is the k-th decode step of a round whose
    extend ended at j, run through the cache: same hidden state, for every k and every j."""
    draft = random_drafter(target, seed=3)
    x = torch.tensor([prompts[6]])
    s = x.shape[1]
    t = s - STEPS
    positions = torch.arange(s).unsqueeze(0)
    aux = target(x, positions, capture=draft.cfg.aux_layer_ids, logits=False).aux
    step_emb = [target.model.embed_tokens(x[:, 1 + k : 1 + k + t]) for k in range(STEPS)]
    trained = draft.forward_training_time_test(step_emb, aux[:, :t], positions[:, :t])
    for j in range(t):
        cache = draft.new_cache(1, s + STEPS)
        emb = target.model.embed_tokens(x[:, 1 : j + 2])
        fc = draft.project_target_hidden(aux[:, : j + 1])
        hidden = draft(emb, fc, positions[:, : j + 1], cache=cache, cache_start=0)[:, -1:]
        torch.testing.assert_close(hidden, trained[0][:, j : j + 1], rtol=1e-5, atol=1e-4)
        for k in range(1, STEPS):
            emb = target.model.embed_tokens(x[:, j + 1 + k : j + 2 + k])
            hidden = draft(emb, hidden, torch.tensor([[j + k]]), cache=cache, cache_start=j + k)
            torch.testing.assert_close(hidden, trained[k][:, j : j + 1], rtol=1e-5, atol=1e-4)


@torch.no_grad()
def test_a_round_drafts_from_one_extend_then_its_own_hidden(target, prompts) -> None:
    """`draft_eagle3_chain` over a prompt: d_1 from the extend's last entry, d_2 from
    (d_1, that entry's hidden) one position on, as the drafter computed without a cache."""
    draft = random_drafter(target, seed=4)
    prompt = prompts[7]
    p = len(prompt)
    positions = torch.arange(p).unsqueeze(0)
    out = target(torch.tensor([prompt]), positions, capture=draft.cfg.aux_layer_ids)
    seq = [*prompt, int(out.logits[0, -1].argmax())]
    drafts = draft_eagle3_chain(
        target,
        draft,
        draft.new_cache(1, p + 4),
        ctx_tokens=seq[1:],
        ctx_aux=out.aux,
        ctx_start=0,
        num_steps=2,
    )
    embed = target.model.embed_tokens
    cache = draft.new_cache(1, p + 4)
    fc = draft.project_target_hidden(out.aux)
    hidden = draft(embed(torch.tensor([seq[1:]])), fc, positions, cache=cache, cache_start=0)
    d1 = int(draft.logits(hidden[0, -1]).argmax())
    own = draft(embed(torch.tensor([[d1]])), hidden[:, -1:], torch.tensor([[p]]), cache=cache, cache_start=p)
    assert drafts == [d1, int(draft.logits(own[0, -1]).argmax())]


@pytest.mark.parametrize("seed", [5, 6])
def test_the_chain_is_lossless_with_any_drafter(target, prompts, seed: int) -> None:
    """At T = 0 the chain commits the target's own greedy tokens, whatever the drafter says
    (a random one accepts little; the trained fixture drafter's longer rounds:
    test_eagle3_fixture.py)."""
    draft = random_drafter(target, seed=seed)
    prompt = prompts[seed]
    r = generate_eagle3(target, draft, prompt, max_new_tokens=48, num_steps=STEPS)
    greedy = generate_ar(target, prompt, max_new_tokens=48)
    assert r.tokens == greedy.tokens
    assert sum(r.accept_lens) >= 47 and all(1 <= a <= STEPS + 1 for a in r.accept_lens)


def test_checkpoint_round_trip_keeps_weights_and_the_vocabulary_map(target, tmp_path: Path) -> None:
    from ddtree_overlay.reference.eagle3 import eagle3_config_json

    draft = random_drafter(target, seed=8)
    M.save_checkpoint(draft, eagle3_config_json(draft.cfg, bos=256, eos=257, pad=258), tmp_path)
    loaded = load_eagle3_draft(tmp_path)
    assert loaded.cfg == draft.cfg
    for name, value in draft.state_dict().items():
        expected = value.to(torch.bfloat16).float() if value.is_floating_point() else value
        assert torch.equal(loaded.state_dict()[name], expected), name
    assert loaded.d2t.dtype == torch.int64 and loaded.t2d.dtype == torch.bool


def test_the_cli_runs_the_chain_against_target_greedy(target, tmp_path: Path) -> None:
    from ddtree_overlay.reference.cli import main
    from ddtree_overlay.reference.eagle3 import eagle3_config_json

    draft = random_drafter(target, seed=9)
    M.save_checkpoint(draft, eagle3_config_json(draft.cfg, bos=256, eos=257, pad=258), tmp_path / "eagle3")
    out = tmp_path / "out.json"
    args = ["--target", str(FIXTURES / "target"), "--draft", str(tmp_path / "eagle3"), "--algo", "eagle3"]
    args += ["--prompts", str(FIXTURES / "heldout_prompts.json"), "--limit", "2", "--max-new-tokens", "16"]
    assert main([*args, "--num-steps", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["aggregate"]["prompts"] == 2 and report["aggregate"]["divergent_prompts"] == 0
    assert len(report["aggregate"]["accept_histogram"]) == 3  # a round commits at most 2 drafts + 1
    assert all(row["new_tokens"] == 16 for row in report["prompts"])


def test_every_round_drafts_as_a_fresh_extend_over_the_committed_prefix(target, prompts, monkeypatch) -> None:
    """The drafter's cache, overwritten from round to round, holds what one extend over the
    whole committed sequence would: each round's drafts equal those of a fresh cache."""
    import ddtree_overlay.reference.decode as decode

    drafter = load_eagle3_draft(FIXTURES / "eagle3", dtype=torch.float32)
    rounds = []

    def recorded(*args, **kwargs):
        drafts = draft_eagle3_chain(*args, **kwargs)
        rounds.append((kwargs["ctx_start"] + len(kwargs["ctx_tokens"]), drafts))
        return drafts

    monkeypatch.setattr(decode, "draft_eagle3_chain", recorded)
    prompt = prompts[0]
    result = decode.generate_eagle3(target, drafter, prompt, max_new_tokens=48, num_steps=STEPS)
    seq = [*prompt, *result.tokens]
    assert len(rounds) == len(result.accept_lens) > 10
    for root_position, drafts in rounds:
        features = target(
            torch.tensor([seq[:root_position]]), torch.arange(root_position).unsqueeze(0), capture=drafter.cfg.aux_layer_ids
        ).aux
        fresh = draft_eagle3_chain(
            target, drafter, drafter.new_cache(1, root_position + STEPS + 1),
            ctx_tokens=seq[1 : root_position + 1], ctx_aux=features, ctx_start=0, num_steps=STEPS,
        )
        assert fresh == drafts, root_position


def test_the_cli_refuses_a_chain_without_drafts(tmp_path: Path) -> None:
    from ddtree_overlay.reference.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--target", str(FIXTURES / "target"), "--draft", str(FIXTURES / "eagle3"), "--prompts",
              str(FIXTURES / "heldout_prompts.json"), "--algo", "eagle3", "--num-steps", "0"])
    assert done.value.code == 2
