"""DDTREE compat shim for sglang 0.5.15 - 0.5.18 (installed as ``ddtree_compat.py``).

Where the DFlash v2 worker of one release family differs, the DDTree worker asks this
module; the manifest of each release installs the shim written against that family.
It states only where the family differs from 0.5.14 (``ddtree_compat_base.CompatShim``):
the draft input carries ``bonus_tokens`` (int64) and only ``reserved_seq_lens_*``; the
host bound of the KV lengths is the committed prefix plus the window the forward writes
(``batch.seq_lens_cpu + width``); no ``verify_done`` event (the scheduler no longer waits
on one); DFlash no longer deep-copies server_args for its draft runner, and from 0.5.17
the resolved record is read-only and the draft side reads its width from the ``spec``
runtime-context bag (see draft_width_during_init); from 0.5.18 the decode graphs' batch
sizes come from the ``exec.graph`` bag (verify_width_scope); from 0.5.17 grammar-constrained
requests reach the worker, whose tree verify applies their bitmask (grammar_tree), and from
0.5.18 return_logprob requests, whose logprobs the round computes (output_logprobs).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from copy import deepcopy

import torch

from sglang.srt.speculative.ddtree_compat_base import CompatShim
from sglang.srt.speculative.ddtree_contract import (
    DFLASH_WORKER,
    DFLASH_WORKER_ASSIGNED,
    installed_release,
)
from sglang.srt.speculative.ddtree_sampling import EXEC_KERNEL_BACKEND, SamplerBackend
from sglang.srt.speculative.ddtree_utils import replaced_attribute

RELEASE = installed_release()
FAMILY = "sglang 0.5.15 - 0.5.18"
# 0.5.17+: the draft runner's attention backends and graph runner read get_spec().
SPEC_BAG_WIDTH = RELEASE >= (0, 5, 17)
# 0.5.18+: get_batch_sizes_to_capture reads cuda_graph_config from get_exec().graph.
GRAPH_BAG_BS = RELEASE >= (0, 5, 18)
# 0.5.17+: the mamba track interval lives in the exec.mamba bag.
MAMBA_BAG_INTERVAL = RELEASE >= (0, 5, 17)


class Sglang0515To0518Shim(CompatShim):
    # 0.5.17+: DFlash's request check lets grammar-constrained requests through.
    GRAMMAR_TREE = RELEASE >= (0, 5, 17)
    # 0.5.18+: it lets return_logprob requests through too (compute_spec_logprobs).
    SPEC_LOGPROBS = RELEASE >= (0, 5, 18)
    # The sampler reads its backend from the runtime context's flags, its server args (0.5.16)
    # or its kernel settings (0.5.17+).
    SAMPLER_BACKEND = (
        EXEC_KERNEL_BACKEND
        if RELEASE >= (0, 5, 17)
        else SamplerBackend("sglang.srt.runtime_context", "get_server_args", "sampling_backend")
        if RELEASE >= (0, 5, 16)
        else SamplerBackend("sglang.srt.runtime_context", "get_flags", "sampling_backend")
    )
    CONTRACT = {
        **CompatShim.CONTRACT,
        DFLASH_WORKER: {
            "members": CompatShim.CONTRACT[DFLASH_WORKER]["members"] + ("_maybe_build_draft_sampler",),
            "assigned": DFLASH_WORKER_ASSIGNED,
        },
        DFLASH_WORKER + "._make_next_draft_input_decode": {"params": ("bonus_tokens", "new_seq_lens")},
        "sglang.srt.speculative.dflash_info_v2:DFlashDraftInputV2": {
            "fields": ("bonus_tokens", "reserved_seq_lens_cpu", "reserved_seq_lens_sum"),
        },
        "sglang.srt.server_args:ServerArgs": {
            "members": ("get_attention_backends", "mamba_track_interval"),
        },
        # Where a narrower verify width's backend and graph runner read its width and batch sizes
        # (verify_width_scope overrides them there).
        "sglang.srt.model_executor.runner.base_cuda_graph_runner:get_batch_sizes_to_capture": {
            "source_reads": (
                "get_exec().graph.cuda_graph_config.decode.bs"
                if GRAPH_BAG_BS
                else "server_args.cuda_graph_config.decode.bs",
            ),
        },
        "sglang.srt.layers.attention.triton_backend:TritonAttnBackend.__init__": {
            "source_reads": (
                "get_spec().speculative_num_draft_tokens"
                if SPEC_BAG_WIDTH
                else "model_runner.server_args.speculative_num_draft_tokens",
            ),
        },
        # The prefix-cache tracking interval of a hybrid target.
        **({"sglang.srt.runtime_context:get_exec": {}} if MAMBA_BAG_INTERVAL else {}),
    }

    def api_contract_problems(self):
        problems = super().api_contract_problems()
        if SPEC_BAG_WIDTH:
            try:
                from sglang.srt.runtime_context import _ConfigBag, get_spec  # noqa: F401
            except ImportError as error:
                problems.append(f"runtime_context.get_spec: not found ({error})")
            else:
                if not hasattr(_ConfigBag, "override"):
                    problems.append("runtime_context._ConfigBag has no scoped `override`")
        return problems

    def root_tokens(self, draft_input) -> torch.Tensor:
        """The bonus token of the last verify: the tree's root and the draft block's slot 0."""
        return draft_input.bonus_tokens

    def planning_seq_lens(self, batch, draft_input, width: int):
        """Host-side upper bounds of the KV lengths the draft and verify forwards see.

        As DFlash computes them from 0.5.15 on: the committed prefix plus the window the
        forward writes (DDTREE: the verify width N >= the draft block), else the
        allocator's reservation, else the device lengths.
        """
        if batch.seq_lens_cpu is not None:
            seq_lens_cpu = batch.seq_lens_cpu.to(torch.int32) + int(width)
            return seq_lens_cpu, int(seq_lens_cpu.sum())
        if draft_input.reserved_seq_lens_cpu is not None:
            return draft_input.reserved_seq_lens_cpu.clone(), int(draft_input.reserved_seq_lens_sum)
        seq_lens_cpu = batch.seq_lens.to("cpu", dtype=torch.int32)
        return seq_lens_cpu, int(seq_lens_cpu.sum())

    def next_draft_input(self, worker, *, bonus: torch.Tensor, new_seq_lens: torch.Tensor, draft_input):
        """The next round's DFlash draft state (``draft_input`` is unused from 0.5.15 on)."""
        return worker._make_next_draft_input_decode(bonus_tokens=bonus, new_seq_lens=new_seq_lens)

    @contextmanager
    def draft_width_during_init(self, server_args, block_size: int):
        """The server_args DFlash's __init__ gets: a private copy whose
        speculative_num_draft_tokens is the block size.

        From 0.5.15 DFlash no longer deep-copies server_args for its draft runner (0.5.15
        shares them; 0.5.16/0.5.17 copy inside build_draft_tp_worker; 0.5.18 shares again),
        and from 0.5.17 the resolved record is read-only. DFlash reasons in blocks
        throughout, so it and its draft runner get the copy; the record the scheduler, the
        target and the published config hold is never written. 0.5.17+: the draft runner's
        attention backends and graphs read the ``spec`` bag instead, overridden in scope.
        """
        draft_args = deepcopy(server_args)
        # A private copy: bypass the post-resolution guard (0.5.17+) that protects the record.
        object.__setattr__(draft_args, "speculative_num_draft_tokens", int(block_size))
        with _spec_bag_width(block_size):
            yield draft_args

    def draft_width_scope(self, worker):
        """Draft-side initialisation after __init__ (attention backends, CUDA graphs)."""
        return _spec_bag_width(worker.block_size)

    @contextmanager
    def verify_width_scope(self, model_runner, num_verify_tokens: int, batch_sizes):
        """What a narrower verify width's target attention backend and decode graphs are built
        under: that width where the backend and runner read it (the target's server_args up to
        0.5.16, the ``spec`` bag from 0.5.17, whose record is read-only), and the batch sizes to
        capture where get_batch_sizes_to_capture reads them (cuda_graph_config.decode.bs: the
        target's server_args' up to 0.5.17, the ``exec.graph`` bag's from 0.5.18)."""
        if SPEC_BAG_WIDTH:
            width = _spec_bag_width(num_verify_tokens)
        else:
            width = replaced_attribute(
                model_runner.server_args, "speculative_num_draft_tokens", int(num_verify_tokens)
            )
        with width, replaced_attribute(_decode_graph_config(model_runner), "bs", list(batch_sizes)):
            yield

    def mamba_track_interval(self, worker, batch) -> int:
        """Tokens between the prefix-cache recurrent-state checkpoints of a hybrid target."""
        if MAMBA_BAG_INTERVAL:
            from sglang.srt.runtime_context import get_exec

            return int(get_exec().mamba.mamba_track_interval)
        return super().mamba_track_interval(worker, batch)


def _spec_bag_width(width: int):
    if not SPEC_BAG_WIDTH:
        return nullcontext()
    from sglang.srt.runtime_context import get_spec

    return get_spec().override(speculative_num_draft_tokens=int(width))


def _decode_graph_config(model_runner):
    if GRAPH_BAG_BS:
        from sglang.srt.runtime_context import get_exec

        return get_exec().graph.cuda_graph_config.decode
    return model_runner.server_args.cuda_graph_config.decode


globals().update(Sglang0515To0518Shim().module_names())
