"""DDTREE on hybrid Gated-DeltaNet targets (Qwen3-Next, Qwen3.5 / Qwen3.6).

SGLang already verifies EAGLE trees through linear-attention layers: with
``speculative_eagle_topk > 1`` the pools keep a dense per-node conv window and a
per-node recurrent-state snapshot for every verify token, the conv kernel walks
each node's ancestors from the left-child / right-sibling links, and the
recurrent kernel starts each node from its parent's snapshot. DDTREE's verify
input carries those links (node 0 the root, parents before children, siblings
in index order), so the tree verify is SGLang's own.

What differs is the commit, and what a node keeps (``SGLANG_DDTREE_HYBRID_STATE``):
- ``flat`` (the default; ddtree_gdn_tree): no snapshots; the GDN verify walks each request's
  tree depth-first from the committed state and stashes the nodes' inputs, and the commit
  replays the accepted path.
- ``snapshot``: SGLang's per-node recurrent-state snapshots; the commit copies the last
  accepted node's snapshot (and the prefix-cache tracking node's) into the persistent slots.
SGLang's kernels write a node's snapshot and conv window at the pool's pitch (the widest
verify width) whatever the round's width (budget schedule, adaptive budgets); the commit
reads them there. The commit runs eagerly every round, so it is one launch per two pool
tensors (snapshot mode on a Gated-DeltaNet pool: one; flat mode: one and the replay) whose
programs find their request's accepted node (and tracking node) from ``accept_index``,
``accept_lens`` and ``prefix_lens`` themselves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.speculative.ddtree_envs import envs
from sglang.srt.speculative.ddtree_gdn_tree import GDNInputStash, replay_commit, tracking_position

logger = logging.getLogger(__name__)

# The eagle top-k that selects SGLang's tree paths in linear-attention layers: pools with a
# dense per-node conv window and kernels that follow the tree links. DDTREE's own trees are
# irregular; the value only has to exceed 1.
HYBRID_TREE_TOPK = 2

_ROW_BLOCK = 1024
_MIB = 1 << 20


def gated_deltanet_layers(hf_config) -> int:
    """Number of Gated-DeltaNet layers of a target's HF config (0: not a GDN hybrid).

    Qwen3-Next and Qwen3.5 / Qwen3.6 size the GDN heads with ``linear_num_value_heads``;
    SGLang's config classes list the layers in ``linear_layer_ids``, transformers' in
    ``layer_types``."""
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    if getattr(text_config, "linear_num_value_heads", None) is None:
        return 0
    linear_layer_ids = getattr(text_config, "linear_layer_ids", None)
    if linear_layer_ids is not None:
        return len(linear_layer_ids)
    layer_types = getattr(text_config, "layer_types", None) or ()
    return sum(1 for kind in layer_types if kind == "linear_attention")


@triton.jit
def _accepted_node(accept_index_ptr, stride_accept_req, req, pos, n_tokens):
    """Verify-block node at request ``req``'s accepted-path position ``pos`` (-1: pos < 0)."""
    row = tl.load(accept_index_ptr + req * stride_accept_req + tl.maximum(pos, 0)).to(tl.int64)
    return tl.where(pos >= 0, row - req * n_tokens, -1)


@triton.jit
def _copy_row_chunk(dst, src, chunk, row_numel, valid, BLOCK: tl.constexpr):
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < tl.where(valid, row_numel, 0)
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


