"""ddtree_sampling: inside its scope eagle_sample's two renormalisers give the law of SGLang's
sampler (top-p cut from the unfiltered row, then top-k, then min-p; the top k first in a min-p
batch on the flashinfer sampler), whichever it calls first and whichever it skips for the
batch's flags; outside it, and with one of top-k / top-p alone, they are SGLang's own. Which
module binds them on each release, and how its sampler reads its backend, is the matrix's
check (``law_problems`` in every release's contract)."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

torch = pytest.importorskip("torch")
from payload_modules import load_payload_module  # noqa: E402
from sampler_laws import sampler_law, top_k_renorm, top_p_renorm  # noqa: E402

SITE_MODULE = "ddtree_sampling_test_kernels"
TOP_K_ALL = 1 << 30


def sampling():
    return load_payload_module("sglang.srt.speculative.ddtree_sampling")


@pytest.fixture
def site(monkeypatch):
    module = types.ModuleType(SITE_MODULE)
    module.top_k_renorm_prob = top_k_renorm
    module.top_p_renorm_prob = top_p_renorm
    monkeypatch.setitem(sys.modules, SITE_MODULE, module)
    return module


def batch(top_ks: list[int], top_ps: list[float], min_ps: list[float] | None = None):
    min_ps = min_ps or [0.0] * len(top_ks)
    return types.SimpleNamespace(
        is_all_greedy=False,
        need_top_k_sampling=any(k != TOP_K_ALL for k in top_ks),
        need_top_p_sampling=any(p != 1.0 for p in top_ps),
        need_min_p_sampling=any(m > 0 for m in min_ps),
        top_ks=torch.tensor(top_ks),
        top_ps=torch.tensor(top_ps),
        min_ps=torch.tensor(min_ps),
    )


def target_probs(site, info, probs, rows_per_request: int, *, release: str = "0.5.16+"):
    """eagle_sample's steps, looking the renormalisers up at call time as it does: 0.5.14 and
    0.5.15 call both always, 0.5.16+ each where the batch's flag asks; ``top-p-first`` is the
    order SGLang's proposed fix would call them in."""
    top_ks = info.top_ks.repeat_interleave(rows_per_request)
    top_ps = info.top_ps.repeat_interleave(rows_per_request)
    steps = [
        (info.need_top_k_sampling, lambda p: site.top_k_renorm_prob(p, top_ks)),
        (info.need_top_p_sampling, lambda p: site.top_p_renorm_prob(p, top_ps)),
    ]
    if release == "top-p-first":
        steps.reverse()
    for needed, step in steps:
        if needed or release == "0.5.14":
            probs = step(probs)
    return probs


def the_site(module) -> object:
    return module.RenormSite(SITE_MODULE, "top_k_renorm_prob", "top_p_renorm_prob", "unused")


def unchanged(site) -> bool:
    return site.top_k_renorm_prob is top_k_renorm and site.top_p_renorm_prob is top_p_renorm


# SGLang's own regression example for the order: top k = 4, top p = 0.82
PROBS = torch.tensor([0.35, 0.25, 0.20, 0.05, 0.03, 0.03, 0.03, 0.03, 0.03])


def test_the_scope_gives_the_samplers_law_where_eagle_samples_order_does_not(site) -> None:
    module = sampling()
    rows = PROBS.repeat(3, 1)  # one request, three verify rows
    info = batch([4], [0.82])
    law = sampler_law(rows, torch.tensor([4] * 3), torch.tensor([0.82] * 3), torch.zeros(3))
    assert law[0, 3] > 0  # the unfiltered nucleus reaches the fourth token
    assert target_probs(site, info, rows, 3)[0, 3] == 0  # top-k first: it does not
    with module.sampler_filters(the_site(module), info, 3, False):
        inside = target_probs(site, info, rows, 3)
    assert torch.allclose(inside, law) and unchanged(site)


