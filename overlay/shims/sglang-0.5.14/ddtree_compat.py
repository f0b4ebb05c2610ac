"""DDTREE compat shim for sglang 0.5.14 (installed as ``ddtree_compat.py``).

Where the DFlash v2 worker of one release family differs, the DDTree worker asks this
module; the manifest of each release installs the shim written against that family.
0.5.14: the draft input carries ``verified_id`` (int32), planning lengths
(``planning_seq_lens_*`` / ``reserved_seq_lens_*``) and a ``verify_done`` event.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from sglang.srt.speculative.ddtree_contract import contract_problems

FAMILY = "sglang 0.5.14"

CONTRACT = {
    "sglang.srt.speculative.dflash_worker_v2:DFlashWorkerV2": {
        "members": (
            "_append_target_hidden_to_draft_kv_by_loc",
            "_make_next_draft_input_decode",
            "init_attention_backends",
            "init_cuda_graphs",
            "forward_batch_generation",
        ),
        "assigned": (
            "_block_pos_offsets",
            "_mask_token_id",
            "_draft_block_spec_info",
            "draft_model_runner",
            "block_size",
        ),
    },
    "sglang.srt.speculative.dflash_worker_v2:DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc": {
        "params": ("target_hidden", "cache_loc", "positions", "cache_loc_2d", "commit_lens"),
    },
    "sglang.srt.speculative.dflash_worker_v2:DFlashWorkerV2._make_next_draft_input_decode": {
        "params": ("verified_id", "new_seq_lens", "cur_allocated_seq_lens_cpu"),
    },
    "sglang.srt.speculative.dflash_info_v2:DFlashDraftInputV2": {
        "fields": (
            "verified_id",
            "verify_done",
            "planning_seq_lens_cpu",
            "planning_seq_lens_sum",
            "reserved_seq_lens_cpu",
            "reserved_seq_lens_sum",
        ),
    },
    "sglang.srt.speculative.dflash_info:DFlashVerifyInput": {
        "fields": ("draft_token", "positions", "draft_token_num", "topk", "custom_mask", "capture_hidden_mode"),
        "members": ("prepare_for_verify",),
    },
    "sglang.srt.speculative.dflash_info:DFlashVerifyInput.prepare_for_verify": {
        "params": ("batch", "target_worker"),
    },
    "sglang.srt.speculative.eagle_utils:eagle_sample": {
        "params": ("verify_input", "batch", "logits_output"),
        "reads_subset_of": ("verify_input", "sglang.srt.speculative.ddtree_info:DDTreeVerifyInput"),
    },
    "sglang.srt.speculative.spec_utils:move_accept_tokens_to_target_kvcache": {
        "params": ("batch", "accept_index", "num_correct_drafts", "token_to_kv_pool_allocator"),
    },
    "sglang.srt.model_executor.forward_batch_info:ForwardBatch": {
        "fields": (
            "forward_mode", "batch_size", "input_ids", "req_pool_indices", "seq_lens",
            "out_cache_loc", "seq_lens_sum", "seq_lens_cpu", "positions", "input_embeds",
            "spec_algorithm", "spec_info", "capture_hidden_mode",
        ),
    },
    "sglang.srt.managers.utils:GenerationBatchResult": {
        "fields": (
            "logits_output", "next_token_ids", "accept_lens", "can_run_cuda_graph",
            "next_draft_input", "speculative_num_draft_tokens", "new_seq_lens",
        ),
    },
    "sglang.srt.managers.tp_worker:TpModelWorker.forward_batch_generation": {
        "params": ("batch", "forward_batch", "is_verify", "skip_attn_backend_init"),
    },
    "sglang.srt.managers.overlap_utils:FutureMap": {
        "params": ("device", "spec_algo", "req_to_token_pool", "needs_cpu_seq_lens"),
    },
    "sglang.srt.arg_groups.speculative_hook:_handle_dflash": {"params": ("server_args",)},
    "sglang.srt.server_args:ServerArgs": {"members": ("get_attention_backends",)},
}


def api_contract_problems():
    return contract_problems(CONTRACT)


def root_tokens(draft_input) -> torch.Tensor:
    """The bonus token of the last verify: the tree's root and the draft block's slot 0."""
    return draft_input.verified_id


def planning_seq_lens(batch, draft_input, width: int):
    """Host-side upper bounds of the committed lengths (DFlash's planning view).

    0.5.14's planning/reserved lengths already cover the in-flight reservation, so
    ``width`` (the verify window) is not added.
    """
    if draft_input.planning_seq_lens_cpu is not None:
        return draft_input.planning_seq_lens_cpu.clone(), int(draft_input.planning_seq_lens_sum)
    if draft_input.reserved_seq_lens_cpu is not None:
        return draft_input.reserved_seq_lens_cpu.clone(), int(draft_input.reserved_seq_lens_sum)
    seq_lens_cpu = batch.seq_lens.to("cpu", dtype=torch.int32)
    return seq_lens_cpu, int(seq_lens_cpu.sum())


def next_draft_input(worker, *, bonus: torch.Tensor, new_seq_lens: torch.Tensor, draft_input):
    """The next round's DFlash draft state, with the event the overlap scheduler waits on."""
    next_input = worker._make_next_draft_input_decode(
        verified_id=bonus,
        new_seq_lens=new_seq_lens,
        cur_allocated_seq_lens_cpu=draft_input.reserved_seq_lens_cpu,
    )
    verify_done = torch.get_device_module(worker.device).Event()
    verify_done.record()
    next_input.verify_done = verify_done
    return next_input


# --- server args: plain attributes (resolution layers arrive in 0.5.19) ---------------------


def server_args_view(server_args):
    """What ``_handle_ddtree`` reads the flags from while server args are being resolved."""
    return server_args


def declare(server_args, **fields) -> None:
    """``_handle_ddtree``'s writes, in order."""
    for name, value in fields.items():
        setattr(server_args, name, value)


def attention_backends(cfg):
    """(prefill, decode) attention backends."""
    return cfg.get_attention_backends()


def spec_arg(server_args, name: str):
    """A resolved speculative flag, as the worker reads it at construction."""
    return getattr(server_args, name)


@contextmanager
def draft_width_during_init(server_args, block_size: int):
    """The server_args DFlash's __init__ gets. It deep-copies them for the draft runner
    (0.5.14): let it copy the block size as speculative_num_draft_tokens, then restore
    the verify width."""
    num_verify_tokens = int(server_args.speculative_num_draft_tokens)
    server_args.speculative_num_draft_tokens = int(block_size)
    try:
        yield server_args
    finally:
        server_args.speculative_num_draft_tokens = num_verify_tokens


def draft_width_scope(worker):
    """Draft-side initialisation after __init__: the draft runner has its own copy."""
    return nullcontext()


# --- the decode round -----------------------------------------------------------------------


def open_window(worker, batch, draft_input, cache_loc_2d):
    """The iteration's KV write window as the release tracks it (a KV-loc plan from 0.5.22)."""
    return None


def draft_forward_batch(worker, window, batch, **fields):
    """The draft block's TARGET_VERIFY ForwardBatch, with what the release's DFlash adds."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    return ForwardBatch(**fields)


def draft_forward_context(worker):
    return nullcontext()


def verify_input_extras(window) -> dict:
    return {}


def draft_commit_loc(worker, window, cache_loc_2d: torch.Tensor, width: int) -> torch.Tensor:
    """Draft-pool KV slots of the first ``width`` verify positions. Shape: [bs, width]."""
    return cache_loc_2d[:, :width].contiguous()
