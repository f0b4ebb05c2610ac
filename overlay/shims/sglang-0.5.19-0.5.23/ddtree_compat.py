"""DDTREE compat shim for sglang 0.5.19 - 0.5.23 (installed as ``ddtree_compat.py``).

Where the DFlash v2 worker of one release family differs, the DDTree worker asks this
module; the manifest of each release installs the shim written against that family.
It overrides ``ddtree_compat_base.CompatShim`` (0.5.14) wherever the family differs;
0.5.19 - 0.5.23 (versus 0.5.15 - 0.5.18):

* server args are resolved by declarations (``declare_resolution``, read through
  ``resolving_view``) and published into runtime-context bags; DFlash's worker, the draft
  runner's attention backends and its CUDA-graph runner read ``get_spec()``, not
  ``server_args``. The draft side is built inside a scoped ``get_spec().override`` that
  gives it the block size, while the target keeps the verify width;
* the draft input's host bound of the KV lengths is ``nxt_kv_lens_*``;
* per release, exactly what that release's DFlash decode path does around the draft
  forward: ``num_token_non_padded`` (0.5.20+), the draft TP context (0.5.20+), the
  iteration's KV-loc plan bound to the draft forward, the verify input and the draft-KV
  commit (0.5.22+), ``can_run_decode_cuda_graph`` (0.5.23);
* 0.5.23: under TP the target's verify logits come back vocab-sharded (DFlash finishes
  the gather itself); see finish_verify_logits;
* a narrower verify width (budget schedule, adaptive budgets) is built under the ``spec``
  bag's width and the ``exec.graph`` bag's decode batch sizes (verify_width_scope).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from sglang.srt.speculative.ddtree_compat_base import CompatShim
from sglang.srt.speculative.ddtree_contract import (
    DECODE_GRAPH_RUNNER,
    DFLASH_WORKER,
    DFLASH_WORKER_ASSIGNED,
    FORWARD_BATCH,
    FORWARD_BATCH_FIELDS,
    GDN_BACKEND,
    SHARED_CONTRACT,
    VERIFY_INPUT_FIELDS,
    installed_release,
)
from sglang.srt.speculative.ddtree_sampling import EXEC_KERNEL_BACKEND, SGL_KERNEL_SITE, RenormSite
from sglang.srt.speculative.ddtree_utils import replaced_attribute

RELEASE = installed_release()
FAMILY = "sglang 0.5.19 - 0.5.23"
PASSES_NUM_TOKEN_NON_PADDED = RELEASE >= (0, 5, 20)
USES_KV_LOC_PLAN = RELEASE >= (0, 5, 22)
PASSES_CAN_RUN_DECODE_GRAPH = RELEASE >= (0, 5, 23)
DEFERS_VERIFY_GATHER = RELEASE >= (0, 5, 23)
# eagle_sample's top-k / top-p renormalisers: flashinfer's on CUDA from 0.5.21, bound in
# eagle_utils itself from 0.5.23
if RELEASE >= (0, 5, 23):
    EAGLE_RENORM_SITE = RenormSite(
        "sglang.srt.speculative.eagle_utils",
        "top_k_renorm_prob",
        "top_p_renorm_prob",
        "from sglang.kernels.ops.sampling.renorm import top_k_renorm_prob, top_p_renorm_prob",
    )
elif RELEASE >= (0, 5, 21):
    EAGLE_RENORM_SITE = RenormSite(
        "flashinfer.sampling",
        "top_k_renorm_probs",
        "top_p_renorm_probs",
        "from flashinfer.sampling import top_k_renorm_probs as top_k_renorm_prob"
        " from flashinfer.sampling import top_p_renorm_probs as top_p_renorm_prob",
    )
else:
    EAGLE_RENORM_SITE = SGL_KERNEL_SITE


class Sglang0519To0523Shim(CompatShim):
    GRAMMAR_TREE = True  # grammar-constrained requests reach the worker (grammar_tree)
    SPEC_LOGPROBS = True  # so do return_logprob requests (output_logprobs)
    RENORM_SITE = EAGLE_RENORM_SITE
    SAMPLER_BACKEND = EXEC_KERNEL_BACKEND
    CONTRACT = {
        **SHARED_CONTRACT,
        # The prefix-cache tracking interval of a hybrid target's recurrent state.
        "sglang.srt.runtime_context:mamba_track_grid": {"params": ("tree_page",)},
        DFLASH_WORKER: {
            "members": (
                "_append_target_hidden_to_draft_kv_by_loc",
                "_make_next_draft_input_decode",
                "init_attention_backends",
                "init_cuda_graphs",
                "forward_batch_generation",
                "_maybe_build_draft_sampler",
            )
            + (("_draft_write_ids",) if USES_KV_LOC_PLAN else ()),
            "assigned": DFLASH_WORKER_ASSIGNED
            + (
                ("draft_parallel_layout", "_target_logits_processor")
                if RELEASE >= (0, 5, 23)
                else ("draft_owns_attention",)
                if RELEASE >= (0, 5, 21)
                else ("draft_tp_context",)
                if RELEASE >= (0, 5, 20)
                else ()
            ),
        },
        DFLASH_WORKER + "._make_next_draft_input_decode": {"params": ("bonus_tokens", "new_seq_lens")},
        "sglang.srt.speculative.dflash_info_v2:DFlashDraftInputV2": {
            "fields": ("bonus_tokens", "nxt_kv_lens_cpu", "nxt_kv_lens_sum"),
        },
        "sglang.srt.speculative.dflash_info:DFlashVerifyInput": {
            "fields": VERIFY_INPUT_FIELDS + (("kv_loc_plan",) if USES_KV_LOC_PLAN else ()),
            "members": ("prepare_for_verify",),
        },
        FORWARD_BATCH: {
            "fields": FORWARD_BATCH_FIELDS
            + (("num_token_non_padded", "global_num_token_non_padded_cpu") if PASSES_NUM_TOKEN_NON_PADDED else ())
            + (("can_run_decode_cuda_graph",) if PASSES_CAN_RUN_DECODE_GRAPH else ()),
        },
        "sglang.srt.arg_groups.overrides:declare_resolution": {"params": ("server_args", "source")},
        "sglang.srt.arg_groups.model_override_base:resolving_view": {"params": ("server_args",)},
        "sglang.srt.arg_groups.model_override_base:attention_backends_of": {"params": ("cfg",)},
        "sglang.srt.runtime_context:get_spec": {},
        "sglang.srt.runtime_context:get_server_args": {},
        # Where a narrower verify width's backend and graph runner read its width and batch sizes
        # (verify_width_scope overrides them there).
        "sglang.srt.model_executor.runner.base_cuda_graph_runner:get_batch_sizes_to_capture": {
            "source_reads": ("get_exec().graph.cuda_graph_config.decode.bs",),
        },
        "sglang.srt.layers.attention.triton_backend:TritonAttnBackend.__init__": {
            "source_reads": ("get_spec().speculative_num_draft_tokens",),
        },
        # The verify's tree links (see SHARED_CONTRACT): the metadata glue graph, which would
        # replay the capture-time prep, is off for the DFlash family, and 0.5.23's target-verify
        # glue is DSpark's only; from 0.5.21 the Gated-DeltaNet backend's replay prep is its base's.
        DECODE_GRAPH_RUNNER + ":DecodeCudaGraphRunner.__init__": {
            "source_reads": ("spec_algorithm.is_dflash_family()",),
        },
        **(
            {
                GDN_BACKEND + ".init_forward_metadata_out_graph": {
                    "source_reads": ("super().init_forward_metadata_out_graph(",),
                },
            }
            if RELEASE >= (0, 5, 21)
            else {}
        ),
        **(
            {
                DECODE_GRAPH_RUNNER + ":DecodeCudaGraphRunner._glues_target_verify_metadata": {
                    "source_reads": ("spec_algorithm.is_dspark()",),
                },
            }
            if RELEASE >= (0, 5, 23)
            else {}
        ),
        **(
            {
                "sglang.srt.layers.logits_processor:LogitsProcessor": {
                    "members": ("is_deferred_shard", "finish_deferred_gather"),
                },
            }
            if DEFERS_VERIFY_GATHER
            else {}
        ),
    }

    def api_contract_problems(self):
        problems = super().api_contract_problems()
        try:
            from sglang.srt.runtime_context import _ConfigBag

            if not hasattr(_ConfigBag, "override"):
                problems.append("runtime_context._ConfigBag has no scoped `override`")
        except ImportError as error:
            problems.append(f"runtime_context._ConfigBag: not found ({error})")
        return problems

    # --- server args: declarations, runtime-context bags --------------------------------------

    def server_args_view(self, server_args):
        """What ``_handle_ddtree`` reads while server args are being resolved: the live view."""
        from sglang.srt.arg_groups.overrides import resolving_view

        return resolving_view(server_args)

    def declare(self, server_args, **fields) -> None:
        """``_handle_ddtree``'s writes, as declared resolutions (what ``_handle_dflash`` does)."""
        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, "_handle_ddtree", **fields)

    def attention_backends(self, cfg):
        """(prefill, decode) attention backends of the resolving view."""
        from sglang.srt.arg_groups.model_override_base import attention_backends_of

        return attention_backends_of(cfg)

    def spec_arg(self, server_args, name: str):
        """A resolved speculative flag: the published ``spec`` bag is the source of truth."""
        from sglang.srt.runtime_context import get_spec

        return getattr(get_spec(), name)

    def published_server_args(self):
        """The raw record (0.5.20+ retire get_global_server_args); what it resolved to, read
        through ``spec_arg``, is the spec bag's."""
        from sglang.srt.runtime_context import get_server_args

        return get_server_args()

    @contextmanager
    def draft_width_during_init(self, server_args, block_size: int):
        """The server_args DFlash's __init__ gets (the published record itself: the draft
        ModelRunner asserts it). DFlash reads the block size from ``get_spec()`` and builds
        the draft runner under the override; the bag is restored afterwards."""
        with _spec_bag_width(block_size):
            yield server_args

    def draft_width_scope(self, worker):
        """Draft attention backends and draft CUDA graphs read the width at construction."""
        return _spec_bag_width(worker.block_size)

    @contextmanager
    def verify_width_scope(self, model_runner, num_verify_tokens: int, batch_sizes):
        """What a narrower verify width's target attention backend and decode graphs are built
        under: that width in the ``spec`` bag (the record is read-only), and the batch sizes to
        capture in the ``exec.graph`` bag's cuda_graph_config.decode.bs, where
        get_batch_sizes_to_capture reads them; both restored afterwards."""
        from sglang.srt.runtime_context import get_exec

        decode = get_exec().graph.cuda_graph_config.decode
        with _spec_bag_width(num_verify_tokens), replaced_attribute(decode, "bs", list(batch_sizes)):
            yield

    # --- the decode round ---------------------------------------------------------------------

    def root_tokens(self, draft_input) -> torch.Tensor:
        """The bonus token of the last verify: the tree's root and the draft block's slot 0."""
        return draft_input.bonus_tokens

    def planning_seq_lens(self, batch, draft_input, width: int):
        """Host-side upper bounds of the KV lengths the draft and verify forwards see.

        As DFlash computes them: the committed prefix plus the window the forward writes
        (DDTREE: the verify width N >= the draft block), else ``nxt_kv_lens``, else (0.5.22+)
        each request's allocated length, before that the device lengths.
        """
        if batch.seq_lens_cpu is not None:
            seq_lens_cpu = batch.seq_lens_cpu.to(torch.int32) + int(width)
            return seq_lens_cpu, int(seq_lens_cpu.sum())
        if draft_input.nxt_kv_lens_cpu is not None:
            return draft_input.nxt_kv_lens_cpu.clone(), int(draft_input.nxt_kv_lens_sum)
        if USES_KV_LOC_PLAN:
            seq_lens_cpu = torch.tensor([req.kv.kv_allocated_len for req in batch.reqs], dtype=torch.int32)
        else:
            seq_lens_cpu = batch.seq_lens.to("cpu", dtype=torch.int32)
        return seq_lens_cpu, int(seq_lens_cpu.sum())

    def next_draft_input(self, worker, *, bonus: torch.Tensor, new_seq_lens: torch.Tensor, draft_input):
        return worker._make_next_draft_input_decode(bonus_tokens=bonus, new_seq_lens=new_seq_lens)

    def open_window(self, worker, batch, draft_input, cache_loc_2d: torch.Tensor):
        """0.5.22+: the iteration's KV-loc plan over the verify window [bs, N], planned once
        for the draft forward, the verify and the draft-KV commit (as DFlash does)."""
        if not USES_KV_LOC_PLAN:
            return None
        translator = worker.target_worker.model_runner.kv_index_translator
        return translator.plan(
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens,
            seq_lens_cpu=(
                batch.seq_lens_cpu if batch.seq_lens_cpu is not None else draft_input.nxt_kv_lens_cpu
            ),
            write_virtual=cache_loc_2d.reshape(-1),
            read_extent=int(cache_loc_2d.shape[1]),
        )

    def draft_forward_batch(self, worker, window, batch, **fields):
        """The draft block's TARGET_VERIFY ForwardBatch, with what the release's DFlash adds."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        tokens = int(fields["input_ids"].numel())
        if PASSES_NUM_TOKEN_NON_PADDED:
            from sglang.srt.model_executor.forward_batch_info import enable_num_token_non_padded

            fields["num_token_non_padded"] = (
                torch.full((), tokens, dtype=torch.int32, device=worker.device)
                if enable_num_token_non_padded()
                else None
            )
            fields["global_num_token_non_padded_cpu"] = tokens
        if PASSES_CAN_RUN_DECODE_GRAPH:
            fields["can_run_decode_cuda_graph"] = batch.can_run_decode_cuda_graph
        forward_batch = ForwardBatch(**fields)
        if window is not None:
            # The draft writes the first block_size columns of the verify window.
            draft_translator = worker.draft_model_runner.kv_index_translator
            window.bind(forward_batch, draft_translator, cols=slice(0, int(worker.block_size)))
        return forward_batch

    def draft_forward_context(self, worker):
        """The draft runner's TP context around its forward, as the release's DFlash enters it."""
        if RELEASE >= (0, 5, 23):
            from sglang.srt.speculative.spec_utils import draft_tp_context

            return draft_tp_context(worker.draft_parallel_layout)
        if RELEASE >= (0, 5, 22):
            from sglang.srt.speculative.spec_utils import draft_tp_context

            return draft_tp_context(worker.draft_owns_attention)
        if RELEASE >= (0, 5, 21):
            return worker.draft_tp_context(
                worker.draft_model_runner.tp_group, owns_attention=worker.draft_owns_attention
            )
        if RELEASE >= (0, 5, 20):
            return worker.draft_tp_context(worker.draft_model_runner.tp_group)
        return nullcontext()

    def verify_input_extras(self, window) -> dict:
        return {} if window is None else {"kv_loc_plan": window}

    def finish_verify_logits(self, worker, logits_output) -> None:
        """Whole-vocabulary verify logits for the accept, in place.

        0.5.23: DFlash's __init__ has the target's LogitsProcessor skip the TP gather of
        TARGET_VERIFY logits and gathers them itself after the forward (or takes a
        vocab-parallel argmax); DDTREE's accept reads full logits, so gather as DFlash does.
        """
        if not DEFERS_VERIFY_GATHER:
            return
        processor = worker._target_logits_processor
        logits = logits_output.next_token_logits
        if processor is not None and processor.is_deferred_shard(logits):
            logits_output.next_token_logits = processor.finish_deferred_gather(logits)

    def mamba_track_interval(self, worker, batch) -> int:
        """Tokens between the prefix-cache recurrent-state checkpoints of a hybrid target: the
        grid of the batch's prefix cache."""
        from sglang.srt.runtime_context import mamba_track_grid

        return int(mamba_track_grid(batch.tree_cache.page_size))

    def draft_commit_loc(self, worker, window, cache_loc_2d: torch.Tensor, width: int) -> torch.Tensor:
        """Draft-pool KV slots of the first ``width`` verify positions. Shape: [bs, width]."""
        if window is None:
            return cache_loc_2d[:, :width].contiguous()
        bs, n = cache_loc_2d.shape
        return worker._draft_write_ids(window).view(bs, n)[:, :width].contiguous()


def _spec_bag_width(width: int):
    from sglang.srt.runtime_context import get_spec

    return get_spec().override(speculative_num_draft_tokens=int(width))


globals().update(Sglang0519To0523Shim().module_names())