@pytest.mark.parametrize("top_k_first", [False, True], ids=["joint", "flashinfer-min-p"])
@pytest.mark.parametrize("release", ["0.5.14", "0.5.16+", "top-p-first"])
@pytest.mark.parametrize(
    ("top_ks", "top_ps", "min_ps"),
    [
        ([5, 20, TOP_K_ALL], [0.6, 0.9, 0.75], None),  # both filters, per request
        ([5, TOP_K_ALL, 12], [1.0, 0.7, 0.9], [0.0, 0.1, 0.3]),  # with min-p
        ([TOP_K_ALL] * 3, [1.0] * 3, [0.05, 0.0, 0.2]),  # min-p alone
        ([TOP_K_ALL] * 3, [0.8, 0.9, 1.0], [0.1, 0.0, 0.0]),  # top-p and min-p
    ],
    ids=["top-k-and-top-p", "all-three", "min-p-alone", "top-p-and-min-p"],
)
def test_each_requests_rows_take_the_samplers_law(site, release, top_ks, top_ps, min_ps, top_k_first) -> None:
    module = sampling()
    generator = torch.Generator().manual_seed(len(release))
    rows_per_request, vocab = 4, 50
    probs = torch.softmax(torch.randn(3 * rows_per_request, vocab, generator=generator) * 1.5, -1)
    info = batch(top_ks, top_ps, min_ps)
    thresholds = (t.repeat_interleave(rows_per_request) for t in (info.top_ks, info.top_ps, info.min_ps))
    law = sampler_law(probs, *thresholds, top_k_first=top_k_first)
    with module.sampler_filters(the_site(module), info, rows_per_request, top_k_first):
        inside = target_probs(site, info, probs, rows_per_request, release=release)
    assert torch.allclose(inside, law, atol=1e-6)
    assert unchanged(site) and info.need_top_k_sampling == any(k != TOP_K_ALL for k in top_ks)


@pytest.mark.parametrize(("top_ks", "top_ps"), [([4], [1.0]), ([TOP_K_ALL], [0.82]), ([TOP_K_ALL], [1.0])])
def test_one_of_top_k_and_top_p_alone_leaves_the_renormalisers_as_they_are(site, top_ks, top_ps) -> None:
    module = sampling()
    with module.sampler_filters(the_site(module), batch(top_ks, top_ps), 3, False):
        assert unchanged(site)


def test_an_all_greedy_batch_leaves_the_renormalisers_as_they_are(site) -> None:
    module = sampling()
    info = batch([TOP_K_ALL], [1.0], [0.1])  # min-p alone: an active scope would force the top-k step
    info.is_all_greedy = True
    with module.sampler_filters(the_site(module), info, 3, False):
        assert unchanged(site) and not info.need_top_k_sampling


@pytest.mark.parametrize("on_cuda", [True, False])
def test_a_sample_that_never_reached_the_renormalisers_raises_where_it_should_have(site, monkeypatch, on_cuda) -> None:
    """On CUDA a batch that is not all greedy takes eagle_sample's sampling path: a scope whose
    replaced renormalisers were never called means a release binds them elsewhere."""
    module = sampling()
    monkeypatch.setattr(module, "samples_on_cuda", lambda: on_cuda)
    scope = module.sampler_filters(the_site(module), batch([4], [0.82]), 3, False)
    if on_cuda:
        with pytest.raises(RuntimeError, match="SGLANG_DDTREE_SAMPLING_FILTERS=eagle"), scope:
            pass
    else:
        with scope:
            pass
    assert unchanged(site)


def test_the_compat_shim_chooses_the_order_by_the_samplers_backend_and_the_switch(site, monkeypatch) -> None:
    """A min-p batch: the flashinfer sampler cuts the top k first, the torch one the nucleus of
    the unfiltered row; SGLANG_DDTREE_SAMPLING_FILTERS=eagle leaves eagle_sample's law."""
    module = sampling()
    base = load_payload_module("sglang.srt.speculative.ddtree_compat_base")
    context = types.ModuleType("ddtree_sampling_test_context")
    monkeypatch.setitem(sys.modules, context.__name__, context)

    class Shim(base.CompatShim):
        RENORM_SITE = the_site(module)
        SAMPLER_BACKEND = module.SamplerBackend(context.__name__, "get_backend", "name")

    generator = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(4, 40, generator=generator) * 1.5, -1)
    info = batch([6], [0.7], [0.05])
    thresholds = [t.repeat_interleave(4) for t in (info.top_ks, info.top_ps, info.min_ps)]
    for backend, top_k_first in (("flashinfer", True), ("pytorch", False)):
        context.get_backend = lambda backend=backend: types.SimpleNamespace(name=backend)
        with Shim().sampling_filters(info, 4):
            inside = target_probs(site, info, probs.clone(), 4)
        assert torch.allclose(inside, sampler_law(probs, *thresholds, top_k_first=top_k_first), atol=1e-6), backend
    assert not torch.allclose(sampler_law(probs, *thresholds, top_k_first=True), sampler_law(probs, *thresholds))
    monkeypatch.setenv("SGLANG_DDTREE_SAMPLING_FILTERS", "eagle")
    with Shim().sampling_filters(info, 4):
        assert unchanged(site)


