"""Tree sampling at T > 0 under the top-k / top-p law of SGLang's own sampler.

SGLang's sampler keeps a token that is among the top k *and* inside the top-p nucleus of the
unfiltered distribution: flashinfer's ``filter_apply_order="joint"``, and the torch backend's
cumulative sum over the unfiltered probabilities. ``eagle_sample``, which DDTREE's accept
stage calls as EAGLE's worker does, renormalises the top k first and cuts the nucleus out of
what is left (every release 0.5.14 - 0.5.23). Where both filters bind that nucleus is
narrower, so target-only decoding and the tree sampled different laws: Qwen's recommended
top-k 20 with top-p 0.95 is such a setting whenever the top 20 tokens hold less than all the
mass.

Inside ``joint_top_k_top_p`` the two renormalisers eagle_sample calls cut the nucleus once,
from the unfiltered rows, before the top k, in whichever order eagle_sample calls them.
``RenormSite`` names where the release's eagle_sample finds them; ``renorm_site_problems``
checks that on CPU (the matrix runs it with the compat contract).
"""

from __future__ import annotations

import importlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import List

import torch


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
def joint_top_k_top_p(site: RenormSite, sampling_info, rows_per_request: int):
    if not (sampling_info.need_top_k_sampling and sampling_info.need_top_p_sampling):
        yield  # one filter alone gives the same law in either order
        return
    module = importlib.import_module(site.module)
    top_k_renorm = getattr(module, site.top_k)
    top_p_renorm = getattr(module, site.top_p)
    top_ps = torch.repeat_interleave(sampling_info.top_ps, rows_per_request, dim=0)
    nucleus_cut = False

    def top_p_once(probs, *args, **kwargs):
        nonlocal nucleus_cut
        if nucleus_cut:
            return probs
        nucleus_cut = True
        return top_p_renorm(probs, *args, **kwargs)

    def top_k_after_top_p(probs, *args, **kwargs):
        return top_k_renorm(top_p_once(probs, top_ps), *args, **kwargs)

    setattr(module, site.top_k, top_k_after_top_p)
    setattr(module, site.top_p, top_p_once)
    try:
        yield
    finally:
        setattr(module, site.top_k, top_k_renorm)
        setattr(module, site.top_p, top_p_renorm)


def renorm_site_problems(site: RenormSite) -> List[str]:
    """Whether the installed eagle_sample calls both renormalisers and binds them from
    ``site`` (what ``joint_top_k_top_p`` replaces)."""
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
