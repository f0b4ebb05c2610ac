"""DDTREE verify input: a DFlash verify that carries a tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.ddtree_utils import DDTreeVerifyTensors
from sglang.srt.speculative.dflash_info import DFlashVerifyInput


@dataclass
class DDTreeVerifyInput(DFlashVerifyInput):
    """TARGET_VERIFY input for one DDTREE round.

    It stays a ``DFLASH_VERIFY`` spec input, so every attention backend and the
    CUDA-graph runner treat it as DFlash's verify; what differs is the tree:
    ``custom_mask`` (FULL layout, True = visible; where the split-KV verify runs the
    tail-only [bs, N, N] ancestor mask, which only ``ddtree_verify_attention`` reads) and
    depth ``positions``, plus
    the left-child / right-sibling arrays that ``eagle_utils.eagle_sample``'s
    tree kernels walk.
    """

    retrieve_index: Optional[torch.Tensor] = None  # [bs, N] global node index
    retrieve_next_token: Optional[torch.Tensor] = None  # [bs, N] first child or -1
    retrieve_next_sibling: Optional[torch.Tensor] = None  # [bs, N] next sibling or -1
    max_accept_width: int = 1  # accept_index width: deepest path + 1 (root)
    grammar: None = None  # up to 0.5.16 eagle_sample's; from 0.5.17 the mask is an argument
    draft_probs: None = None  # target-only tree sampling: no draft-probability ratio

    @property
    def max_tree_depth(self) -> int:
        """Read by ``eagle_sample`` as the accept_index width."""
        return self.max_accept_width

    @property
    def tree_topk(self) -> int:
        """-1: an irregular tree (any branching per node), as NGRAM declares it."""
        return -1

    @classmethod
    def from_tree(
        cls,
        *,
        buffers: DDTreeVerifyTensors,
        custom_mask: torch.Tensor,
        max_accept_width: int,
        **extra,
    ) -> "DDTreeVerifyInput":
        bs, n = buffers.draft_token.shape
        return cls(
            draft_token=buffers.draft_token.reshape(-1),
            positions=buffers.positions.reshape(-1),
            draft_token_num=n,
            # Backends that gate tree metadata on topk > 1 must see a tree.
            topk=n,
            custom_mask=custom_mask,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            retrieve_index=buffers.retrieve_index,
            retrieve_next_token=buffers.retrieve_next_token,
            retrieve_next_sibling=buffers.retrieve_next_sibling,
            max_accept_width=max_accept_width,
            **extra,  # what a release's DFlashVerifyInput adds (0.5.22+: kv_loc_plan)
        )
