"""DDTree tree stage: the round's top-K, tree/chain build and verify-input writer, either
the Triton kernels (``ddtree_kernels``) or their torch references (``ddtree_utils``).

Its own module so that ``ddtree_utils`` (which ``ddtree_kernels`` imports) does not import
``ddtree_kernels`` back.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch

from sglang.srt.speculative import ddtree_utils
from sglang.srt.speculative.ddtree_budget import DraftStage
from sglang.srt.speculative.ddtree_envs import envs
from sglang.srt.speculative.ddtree_utils import DDTreeDrafts, DDTreeDraftTopK, DDTreeDraftTree


class TreeStage(NamedTuple):
    """A round's tree stage: ``draft_topk(logits, k)``, ``build_tree(topk, budget)`` and
    ``build_chain(topk)`` (``build_drafts`` runs what a ``DraftStage`` asks), then
    ``write_verify_inputs(tree, root_tokens, prefix_lens, N, max_depth, mask_capacity, tail_only=)``."""

    name: str
    draft_topk: Callable[[torch.Tensor, int], DDTreeDraftTopK]
    build_tree: Callable[[DDTreeDraftTopK, int], DDTreeDraftTree]
    build_chain: Callable[[DDTreeDraftTopK], DDTreeDraftTree]
    write_verify_inputs: Callable[..., tuple]

    def build_drafts(self, topk: DDTreeDraftTopK, stage: DraftStage) -> DDTreeDrafts:
        return DDTreeDrafts(
            tree=self.build_tree(topk, stage.tree_budget) if stage.tree_budget else None,
            chain=self.build_chain(topk) if stage.chain else None,
        )


def select_tree_stage(choice: Optional[str] = None) -> TreeStage:
    """The tree stage ``SGLANG_DDTREE_TREE_KERNEL`` names: triton (default) or torch."""
    choice = envs.SGLANG_DDTREE_TREE_KERNEL.get() if choice is None else choice
    if choice == "torch":
        return TreeStage(
            "torch",
            ddtree_utils.compute_draft_topk,
            ddtree_utils.build_ddtree_tree,
            ddtree_utils.build_chain_tree,
            ddtree_utils.write_verify_inputs,
        )
    if choice == "triton":
        # Imported only when chosen: the torch stage runs without Triton.
        from sglang.srt.speculative import ddtree_kernels

        return TreeStage(
            "triton",
            ddtree_kernels.draft_topk,
            ddtree_kernels.build_tree,
            ddtree_kernels.build_chain,
            ddtree_kernels.write_verify_inputs,
        )
    raise ValueError(f"SGLANG_DDTREE_TREE_KERNEL must be 'triton' or 'torch', got {choice!r}.")
