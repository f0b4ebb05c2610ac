"""Reference laws of SGLang's top-k / top-p / min-p filters, per row of probabilities: what the
renormalising kernels keep, the law of SGLang's own sampler, and eagle_sample's. The payload's
tests check ``ddtree_sampling`` against them; the bench's compute the check's power from them."""

from __future__ import annotations

import torch


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


def sampler_law(probs, top_ks, top_ps, min_ps, *, top_k_first: bool = False) -> torch.Tensor:
    """SGLang's torch sampler: the top k AND the unfiltered nucleus, then min-p of the likeliest;
    ``top_k_first``: its flashinfer sampler in a min-p batch, the nucleus of the renormalised top k."""
    ordered, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1])
    in_top_k = rank < top_ks.view(-1, 1)
    nucleus_of = (ordered * in_top_k) / (ordered * in_top_k).sum(-1, keepdim=True) if top_k_first else ordered
    keep = in_top_k & (nucleus_of.cumsum(-1) - nucleus_of < top_ps.view(-1, 1))
    keep &= ordered >= min_ps.view(-1, 1) * ordered[:, :1]
    kept = torch.zeros_like(probs).scatter(-1, order, ordered * keep)
    return kept / kept.sum(-1, keepdim=True)


def eagle_law(probs, top_ks, top_ps) -> torch.Tensor:
    """eagle_sample's own: the top k renormalised, then its nucleus; min-p ignored."""
    return top_p_renorm(top_k_renorm(probs, top_ks), top_ps)
