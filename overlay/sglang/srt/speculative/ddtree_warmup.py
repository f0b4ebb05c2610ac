"""DDTREE: the round's eager kernels, compiled for every shape before the engine serves.

Startup captures most of a round in CUDA graphs, and capturing ran each of them first: the
target's verify per width, the top-K + tree build, the draft-KV commit. A round also launches
Triton kernels outside any graph: the draft block's slots (``prepare_draft_block``), the
verify inputs (``write_verify_inputs``), the accept bookkeeping (``accepted_paths``), the
target KV's move (``ddtree_kv_move``), on a hybrid target the recurrent-state commit (``RecurrentStateCommit.commit``), and the top-K +
tree build at a batch size no tree graph covers. Triton compiles a kernel at its first launch
with a new specialisation: a constexpr (the verify width's ``next_power_of_2`` blocks, the
tail-only mask), an int argument newly == 1 or divisible by 16 (the width N, the budget), a
pointer newly 16-byte aligned or not, a new dtype. The round's shape sets most of those, so the
first round of each shape compiled its kernels in the middle of serving: on an H200 (sglang
0.5.14, hybrid fixture pair, adaptive chain/16/32, 2026-12-02) the first chain round took
522.7 ms (tree 354.1, accept 100.2, draft 64.1 ms) where a chain round takes about 2 ms.

``warm_round_kernels`` runs those kernels once for every (tree stage, shape) the budget policy
can run (``BudgetPolicy.rounds``), on scratch inputs of the dtypes a round receives, at batch
sizes 1 and 2. The batch size reaches a specialisation only through alignment: a launch's
int64 outputs are carved from one allocation (a tree's ``parents`` after its ``tokens``), so
such a pointer is 16-byte aligned or not as the batch size is even or odd. The warm-up writes
only tensors it allocates: it reads ``req_to_token``, moves each KV slot onto itself (which
``TiledKVMover`` skips, and SGLang's mover copies in place), and gives the recurrent-state commit
no slot (-1), which its kernels skip. tests/payload/test_payload_ddtree_warmup.py replays the
round's launches at every batch size and checks that none needs a kernel the warm-up did not
compile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.speculative.ddtree_budget import BudgetPolicy, shape_verify_tokens
from sglang.srt.speculative.ddtree_kernels import accepted_paths, prepare_draft_block

if TYPE_CHECKING:
    from sglang.srt.speculative.ddtree_hybrid import RecurrentStateCommit
    from sglang.srt.speculative.ddtree_kv_move import MoveAcceptedKV
    from sglang.srt.speculative.ddtree_tree_stage import TreeStage

WARM_BATCH_SIZES = (1, 2)  # an odd and an even batch: every alignment a round's outputs take

# The dtypes SGLang hands a round (0.5.14 to 0.5.23): ScheduleBatch's seq_lens and
# req_pool_indices, eagle_sample's predict / accept_index / accept_lens, the hybrid pool's
# recurrent-state slots (req_index_to_mamba_index_mapping) and prefix-cache tracking slots.
_BATCH_DTYPE = torch.int64
_SAMPLE_DTYPE = torch.int32
_STATE_SLOT_DTYPE = torch.int32
_TRACK_SLOT_DTYPE = torch.int64


def warm_round_kernels(
    tree_stage: "TreeStage",
    policy: BudgetPolicy,
    *,
    block_size: int,
    vocab_size: int,
    logits_dtype: torch.dtype,
    root_dtype: torch.dtype,
    mask_token_id: int,
    req_to_token: torch.Tensor,
    tail_only: bool = False,
    recurrent_state: Optional["RecurrentStateCommit"] = None,
    move_accepted_kv: Optional["MoveAcceptedKV"] = None,
) -> None:
    """Launch a round's eager kernels for every round ``policy`` can run, at each warm batch
    size, as ``DDTreeWorkerV2._tree_round`` launches them.

    ``logits_dtype``: the target lm_head's (the eager top-K's input); ``root_dtype``: the draft
    input's root tokens' (``ddtree_compat.root_tokens``); ``req_to_token`` is only read."""
    device = req_to_token.device
    accept_width = policy.accept_width(block_size)
    for stage, shape in policy.rounds():
        n = shape_verify_tokens(shape, block_size)
        for bs in WARM_BATCH_SIZES:
            roots = torch.zeros((bs,), dtype=root_dtype, device=device)
            prefix_lens = torch.zeros((bs,), dtype=_BATCH_DTYPE, device=device)
            _, _, cache_loc_2d = prepare_draft_block(
                roots,
                prefix_lens,
                torch.zeros_like(prefix_lens),  # request pool row 0, read only
                req_to_token,
                mask_token_id=mask_token_id,
                block_size=block_size,
                num_verify_tokens=n,
            )
            logits = torch.zeros(
                (bs, block_size - 1, vocab_size), dtype=logits_dtype, device=device
            )
            topk = tree_stage.draft_topk(logits, stage.top_k(vocab_size))
            tree_stage.write_verify_inputs(
                tree_stage.build_drafts(topk, stage).verified(shape),
                roots,
                prefix_lens,
                n,
                block_size - 1,
                bs * n * n,  # the FULL mask of empty prefixes
                tail_only=tail_only,
            )
            # Every request accepts its root alone.
            predict = torch.zeros((bs * n,), dtype=_SAMPLE_DTYPE, device=device)
            accept_index = torch.full((bs, accept_width), -1, dtype=_SAMPLE_DTYPE, device=device)
            accept_index[:, 0] = torch.arange(0, bs * n, n, device=device)
            accept_lens = torch.ones((bs,), dtype=_SAMPLE_DTYPE, device=device)
            accepted = accepted_paths(predict, accept_index, accept_lens, prefix_lens, cache_loc_2d)
            if move_accepted_kv is not None:  # the root stays in its slot: every move is in place
                move_accepted_kv(accepted.kv_target, accepted.kv_source, accept_width)
            if recurrent_state is None:
                continue
            no_slot = torch.full((bs,), -1, dtype=_STATE_SLOT_DTYPE, device=device)
            no_track = torch.full((bs,), -1, dtype=_TRACK_SLOT_DTYPE, device=device)
            for track_indices in (None, no_track):  # batches without and with tracking
                recurrent_state.commit(
                    no_slot,
                    accept_index,
                    accept_lens,
                    n,
                    prefix_lens,
                    track_indices=track_indices,
                    track_interval=1,  # the kernels do not specialise on it
                )