# not specialised on the round's verify width (adaptive widths compile once, none mid-serving)
# nor on the tracking interval (ddtree_warmup compiles it before a batch says which)
@triton.jit(do_not_specialize=["n_tokens", "track_interval"])
def _commit_rows_kernel(
    a_dst_ptr,  # [L, slots, Ra] persistent state
    a_src_ptr,  # [L, spec slots * pitch, Ra] per verify node
    b_dst_ptr,  # a second pool tensor's, the same way (read only where b has chunks)
    b_src_ptr,
    slot_ptr,  # [bs] live slot, < 0: skip
    track_slot_ptr,  # [bs] prefix-cache tracking slot, < 0: skip (read by target 1 only)
    accept_index_ptr,  # [bs, W] accepted global verify rows, root first
    accept_len_ptr,  # [bs]
    prefix_len_ptr,  # [bs] committed length before the round
    track_interval,
    n_tokens,  # the round's verify width
    pitch,  # the pool's widest verify width: request i's node s is row i * pitch + s
    stride_accept_req,
    a_dst_layer_stride,
    a_dst_slot_stride,
    a_src_layer_stride,
    a_src_row_stride,
    a_row_numel,
    a_chunks,
    b_dst_layer_stride,
    b_dst_slot_stride,
    b_src_layer_stride,
    b_src_row_stride,
    b_row_numel,
    chunks,  # a's chunks + b's
    BLOCK: tl.constexpr,
):
    """dst[layer, slot] = src[layer, req * pitch + node] for one (layer and chunk, request,
    target): target 0 the live slot at the last accepted node, target 1 the tracking slot at
    the node where the round crossed a tracking boundary."""
    layer = (tl.program_id(0) // chunks).to(tl.int64)
    chunk = tl.program_id(0) % chunks
    req = tl.program_id(1).to(tl.int64)
    accept_len = tl.load(accept_len_ptr + req).to(tl.int64)
    if tl.program_id(2) == 0:
        slot = tl.load(slot_ptr + req).to(tl.int64)
        pos = accept_len - 1
    else:
        slot = tl.load(track_slot_ptr + req).to(tl.int64)
        prefix_len = tl.load(prefix_len_ptr + req).to(tl.int64)
        pos = tracking_position(accept_len, prefix_len, track_interval)
    node = _accepted_node(accept_index_ptr, stride_accept_req, req, pos, n_tokens)
    row = req * pitch + node
    valid = (slot >= 0) & (node >= 0)
    if chunk < a_chunks:
        _copy_row_chunk(
            a_dst_ptr + layer * a_dst_layer_stride + slot * a_dst_slot_stride,
            a_src_ptr + layer * a_src_layer_stride + row * a_src_row_stride,
            chunk,
            a_row_numel,
            valid,
            BLOCK,
        )
    else:
        _copy_row_chunk(
            b_dst_ptr + layer * b_dst_layer_stride + slot * b_dst_slot_stride,
            b_src_ptr + layer * b_src_layer_stride + row * b_src_row_stride,
            chunk - a_chunks,
            b_row_numel,
            valid,
            BLOCK,
        )


def copy_accepted_rows(
    pools: List[Tuple[torch.Tensor, torch.Tensor]],
    cache_indices: torch.Tensor,
    accept_index: torch.Tensor,
    accept_lens: torch.Tensor,
    num_verify_tokens: int,
    pitch: int,
    prefix_lens: torch.Tensor,
    track_indices: Optional[torch.Tensor] = None,
    track_interval: Optional[int] = None,
) -> None:
    """For one or two (persistent [L, slots, R], per-node [L, spec slots * pitch, R]) row views
    of pool tensors: ``persistent[:, cache_indices[i]] := per_node[:, i * pitch + node]`` for
    request i's last accepted node, and with tracking ``persistent[:, track_indices[i]]`` the
    same at ``tracking_position``'s node (skipped where none was crossed). One launch, no host
    sync. Two tensors, not all: a launch takes a fixed list of typed pointers, and a
    Gated-DeltaNet pool's two (SSM state, conv windows) differ in dtype and row size."""
    bs = int(accept_lens.shape[0])
    if bs == 0:
        return
    if not 1 <= len(pools) <= 2:
        raise ValueError(f"copy_accepted_rows copies one or two pool tensors, got {len(pools)}.")
    (a_dst, a_src), (b_dst, b_src) = pools[0], pools[-1]
    layers = int(a_dst.shape[0])
    a_chunks = triton.cdiv(int(a_dst.shape[2]), _ROW_BLOCK)
    b_chunks = triton.cdiv(int(b_dst.shape[2]), _ROW_BLOCK) if len(pools) == 2 else 0
    tracking = track_indices is not None and track_interval is not None
    grid = (layers * (a_chunks + b_chunks), bs, 2 if tracking else 1)
    _commit_rows_kernel[grid](
        a_dst,
        a_src,
        b_dst,
        b_src,
        cache_indices,
        track_indices if tracking else cache_indices,
        accept_index,
        accept_lens,
        prefix_lens,
        int(track_interval) if tracking else 1,
        int(num_verify_tokens),
        int(pitch),
        accept_index.stride(0),
        a_dst.stride(0),
        a_dst.stride(1),
        a_src.stride(0),
        a_src.stride(1),
        int(a_dst.shape[2]),
        a_chunks,
        b_dst.stride(0),
        b_dst.stride(1),
        b_src.stride(0),
        b_src.stride(1),
        int(b_dst.shape[2]),
        a_chunks + b_chunks,
        BLOCK=_ROW_BLOCK,
    )


def _rows(state: torch.Tensor, leading: int) -> torch.Tensor:
    """A pool tensor as [L, leading rows, row elements], without copying."""
    if not state.is_contiguous():
        raise RuntimeError(
            "DDTREE expects the dense per-node recurrent-state layout on hybrid targets, "
            f"got a non-contiguous pool tensor of shape {tuple(state.shape)}."
        )
    return state.view(state.shape[0], leading, -1)


@dataclass
class RecurrentStateCommit:
    """The target's recurrent-state pools as row views, and the tree commit over them.

    Two ways to keep a verify's SSM state (``SGLANG_DDTREE_HYBRID_STATE``, see
    ddtree_gdn_tree): ``flat`` (the default) - no snapshots, the verify stashes each node's
    inputs and the commit replays the accepted path; ``snapshot`` - SGLang's per-node
    snapshots, the commit copies the last accepted node's. Either way each node keeps SGLang's
    conv window, which the commit copies: a window is (kernel width - 1) raw inputs per
    channel, 2 % of a snapshot at Qwen3.6-27B shape, and SGLang's conv kernel already writes
    them for every node."""

    ssm: torch.Tensor  # [L, slots, R] persistent state
    ssm_nodes: Optional[torch.Tensor]  # snapshot: [L, spec slots * max width, R]; flat: None
    conv: List[Tuple[torch.Tensor, torch.Tensor]]  # (persistent, per-node) row views
    max_verify_tokens: int
    spec_slots: int
    ssm_pool: Optional[torch.Tensor] = None  # flat: [L, slots, HV, V, K]
    stash: Optional[GDNInputStash] = None  # flat: the verify's per-node inputs
    max_path: int = 0  # flat: the longest accepted path (the drafter's block)
    scratch: Optional[torch.Tensor] = None  # flat: the verify's branch-node states, one layer

    @classmethod
    def from_pool(cls, spec_state) -> "RecurrentStateCommit":
        """Snapshot mode, from ``req_to_token_pool.get_speculative_mamba2_params_all_layers()``."""
        if spec_state.intermediate_ssm is None:
            raise ValueError(
                "DDTREE needs the per-node recurrent-state snapshots of a tree verify; "
                "this pool has none (--enable-linear-replayssm-spec is chain-only)."
            )
        nodes = spec_state.intermediate_ssm  # [L, spec slots, max width, ...]
        spec_slots, width = int(nodes.shape[1]), int(nodes.shape[2])
        return cls(
            ssm=_rows(spec_state.temporal, int(spec_state.temporal.shape[1])),
            ssm_nodes=_rows(nodes, spec_slots * width),
            conv=_conv_rows(spec_state, spec_slots, width),
            max_verify_tokens=width,
            spec_slots=spec_slots,
        )

    @classmethod
    def flat(
        cls, spec_state, stash: GDNInputStash, max_path: int, scratch: torch.Tensor
    ) -> "RecurrentStateCommit":
        """Flat mode: the pool's conv windows and live state, the verify's input stash, and its
        branch scratch (counted, not read)."""
        windows = spec_state.intermediate_conv_window[0]  # [L, spec slots, max width, ...]
        spec_slots, width = int(windows.shape[1]), int(windows.shape[2])
        temporal = spec_state.temporal
        return cls(
            ssm=_rows(temporal, int(temporal.shape[1])),
            ssm_nodes=None,
            conv=_conv_rows(spec_state, spec_slots, width),
            max_verify_tokens=width,
            spec_slots=spec_slots,
            ssm_pool=temporal,
            stash=stash,
            max_path=int(max_path),
            scratch=scratch,
        )

    @property
    def mode(self) -> str:
        return "snapshot" if self.stash is None else "flat"

    @property
    def bytes_per_verify_token(self) -> int:
        """Verify-state bytes one request holds per verify token, all layers (this rank):
        its conv window and its SSM snapshot (snapshot) or stashed inputs (flat)."""
        nodes = self.spec_slots * self.max_verify_tokens
        total = sum(window.numel() * window.element_size() for _, window in self.conv) // nodes
        if self.stash is not None:
            return total + self.stash.bytes_per_node
        return total + self.ssm_nodes.numel() * self.ssm_nodes.element_size() // nodes

    @property
    def live_bytes_per_request(self) -> int:
        """Bytes of one request's live recurrent state (conv windows + SSM), all layers."""
        rows = [self.ssm] + [state for state, _ in self.conv]
        return sum(int(r.shape[0]) * int(r.shape[2]) * r.element_size() for r in rows)

    @property
    def scratch_bytes_per_request(self) -> int:
        """Flat: one request row of the verify's branch scratch (one layer's, whatever the width)."""
        if self.scratch is None:
            return 0
        return self.scratch[0].numel() * self.scratch.element_size()

    @property
    def verify_bytes(self) -> int:
        """Verify-state bytes of every request slot at the widest verify width."""
        per_request = self.bytes_per_verify_token * self.max_verify_tokens + self.scratch_bytes_per_request
        return per_request * self.spec_slots

    def describe(self) -> str:
        per_token = self.bytes_per_verify_token
        kept = (
            "recurrent-state snapshots"
            if self.stash is None
            else "flat recurrent state (conv windows + stashed inputs, no SSM snapshots)"
        )
        scratch = self.scratch_bytes_per_request
        per_request = per_token * self.max_verify_tokens + scratch
        with_scratch = f" (its {scratch / _MIB:.1f} MiB branch scratch included)" if scratch else ""
        return (
            f"{kept}: {per_token / _MIB:.2f} MiB per request per verify token, "
            f"{per_request / _MIB:.1f} MiB per request at verify width {self.max_verify_tokens}"
            f"{with_scratch}, {self.verify_bytes / (1 << 30):.2f} GiB for {self.spec_slots} "
            "request slots"
        )

    @property
    def copied_pools(self) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """(persistent, per-node) row views the commit copies: the SSM snapshots (snapshot
        mode) and the conv windows."""
        ssm = [] if self.ssm_nodes is None else [(self.ssm, self.ssm_nodes)]
        return ssm + self.conv

    def commit(
        self,
        cache_indices: torch.Tensor,
        accept_index: torch.Tensor,
        accept_lens: torch.Tensor,
        num_verify_tokens: int,
        prefix_lens: torch.Tensor,
        track_indices: Optional[torch.Tensor] = None,
        track_interval: Optional[int] = None,
    ) -> None:
        """Each request's recurrent state := its state after the accepted path (and the
        prefix-cache tracking slot's, where the round crossed a tracking boundary): one launch
        per two copied pool tensors, plus flat mode's replay; no host sync."""
        if track_indices is None or track_interval is None:
            track_indices = track_interval = None
        pools = self.copied_pools
        for first in range(0, len(pools), 2):
            copy_accepted_rows(
                pools[first : first + 2],
                cache_indices,
                accept_index,
                accept_lens,
                num_verify_tokens,
                self.max_verify_tokens,
                prefix_lens,
                track_indices=track_indices,
                track_interval=track_interval,
            )
        if self.stash is not None:
            replay_commit(
                ssm_states=self.ssm_pool,
                stash=self.stash,
                cache_indices=cache_indices,
                accept_index=accept_index,
                accept_lens=accept_lens,
                num_verify_tokens=num_verify_tokens,
                max_path=self.max_path,
                prefix_lens=prefix_lens,
                track_indices=track_indices,
                track_interval=track_interval,
            )


def _conv_rows(spec_state, spec_slots: int, width: int):
    return [
        (_rows(state, int(state.shape[1])), _rows(window, spec_slots * width))
        for state, window in zip(spec_state.conv, spec_state.intermediate_conv_window, strict=True)
    ]


def concurrency_problem(model_runner, commit: RecurrentStateCommit, *, block_size: int) -> Optional[str]:
    """Why this verify width's per-node state leaves fewer concurrent requests than requested, with
    the largest budget and the --max-running-requests that do fit; None when they fit.

    SGLang sizes the live recurrent states (``ratio`` slots per request) and the per-node
    verify state (snapshots, or in flat mode conv windows + stashed inputs; one per verify token
    per request, plus flat mode's branch scratch per request) from one budget, then caps the
    concurrency to what that budget holds; DDTREE refuses to start with fewer requests than
    were asked for, unless told to serve the cap (`check_concurrency`). In snapshot mode the
    message also points to the default flat state, which keeps no SSM snapshots."""
    requested = getattr(model_runner.server_args, "max_running_requests", None)
    fitted = int(model_runner.max_running_requests)
    mamba_ratio = getattr(model_runner, "_calculate_mamba_ratio", None)
    if requested is None or fitted >= int(requested) or mamba_ratio is None:
        return None
    ratio = int(mamba_ratio())
    live_slots = int(commit.ssm.shape[1])
    if live_slots // ratio >= int(requested):
        return None  # the cap came from the KV cache, not from the recurrent state
    per_request = commit.live_bytes_per_request
    per_token = commit.bytes_per_verify_token
    budget_bytes = live_slots * per_request + commit.verify_bytes
    share = budget_bytes / int(requested) - ratio * per_request - commit.scratch_bytes_per_request
    widest = int(share // per_token)
    if widest >= block_size:
        fits = f"the largest budget that fits {requested} requests is {widest - 1}"
    else:
        fits = f"no tree budget fits {requested} requests"
    flat = (
        " The default flat state keeps no SSM snapshots: unset SGLANG_DDTREE_HYBRID_STATE."
        if commit.mode == "snapshot"
        else ""
    )
    return (
        f"DDTREE's verify width {commit.max_verify_tokens} keeps {commit.describe()}; with them "
        f"only {fitted} of the requested {requested} concurrent requests fit: {fits}, or pass "
        f"--max-running-requests {fitted} (or raise --mem-fraction-static).{flat}"
    )


def check_concurrency(model_runner, commit: RecurrentStateCommit, *, block_size: int) -> Optional[str]:
    """None when the requested concurrent requests fit (`concurrency_problem`); where they do
    not, the warning to log before serving SGLang's cap under SGLANG_DDTREE_SERVE_FEWER_REQUESTS=1,
    and otherwise the problem raised: nobody gets fewer requests than asked for unless they say so."""
    problem = concurrency_problem(model_runner, commit, block_size=block_size)
    if problem is None:
        return None
    if not envs.SGLANG_DDTREE_SERVE_FEWER_REQUESTS.get():
        raise ValueError(problem)
    return (
        f"{problem} SGLANG_DDTREE_SERVE_FEWER_REQUESTS=1: serving SGLang's cap of "
        f"{int(model_runner.max_running_requests)} concurrent requests instead."
    )
