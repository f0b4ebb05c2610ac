"""ddtree_sampling: inside its scope eagle_sample's two renormalisers give the law of SGLang's
sampler (top-p cut from the unfiltered row, then top-k), whichever it calls first; outside it,
and with one filter alone, they are SGLang's own. Which module binds them on each release is
the matrix's check (``renorm_site_problems`` in every release's contract)."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

torch = pytest.importorskip("torch")
from payload_modules import load_payload_module  # noqa: E402

SITE_MODULE = "ddtree_sampling_test_kernels"


def sampling():
    return load_payload_module("sglang.srt.speculative.ddtree_sampling")


def top_k_renorm(probs: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    rank = probs.argsort(dim=-1, descending=True).argsort(dim=-1)
    kept = probs * (rank < top_ks.view(-1, 1))
    return kept / kept.sum(-1, keepdim=True)


def top_p_renorm(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """The smallest top set holding mass top_p (what flashinfer's and sgl_kernel's keep)."""
    order = probs.argsort(dim=-1, descending=True)
    sorted_probs = probs.gather(-1, order)
    before = sorted_probs.cumsum(-1) - sorted_probs
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_ps.view(-1, 1))
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)


def joint_law(probs: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """SGLang's sampler (flashinfer "joint", the torch backend): top k AND the unfiltered nucleus."""
    rank = probs.argsort(dim=-1, descending=True).argsort(dim=-1)
    nucleus = top_p_renorm(probs, top_ps) > 0
    kept = probs * nucleus * (rank < top_ks.view(-1, 1))
    return kept / kept.sum(-1, keepdim=True)


@pytest.fixture
def site(monkeypatch):
    module = types.ModuleType(SITE_MODULE)
    module.top_k_renorm_prob = top_k_renorm
    module.top_p_renorm_prob = top_p_renorm
    monkeypatch.setitem(sys.modules, SITE_MODULE, module)
    return module


def target_probs(site, probs, top_ks, top_ps, *, top_k_first: bool = True):
    """eagle_sample's two steps, looking the renormalisers up at call time as it does."""
    steps = [(site.top_k_renorm_prob, top_ks), (site.top_p_renorm_prob, top_ps)]
    for renorm, threshold in steps if top_k_first else steps[::-1]:
        probs = renorm(probs, threshold)
    return probs


def batch(top_ps: list[float], *, top_k: bool = True, top_p: bool = True):
    return types.SimpleNamespace(
        need_top_k_sampling=top_k, need_top_p_sampling=top_p, top_ps=torch.tensor(top_ps)
    )


def the_site(module) -> object:
    return module.RenormSite(SITE_MODULE, "top_k_renorm_prob", "top_p_renorm_prob", "unused")


# SGLang's own regression example for the order: top k = 4, top p = 0.82
PROBS = torch.tensor([0.35, 0.25, 0.20, 0.05, 0.03, 0.03, 0.03, 0.03, 0.03])


def test_the_scope_gives_the_samplers_joint_law_where_eagle_samples_order_does_not(site) -> None:
    module = sampling()
    rows = PROBS.repeat(3, 1)  # one request, three verify rows
    top_ks, top_ps = torch.tensor([4, 4, 4]), torch.tensor([0.82, 0.82, 0.82])
    joint = joint_law(rows, top_ks, top_ps)
    assert joint[0, 3] > 0  # the unfiltered nucleus reaches the fourth token
    assert target_probs(site, rows, top_ks, top_ps)[0, 3] == 0  # top-k first: it does not
    with module.joint_top_k_top_p(the_site(module), batch([0.82]), 3):
        inside = target_probs(site, rows, top_ks, top_ps)
    assert torch.allclose(inside, joint)
    assert site.top_k_renorm_prob is top_k_renorm and site.top_p_renorm_prob is top_p_renorm


@pytest.mark.parametrize("seed", range(8))
def test_each_requests_rows_take_its_own_top_p_in_either_call_order(site, seed: int) -> None:
    module = sampling()
    generator = torch.Generator().manual_seed(seed)
    bs, rows_per_request, vocab = 3, 4, 50
    probs = torch.softmax(torch.randn(bs * rows_per_request, vocab, generator=generator) * 1.5, -1)
    request_ks = torch.tensor([5, 20, vocab])
    request_ps = [0.6, 0.9, 0.75]
    top_ks = request_ks.repeat_interleave(rows_per_request)
    top_ps = torch.tensor(request_ps).repeat_interleave(rows_per_request)
    joint = joint_law(probs, top_ks, top_ps)
    for top_k_first in (True, False):
        with module.joint_top_k_top_p(the_site(module), batch(request_ps), rows_per_request):
            inside = target_probs(site, probs, top_ks, top_ps, top_k_first=top_k_first)
        assert torch.allclose(inside, joint, atol=1e-6)


@pytest.mark.parametrize(("top_k", "top_p"), [(True, False), (False, True), (False, False)])
def test_one_filter_alone_leaves_the_renormalisers_as_they_are(site, top_k: bool, top_p: bool) -> None:
    module = sampling()
    with module.joint_top_k_top_p(the_site(module), batch([0.82], top_k=top_k, top_p=top_p), 3):
        assert site.top_k_renorm_prob is top_k_renorm and site.top_p_renorm_prob is top_p_renorm


def test_the_renormalisers_come_back_when_the_sample_raises(site) -> None:
    module = sampling()
    with pytest.raises(RuntimeError, match="sampling failed"), module.joint_top_k_top_p(the_site(module), batch([0.82]), 3):
        assert site.top_k_renorm_prob is not top_k_renorm
        raise RuntimeError("sampling failed")
    assert site.top_k_renorm_prob is top_k_renorm and site.top_p_renorm_prob is top_p_renorm


EAGLE_UTILS = '''
def eagle_sample(verify_input, batch, logits_output):
    from sgl_kernel import (
        top_k_renorm_prob,
        top_p_renorm_prob,
        tree_speculative_sampling_target_only,
    )

    probs = top_k_renorm_prob(probs, top_ks)
    return top_p_renorm_prob(probs, top_ps)
'''


def fake_eagle_utils(monkeypatch, tmp_path, source: str) -> None:
    path = tmp_path / "eagle_utils.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sglang.srt.speculative.eagle_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "sglang.srt.speculative.eagle_utils", module)
    monkeypatch.setattr(sys.modules["sglang.srt.speculative"], "eagle_utils", module, raising=False)


def test_the_site_check_finds_the_import_and_both_calls(monkeypatch, tmp_path) -> None:
    module = sampling()
    fake_eagle_utils(monkeypatch, tmp_path, EAGLE_UTILS)
    assert module.renorm_site_problems(module.SGL_KERNEL_SITE) == []
    flashinfer = module.RenormSite(
        "flashinfer.sampling", "top_k_renorm_probs", "top_p_renorm_probs",
        "from flashinfer.sampling import top_k_renorm_probs as top_k_renorm_prob",
    )
    assert module.renorm_site_problems(flashinfer) == [
        "eagle_utils no longer binds the renormalisers by "
        "`from flashinfer.sampling import top_k_renorm_probs as top_k_renorm_prob`"
    ]
    fake_eagle_utils(monkeypatch, tmp_path, EAGLE_UTILS.replace("return top_p_renorm_prob(probs, top_ps)", "return probs"))
    assert module.renorm_site_problems(module.SGL_KERNEL_SITE) == ["eagle_sample no longer calls `top_p_renorm_prob(`"]
