"""Tree sampling at T > 0 under the top-k / top-p / min-p law of SGLang's own sampler.

SGLang's sampler keeps a token that is among the top k *and* inside the top-p nucleus of the
unfiltered distribution (flashinfer's ``filter_apply_order="joint"``, the torch backend's
cumulative sum over the unfiltered probabilities), and with min-p only those at least min_p
times the likeliest. ``eagle_sample``, which DDTREE's accept stage calls as EAGLE's worker
does, renormalises the top k first and cuts the nucleus out of what is left, and ignores min-p
(every release 0.5.14 - 0.5.23). Where top-k and top-p both bind that nucleus is narrower, so
target-only decoding and the tree sampled different laws: Qwen's recommended top-k 20 with
top-p 0.95 is such a setting whenever the top 20 tokens hold less than all the mass.

Inside ``sampler_filters`` the two renormalisers eagle_sample calls cut the nucleus once, from
the unfiltered rows, before the top k, in whichever order eagle_sample calls them, and the top-k
step ends with the min-p cut (a batch with min-p requests has eagle_sample take that step).
One case keeps SGLang's own inconsistency out: its flashinfer sampler cuts the top k first in a
batch that holds a min-p request. ``RenormSite`` names where the release's eagle_sample finds
the renormalisers; ``renorm_site_problems`` checks that on CPU (the matrix runs it with the
compat contract).
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


@contextmanager
def sampler_filters(site: RenormSite, sampling_info, rows_per_request: int):
    both = sampling_info.need_top_k_sampling and sampling_info.need_top_p_sampling
    min_p = sampling_info.need_min_p_sampling
    if not (both or min_p):
        yield  # one of top-k / top-p alone gives the same law in either order
        return
    module = importlib.import_module(site.module)
    top_k_renorm = getattr(module, site.top_k)
    top_p_renorm = getattr(module, site.top_p)
    top_ks_apply = sampling_info.need_top_k_sampling

    def rows(per_request: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(per_request, rows_per_request, dim=0)

    top_ps = rows(sampling_info.top_ps) if sampling_info.need_top_p_sampling else None
    min_ps = rows(sampling_info.min_ps).view(-1, 1) if min_p else None
    nucleus_cut = False

    def top_p_once(probs, *args, **kwargs):
        nonlocal nucleus_cut
        if nucleus_cut:
            return probs
        nucleus_cut = True
        return top_p_renorm(probs, *args, **kwargs)

    def top_k_then_min_p(probs, *args, **kwargs):
        if top_ps is not None:
            probs = top_p_once(probs, top_ps)
        if top_ks_apply:
            probs = top_k_renorm(probs, *args, **kwargs)
        if min_ps is not None:
            probs = probs * (probs >= min_ps * probs.amax(dim=-1, keepdim=True))
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs

    setattr(module, site.top_k, top_k_then_min_p)
    setattr(module, site.top_p, top_p_once)
    try:
        # min-p alone: eagle_sample still takes the top-k step, where the cut happens
        with replaced_attribute(sampling_info, "need_top_k_sampling", True):
            yield
    finally:
        setattr(module, site.top_k, top_k_renorm)
        setattr(module, site.top_p, top_p_renorm)


def renorm_site_problems(site: RenormSite) -> List[str]:
    """Whether the installed eagle_sample calls both renormalisers and binds them from
    ``site`` (what ``sampler_filters`` replaces)."""
    from sglang.srt.speculative import eagle_utils

    source = inspect.getsource(eagle_utils.eagle_sample)
    problems = [
        f"eagle_sample no longer calls `{name}(`"
        for name in ("top_k_renorm_prob", "top_p_renorm_prob")
        if f"{name}(" not in source
    ]
    if " ".join(site.imports.split()) not in " ".join(inspect.getsource(eagle_utils).split()):
        problems.append(f"eagle_utils no longer binds the renormalisers by `{site.imports}`")
    return problems
