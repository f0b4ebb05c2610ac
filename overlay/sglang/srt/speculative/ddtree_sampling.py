"""Tree sampling at T > 0 under the top-k / top-p / min-p law of SGLang's own sampler.

SGLang's sampler keeps a token that is among the top k *and* inside the top-p nucleus of the
unfiltered distribution (flashinfer's ``filter_apply_order="joint"``, the torch backend's
cumulative sum over the unfiltered probabilities), and with min-p only those at least min_p
times the likeliest; one exception is its own: on the flashinfer backend a batch holding a
min-p request cuts the top k first and the nucleus from what is left. ``eagle_sample``, which
DDTREE's accept stage calls as EAGLE's worker does, always cuts the top k first and ignores
min-p (every release 0.5.14 - 0.5.23). Where top-k and top-p both bind the nucleus it keeps is
narrower, so target-only decoding and the tree sampled different laws: Qwen's recommended
top-k 20 with top-p 0.95 is such a setting whenever the top 20 tokens hold less than all the
mass.

Inside ``sampler_filters`` the first of the two renormalisers eagle_sample calls applies the
sampler's whole law (its filters in the sampler's order, min-p last) and the other passes its
input through; a batch with min-p requests has eagle_sample take the top-k step, so one is
called. ``RenormSite`` names where the release's eagle_sample finds the renormalisers and
``SamplerBackend`` how its sampler reads its backend; ``law_problems`` checks both on CPU (the
matrix runs it with the compat contract). On an H100 (2026-12-05, 0.5.14, the dense fixture
pair, 8192 draws a side) the tree's tokens passed a χ² test against target-only sampling at
every position 1 - 8 at T = 1.5 with top-k 20 and top-p 0.8, without and with min-p 0.2, and
eagle_sample's own law failed it in both.
"""

from __future__ import annotations

import importlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import List

import torch

from sglang.srt.speculative.ddtree_utils import replaced_attribute


@dataclass(frozen=True)
class RenormSite:
    """The module whose ``top_k`` / ``top_p`` attributes eagle_sample calls as
    ``top_k_renorm_prob`` / ``top_p_renorm_prob``, and the import that binds them there."""

    module: str
    top_k: str
    top_p: str
    imports: str


SGL_KERNEL_SITE = RenormSite(
    "sgl_kernel",
    "top_k_renorm_prob",
    "top_p_renorm_prob",
    "from sgl_kernel import ( top_k_renorm_prob, top_p_renorm_prob,",
)


@dataclass(frozen=True)
class SamplerBackend:
    """How the release's sampler reads its backend: ``accessor()`` from ``module``, then the
    attributes ``path``."""

    module: str
    accessor: str
    path: str

    def read(self) -> str:
        value = getattr(importlib.import_module(self.module), self.accessor)()
        for name in self.path.split("."):
            value = getattr(value, name)
        return value

    @property
    def source(self) -> str:
        return f"backend = {self.accessor}().{self.path}"


# How 0.5.17+ samplers read their backend: the runtime context's kernel settings.
EXEC_KERNEL_BACKEND = SamplerBackend("sglang.srt.runtime_context", "get_exec", "kernel.sampling_backend")

# The sampler backends whose min-p batches cut the top k first (sglang's Sampler).
TOP_K_FIRST_WITH_MIN_P = ("flashinfer", "intel_xpu")


def samples_on_cuda() -> bool:
    """Where eagle_sample takes its sampling path for a batch that is not all greedy (ROCm,
    XPU and NPU commit argmax there, renormalising nothing)."""
    return torch.cuda.is_available() and torch.version.hip is None


@contextmanager
def sampler_filters(site: RenormSite, sampling_info, rows_per_request: int, top_k_first: bool):
    both = sampling_info.need_top_k_sampling and sampling_info.need_top_p_sampling
    min_p = sampling_info.need_min_p_sampling
    if sampling_info.is_all_greedy or not (both or min_p):
        yield  # greedy, or one of top-k / top-p alone: the same law in either order
        return
    module = importlib.import_module(site.module)
    top_k_renorm = getattr(module, site.top_k)
    top_p_renorm = getattr(module, site.top_p)

    def rows(per_request: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(per_request, rows_per_request, dim=0)

    steps = []
    if sampling_info.need_top_k_sampling:
        steps.append((top_k_renorm, rows(sampling_info.top_ks)))
    if sampling_info.need_top_p_sampling:
        steps.insert(len(steps) if top_k_first else 0, (top_p_renorm, rows(sampling_info.top_ps)))
    min_ps = rows(sampling_info.min_ps).view(-1, 1) if min_p else None
    applied = False

    def sampler_law_once(probs, *args, **kwargs):
        nonlocal applied
        if applied:
            return probs
        applied = True
        for renorm, threshold in steps:
            probs = renorm(probs, threshold)
        if min_ps is not None:  # in place: a fresh renormaliser's output, or eagle_sample's own softmax
            probs.masked_fill_(probs < min_ps * probs.amax(dim=-1, keepdim=True), 0.0)
            probs.div_(probs.sum(dim=-1, keepdim=True))
        return probs

    setattr(module, site.top_k, sampler_law_once)
    setattr(module, site.top_p, sampler_law_once)
    try:
        # min-p alone: eagle_sample still takes the top-k step, which applies it
        with replaced_attribute(sampling_info, "need_top_k_sampling", True):
            yield
        if not applied and samples_on_cuda():
            raise RuntimeError(
                "DDTREE: eagle_sample sampled without calling the top-k / top-p renormalisers "
                f"bound from {site.module}, so the tree did not draw SGLang's sampler's law; "
                "SGLANG_DDTREE_SAMPLING_FILTERS=eagle serves eagle_sample's own law instead."
            )
    finally:
        setattr(module, site.top_k, top_k_renorm)
        setattr(module, site.top_p, top_p_renorm)


def law_problems(site: RenormSite, backend: SamplerBackend) -> List[str]:
    """Whether the installed eagle_sample calls both renormalisers and binds them from
    ``site`` (what ``sampler_filters`` replaces), and whether the sampler reads its backend
    as ``backend`` says and filters as the module's docstring says."""
    from sglang.srt.layers import sampler
    from sglang.srt.speculative import eagle_utils

    source = inspect.getsource(eagle_utils.eagle_sample)
    problems = [
        f"eagle_sample no longer calls `{name}(`"
        for name in ("top_k_renorm_prob", "top_p_renorm_prob")
        if f"{name}(" not in source
    ]
    expected = {
        "eagle_utils": (eagle_utils, (site.imports,)),
        "the sampler": (
            sampler,
            (
                backend.source,
                'filter_apply_order="joint"',
                "if sampling_info.need_min_p_sampling: probs = top_k_renorm_prob(probs, "
                "sampling_info.top_ks) probs = top_p_renorm_prob(probs, sampling_info.top_ps)",
            ),
        ),
    }
    for name, (module, texts) in expected.items():
        flat = " ".join(inspect.getsource(module).split())
        problems += [f"{name} no longer holds `{text}`" for text in texts if " ".join(text.split()) not in flat]
    return problems
