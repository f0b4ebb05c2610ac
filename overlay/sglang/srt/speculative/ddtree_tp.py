"""DDTREE under tensor parallelism: vocab-parallel top-K, the same tree on every rank.

With TP the target lm_head is split by vocabulary rows, so each rank sees only
its shard of the drafter's logits. The tree needs the global top-K per draft
position and the full-vocabulary log-normaliser; both come from per-rank
pieces without ever gathering a vocabulary-sized tensor. Each rank packs, per
draft position, its shard's log-sum-exp and its K best (score, id) pairs, and
one all-gather brings every rank the same bytes:
  log Z  = logsumexp_r(lse_r)
  top-K  = top-K over the world * K gathered pairs
Every rank then runs the same kernels on the same bytes, so ranks build
bit-identical trees without a broadcast (an all-reduced normaliser could differ
across ranks in the last bit, and the tree must not). The accept needs nothing
here: at T = 0 it reads the target's all-gathered (identical) logits, and at
T > 0 ``eagle_sample`` broadcasts its predict / accept_index from rank 0 itself.

When tp_size > 1 the worker runs the parts before and after the all-gather
(``lm_head_topk_pieces``, then ``combine_topk_pieces`` and the tree build) from
CUDA graphs, or eagerly at batch sizes without graphs, with the all-gather eager
between them; with adaptive budgets rank 0's choice rides on it
(``gather_topk_pieces_with_tail``, ddtree_adaptive_tp). Pure torch +
torch.distributed; tested on CPU with gloo.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
import torch.distributed as dist

from sglang.srt.speculative.ddtree_utils import (
    DDTreeDraftTopK,
    draft_logits,
    finite_log_normaliser,
)


def local_topk_pieces(local_logits: torch.Tensor, *, vocab_start: int, k: int) -> torch.Tensor:
    """This rank's share of the global top-K: per draft position, its shard's log-sum-exp and
    its K best (score, id) pairs, as [bs, L, 1 + 2K] float64 (which holds fp32 scores and any
    token id exactly). A shard smaller than K pads with (-inf, 0) pairs: the global top-K picks
    one only when fewer than K of its candidates are finite (a shard of only -inf, say), and
    then carries an id in the vocabulary whose -inf score keeps it out of the tree.

    Args:
        local_logits: drafter logits for this rank's vocabulary rows only (padding rows
            removed). Shape: [bs, L, V_local].
        vocab_start: global id of this rank's first row.
        k: K; every rank must pass the same.
    """
    if local_logits.ndim != 3:
        raise ValueError(
            f"DDTREE local draft logits must be [bs, L, V_local], got {tuple(local_logits.shape)}."
        )
    logits = local_logits.float()
    bs, depth, local_vocab = logits.shape
    take = min(k, local_vocab)
    packed = torch.full(
        (bs, depth, 1 + 2 * k), float("-inf"), dtype=torch.float64, device=logits.device
    )
    packed[..., 1 + k :] = 0
    packed[..., 0] = torch.logsumexp(logits, dim=-1)
    top_scores, top_ids = torch.topk(logits, take, dim=-1)
    packed[..., 1 : 1 + take] = top_scores
    packed[..., 1 + k : 1 + k + take] = top_ids + int(vocab_start)
    return packed


def gather_topk_pieces(packed: torch.Tensor, group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """Every rank's pieces, [bs, L, world, 1 + 2K]: the round's one collective."""
    gathered = [torch.empty_like(packed) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, packed, group=group)
    return torch.stack(gathered, dim=2)


def gather_topk_pieces_with_tail(
    packed: torch.Tensor, tail: torch.Tensor, group: Optional[dist.ProcessGroup] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``gather_topk_pieces`` with a few float64 values of each rank's on the same all-gather
    (rank 0's adaptive choice, ddtree_adaptive_tp): every rank's pieces, [bs, L, world, 1 + 2K],
    and every rank's ``tail``, [world, m]. Every rank sends a tail of the same length."""
    flat = torch.cat([packed.reshape(-1), tail])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, flat, group=group)
    every = torch.stack(gathered)  # [world, pieces + m]
    pieces = every[:, : packed.numel()].unflatten(1, packed.shape).permute(1, 2, 0, 3)
    return pieces, every[:, packed.numel() :]


def combine_topk_pieces(every: torch.Tensor, k: int) -> DDTreeDraftTopK:
    """The global top-k from every rank's pieces ([bs, L, world, 1 + 2K], K >= k: a rank's K
    best hold its share of any top-k). The same bytes on every rank give the same result."""
    bs, depth, world, width = every.shape
    packed_k = (width - 1) // 2
    log_z = finite_log_normaliser(torch.logsumexp(every[..., 0], dim=-1)).float()  # [bs, L]
    scores = every[..., 1 : 1 + packed_k].reshape(bs, depth, world * packed_k).float()
    ids = every[..., 1 + packed_k :].reshape(bs, depth, world * packed_k)
    best_scores, best_pos = torch.topk(scores, k, dim=-1)
    return DDTreeDraftTopK(
        log_probs=best_scores - log_z.unsqueeze(-1),
        token_ids=ids.gather(-1, best_pos).long(),
    )


def vocab_parallel_draft_topk(
    local_logits: torch.Tensor,
    *,
    vocab_start: int,
    k: int,
    group: Optional[dist.ProcessGroup] = None,
    pack_k: Optional[int] = None,
) -> DDTreeDraftTopK:
    """Global top-k log-probabilities from this rank's vocabulary shard, one all-gather.

    ``pack_k`` (>= k, default k) is how many pairs each rank sends: the worker sends the same
    number every round, whatever the round's budget, so its ranks' collectives always match.
    Returns the same as ``compute_draft_topk`` on the gathered full logits, up to fp32
    summation order in the normaliser; bit-identical on every rank.
    """
    packed = local_topk_pieces(local_logits, vocab_start=vocab_start, k=pack_k or k)
    return combine_topk_pieces(gather_topk_pieces(packed, group), k)


def _lm_head_local_logits(lm_head: Any, hidden: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """This rank's logits of a vocab-parallel lm_head over hidden states [bs, L, H], and the
    global id of its first row.

    ``lm_head`` is SGLang's ParallelLMHead: ``weight`` holds this rank's rows (its base
    vocabulary, padding, then any added vocabulary); ``shard_indices`` locates them. Only the
    base vocabulary is scored: padding rows are not tokens, and LoRA-added rows are left out,
    which is safe because a draft only proposes; the target verifies every node against its
    own full logits, so the output stays lossless.
    """
    shard = lm_head.shard_indices
    weight = lm_head.weight[: shard.num_org_elements]
    return draft_logits(hidden, weight), shard.org_vocab_start_index


def lm_head_topk_pieces(lm_head: Any, hidden: torch.Tensor, *, k: int) -> torch.Tensor:
    """``local_topk_pieces`` of a vocab-parallel lm_head over draft hidden states [bs, L, H]."""
    local_logits, vocab_start = _lm_head_local_logits(lm_head, hidden)
    return local_topk_pieces(local_logits, vocab_start=vocab_start, k=k)
