"""DDTREE under tensor parallelism: vocab-parallel top-K and rank-0 decisions.

With TP the target lm_head is split by vocabulary rows, so each rank sees only
its shard of the drafter's logits. The tree needs the global top-K per draft
position and the full-vocabulary log-normaliser; both come from per-rank
pieces without ever gathering a vocabulary-sized tensor:
  log Z   = m + log(sum_r S_r),  m = max_r m_r,  S_r = sum_v exp(l_v - m)  (two all-reduces)
  top-K   = top-K over the K (score, id) pairs of every rank          (one all-gather)
Ranks must then act on identical trees and identical accept decisions, or their
attention shards would see different tokens. The top-K is broadcast from rank 0
(``lm_head_draft_topk``); the accept needs nothing here: at T = 0 it reads the
target's all-gathered (identical) logits, and at T > 0 ``eagle_sample``
broadcasts its predict / accept_index from rank 0 itself.

The worker calls ``lm_head_draft_topk`` when tp_size > 1. Pure torch +
torch.distributed; tested on CPU with gloo.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from sglang.srt.speculative.ddtree_utils import DDTreeDraftTopK


def vocab_parallel_draft_topk(
    local_logits: torch.Tensor,
    *,
    vocab_start: int,
    k: int,
    group: Optional[dist.ProcessGroup] = None,
) -> DDTreeDraftTopK:
    """Global top-K log-probabilities from this rank's vocabulary shard.

    Args:
        local_logits: drafter logits for this rank's vocabulary rows only (padding
            rows removed). Shape: [bs, L, V_local].
        vocab_start: global id of this rank's first row.
        k: K = min(budget, global vocab); every rank must pass the same k.
    Returns: the same as ``compute_draft_topk`` on the gathered full logits, up to
    fp32 summation order in the normaliser.
    """
    if local_logits.ndim != 3:
        raise ValueError(
            f"DDTREE local draft logits must be [bs, L, V_local], got {tuple(local_logits.shape)}."
        )
    logits = local_logits.float()
    bs, depth, local_vocab = logits.shape

    row_max = logits.amax(dim=-1)  # [bs, L]
    dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
    sum_exp = torch.exp(logits - row_max.unsqueeze(-1)).sum(dim=-1)
    dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)
    log_z = row_max + torch.log(sum_exp)

    # Every rank contributes exactly k pairs (padded with -inf) so the gather is rectangular.
    take = min(k, local_vocab)
    local_scores = torch.full((bs, depth, k), float("-inf"), device=logits.device)
    local_ids = torch.full((bs, depth, k), -1, dtype=torch.int64, device=logits.device)
    top_scores, top_ids = torch.topk(logits, take, dim=-1)
    local_scores[..., :take] = top_scores
    local_ids[..., :take] = top_ids + int(vocab_start)

    world = dist.get_world_size(group)
    all_scores = [torch.empty_like(local_scores) for _ in range(world)]
    all_ids = [torch.empty_like(local_ids) for _ in range(world)]
    dist.all_gather(all_scores, local_scores, group=group)
    dist.all_gather(all_ids, local_ids, group=group)
    scores = torch.cat(all_scores, dim=-1)  # [bs, L, world * k]
    ids = torch.cat(all_ids, dim=-1)
    best_scores, best_pos = torch.topk(scores, k, dim=-1)
    return DDTreeDraftTopK(
        log_probs=best_scores - log_z.unsqueeze(-1),
        token_ids=ids.gather(-1, best_pos),
    )


def broadcast_from_rank0(
    tensors: Sequence[torch.Tensor], group: Optional[dist.ProcessGroup] = None
) -> None:
    """Overwrite ``tensors`` on every rank with rank 0's values, in place."""
    src = dist.get_global_rank(group, 0) if group is not None else 0
    for tensor in tensors:
        dist.broadcast(tensor, src=src, group=group)


def lm_head_draft_topk(
    lm_head: Any, hidden: torch.Tensor, *, k: int, group: dist.ProcessGroup
) -> DDTreeDraftTopK:
    """Global top-K of a vocab-parallel lm_head over draft hidden states, the same on every rank.

    Args:
        lm_head: SGLang's ParallelLMHead: ``weight`` holds this rank's rows (its base
            vocabulary, padding, then any added vocabulary); ``shard_indices`` locates them.
        hidden: draft hidden states. Shape: [bs, L, H].
        k: as in ``vocab_parallel_draft_topk``.
    Only the base vocabulary is scored: padding rows are not tokens, and LoRA-added rows
    are left out, which is safe because a draft only proposes; the target verifies every
    node against its own full logits, so the output stays lossless.
    """
    shard = lm_head.shard_indices
    weight = lm_head.weight[: shard.num_org_elements]
    local_logits = torch.matmul(hidden.to(weight.dtype), weight.T)  # [bs, L, V_local]
    topk = vocab_parallel_draft_topk(
        local_logits, vocab_start=shard.org_vocab_start_index, k=k, group=group
    )
    # The all-reduced normaliser may differ across ranks in the last bit; the tree must not.
    broadcast_from_rank0([topk.log_probs, topk.token_ids], group)
    return topk