def test_the_renormalisers_come_back_when_the_sample_raises(site) -> None:
    module = sampling()
    info = batch([TOP_K_ALL], [1.0], [0.1])
    with pytest.raises(RuntimeError, match="sampling failed"), module.sampler_filters(the_site(module), info, 3, False):
        assert not unchanged(site) and info.need_top_k_sampling
        raise RuntimeError("sampling failed")
    assert unchanged(site) and not info.need_top_k_sampling


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


SAMPLER = '''
def _sample_from_probs(self, probs, sampling_info):
    backend = get_exec().kernel.sampling_backend
    if backend == "flashinfer":
        if sampling_info.need_min_p_sampling:
            probs = top_k_renorm_prob(probs, sampling_info.top_ks)
            probs = top_p_renorm_prob(probs, sampling_info.top_ps)
            return min_p_sampling_from_probs(probs, sampling_info.min_ps)
        return top_k_top_p_sampling_from_probs(
            probs, sampling_info.top_ks, sampling_info.top_ps, filter_apply_order="joint"
        )
'''
BACKEND = ("sglang.srt.runtime_context", "get_exec", "kernel.sampling_backend")


def fake_module(monkeypatch, tmp_path, dotted: str, source: str) -> None:
    """``dotted`` as a module of ``source`` written to a file (inspect reads its source)."""
    path = tmp_path / f"{dotted.rpartition('.')[2]}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(dotted, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    package, _, name = dotted.rpartition(".")
    if package not in sys.modules:
        monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
    monkeypatch.setitem(sys.modules, dotted, module)
    monkeypatch.setattr(sys.modules[package], name, module, raising=False)


def test_the_law_check_finds_the_imports_the_calls_and_the_samplers_filters(monkeypatch, tmp_path) -> None:
    module = sampling()
    backend = module.SamplerBackend(*BACKEND)
    fake_module(monkeypatch, tmp_path, "sglang.srt.speculative.eagle_utils", EAGLE_UTILS)
    fake_module(monkeypatch, tmp_path, "sglang.srt.layers.sampler", SAMPLER)
    assert module.law_problems(module.SGL_KERNEL_SITE, backend) == []
    flashinfer = module.RenormSite(
        "flashinfer.sampling", "top_k_renorm_probs", "top_p_renorm_probs",
        "from flashinfer.sampling import top_k_renorm_probs as top_k_renorm_prob",
    )
    assert module.law_problems(flashinfer, backend) == [
        "eagle_utils no longer holds `from flashinfer.sampling import top_k_renorm_probs as top_k_renorm_prob`"
    ]
    flags = module.SamplerBackend("sglang.srt.runtime_context", "get_flags", "sampling_backend")
    assert module.law_problems(module.SGL_KERNEL_SITE, flags) == [
        "the sampler no longer holds `backend = get_flags().sampling_backend`"
    ]
    fake_module(monkeypatch, tmp_path, "sglang.srt.layers.sampler", SAMPLER.replace('"joint"', '"top_k_first"'))
    assert module.law_problems(module.SGL_KERNEL_SITE, backend) == [
        'the sampler no longer holds `filter_apply_order="joint"`'
    ]
    fake_module(monkeypatch, tmp_path, "sglang.srt.layers.sampler", SAMPLER)
    fake_module(monkeypatch, tmp_path, "sglang.srt.speculative.eagle_utils", EAGLE_UTILS.replace("return top_p_renorm_prob(probs, top_ps)", "return probs"))
    assert module.law_problems(module.SGL_KERNEL_SITE, backend) == ["eagle_sample no longer calls `top_p_renorm_prob(`"]


def test_the_backend_is_read_through_the_releases_accessor(monkeypatch) -> None:
    module = sampling()
    context = types.ModuleType("ddtree_sampling_test_context")
    context.get_exec = lambda: types.SimpleNamespace(kernel=types.SimpleNamespace(sampling_backend="pytorch"))
    monkeypatch.setitem(sys.modules, context.__name__, context)
    assert module.SamplerBackend(context.__name__, "get_exec", "kernel.sampling_backend").read() == "pytorch"
