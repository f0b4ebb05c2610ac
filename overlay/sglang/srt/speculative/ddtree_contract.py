"""What the DDTree payload expects of SGLang's DFlash internals, checked without a GPU.

The DDTree worker subclasses ``DFlashWorkerV2`` and reads private members of it and of
its draft/verify inputs. Each release family's ``ddtree_compat`` declares a ``CONTRACT``;
``contract_problems(CONTRACT)`` checks it against the installed SGLang by introspection
(signatures, dataclass fields, assignments in ``__init__``, expressions the source holds or
must not hold) and returns one line per mismatch. ``ddtree-overlay matrix`` runs it in
every release's interpreter on CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from importlib.metadata import version as _distribution_version
from typing import Dict, List, Tuple

DFLASH_WORKER = "sglang.srt.speculative.dflash_worker_v2:DFlashWorkerV2"
FORWARD_BATCH = "sglang.srt.model_executor.forward_batch_info:ForwardBatch"
FORWARD_BATCH_FIELDS = (
    "forward_mode", "batch_size", "input_ids", "req_pool_indices", "seq_lens",
    "out_cache_loc", "seq_lens_sum", "seq_lens_cpu", "positions", "input_embeds",
    "spec_algorithm", "spec_info", "capture_hidden_mode",
)
VERIFY_INPUT_FIELDS = (
    "draft_token", "positions", "draft_token_num", "topk", "custom_mask", "capture_hidden_mode",
)
DFLASH_WORKER_ASSIGNED = ("_mask_token_id", "_draft_block_spec_info", "draft_model_runner", "block_size")
LINEAR_BACKEND = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
GDN_BACKEND = "sglang.srt.layers.attention.linear.gdn_backend:GDNAttnBackend"
DECODE_GRAPH_RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"

# What the payload needs in every supported release; each family's ddtree_compat adds
# (or, for the same key, replaces) the entries where its release differs.
SHARED_CONTRACT: Dict[str, Dict[str, object]] = {
    DFLASH_WORKER + "._append_target_hidden_to_draft_kv_by_loc": {
        "params": ("target_hidden", "cache_loc", "positions", "cache_loc_2d", "commit_lens"),
    },
    "sglang.srt.speculative.dflash_info:DFlashVerifyInput": {
        "fields": VERIFY_INPUT_FIELDS,
        "members": ("prepare_for_verify",),
    },
    # On a hybrid target the round's tree links reach the Gated-DeltaNet kernels because the
    # verify is planned on the forward stream after the tree is built, never on a plan stream:
    # the decode graph runner's load_batch, or the backend's eager init.
    "sglang.srt.speculative.dflash_info:DFlashVerifyInput.prepare_for_verify": {
        "params": ("batch", "target_worker"),
        "source_reads": (
            "decode_cuda_graph_runner.load_batch(",
            "attn_backend.init_forward_metadata(",
        ),
        "source_lacks": ("stream",),
    },
    "sglang.srt.speculative.eagle_utils:eagle_sample": {
        "params": ("verify_input", "batch", "logits_output"),
        "reads_subset_of": ("verify_input", "sglang.srt.speculative.ddtree_info:DDTreeVerifyInput"),
    },
    # What ddtree_sampling reads to give a T > 0 round the sampler's top-k / top-p / min-p law.
    "sglang.srt.sampling.sampling_batch_info:SamplingBatchInfo": {
        "fields": (
            "top_ks", "top_ps", "min_ps", "is_all_greedy",
            "need_top_k_sampling", "need_top_p_sampling", "need_min_p_sampling",
        ),
    },
    # The startup warm-up (ddtree_warmup) reads the round's root-token dtype off an idle input.
    "sglang.srt.speculative.dflash_info_v2:DFlashDraftInputV2.create_idle_input": {"params": ("device",)},
    # The commit moves the accepted nodes' target KV (ddtree_kv_move) over the tables and tiling
    # of SGLang's tiled copy, through a hybrid pool to its full-attention pool, and with the
    # pool's own mover where SGLang moves another way.
    "sglang.srt.mem_cache.memory_pool:MHATokenToKVPool.move_kv_cache": {"params": ("tgt_loc", "src_loc")},
    "sglang.srt.mem_cache.memory_pool:MHATokenToKVPool._init_kv_copy_and_warmup": {
        "source_reads": ('"bytes_per_tile"', '"num_warps"', "self.data_strides"),
    },
    "sglang.srt.mem_cache.memory_pool:HybridLinearKVPool.move_kv_cache": {
        "source_reads": ("self.full_kv_pool.move_kv_cache(",),
    },
    FORWARD_BATCH: {"fields": FORWARD_BATCH_FIELDS},
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
    # Under TP: the group the vocab-parallel top-K reduces over (its rank 0 chooses adaptive
    # widths), and where the lm_head's shard lies.
    "sglang.srt.distributed:get_tp_group": {},
    "sglang.srt.distributed.parallel_state:GroupCoordinator": {
        "assigned": ("world_size", "rank_in_group", "device_group"),
    },
    "sglang.srt.layers.vocab_parallel_embedding:VocabParallelEmbeddingShardIndices": {
        "fields": ("org_vocab_start_index",),
        "members": ("num_org_elements",),
    },
    # A budget schedule's or adaptive budgets' narrower verify widths: the worker builds each
    # one's target backend and decode graphs inside the shim's verify_width_scope.
    "sglang.srt.model_executor.model_runner:ModelRunner._get_attention_backend": {
        "params": ("init_new_workspace",),
    },
    "sglang.srt.model_executor.model_runner:ModelRunner": {
        "assigned": ("init_new_workspace", "eager_runner", "decode_cuda_graph_runner"),
    },
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner:DecodeCudaGraphRunner": {
        "params": ("model_runner", "attn_backend", "speculative_num_draft_tokens"),
    },
    "sglang.srt.model_executor.cuda_graph_config:PhaseConfig": {"fields": ("bs",)},
    # Hybrid Gated-DeltaNet targets: the hook reads the target's config as DFlash reads its
    # drafter's, the pools keep per-node conv windows (and SSM snapshots in snapshot mode), and
    # the commit copies from them.
    "sglang.srt.utils.hf_transformers_utils:get_config": {
        "params": ("model", "trust_remote_code", "revision", "model_override_args"),
    },
    "sglang.srt.mem_cache.memory_pool:MambaPool.SpeculativeState": {
        "fields": ("conv", "temporal", "intermediate_ssm", "intermediate_conv_window"),
    },
    "sglang.srt.mem_cache.memory_pool:HybridReqToTokenPool": {
        "members": ("get_mamba_indices", "get_speculative_mamba2_params_all_layers"),
    },
    # The linear-attention backend takes the tree path (and the pool its dense conv window)
    # from the eagle top-k that _handle_ddtree sets on hybrid targets.
    "sglang.srt.layers.attention.hybrid_linear_attn_backend:MambaAttnBackendBase.__init__": {
        "source_reads": ("speculative_eagle_topk",),
    },
    "sglang.srt.mem_cache.memory_pool:conv_window_dedup_enabled": {
        "params": ("speculative_eagle_topk",),
    },
    # Fresh tree links every round, eager and under CUDA graphs. The graph replay's prep gets
    # the verify input (load_batch's view of the batch), the hybrid backend hands it to its
    # linear-attention backend, and that copies the links into the captured buffers from any
    # input that has them: no isinstance gate, unlike the plan-stream refresh
    # (update_verify_buffers_to_fill_after_draft, 0.5.17+: EagleVerifyInput only), which only
    # EAGLE's verify calls and DDTREE does not need. Eager, the kernels read the input's own.
    DECODE_GRAPH_RUNNER + ":build_replay_fb_view": {
        "source_reads": ("spec_info=forward_batch.spec_info",),
    },
    LINEAR_BACKEND + ":HybridLinearAttnBackend.init_forward_metadata_out_graph": {
        "source_reads": ("attn_backend.init_forward_metadata_out_graph(",),
    },
    LINEAR_BACKEND + ":MambaAttnBackendBase.init_forward_metadata_out_graph": {
        "source_reads": ("self._replay_metadata(", "forward_batch.spec_info"),
    },
    GDN_BACKEND + "._replay_metadata": {
        "source_reads": (
            'getattr(spec_info, "retrieve_next_token", None)',
            "self.retrieve_next_token_list[bs - 1][:bs_without_pad].copy_(",
            "self.retrieve_next_sibling_list[bs - 1][:bs_without_pad].copy_(",
            "retrieve_next_token=self.retrieve_next_token_list[bs - 1]",
        ),
        "source_lacks": ("isinstance(spec_info",),
    },
    GDN_BACKEND + "._forward_metadata": {
        "source_reads": ("forward_batch.spec_info.retrieve_next_token",),
    },
    # The adaptive policy times a batch by how many of its requests walk a grammar bitmask.
    "sglang.srt.managers.schedule_batch:ScheduleBatch": {"fields": ("reqs", "has_grammar")},
    "sglang.srt.managers.schedule_batch:Req": {"assigned": ("grammar",)},
}


# DFlash's request check, which DDTREE shares (its spec class is of the DFlash family), aborts
# a request it refuses before the request reaches a batch; the payload relies on it for what
# the release's DDTREE cannot serve: grammar-constrained requests up to 0.5.16 and
# return_logprob up to 0.5.17.
VALIDATE_DFLASH_REQUEST = "sglang.srt.speculative.dflash_utils:validate_dflash_request"
GRAMMAR_REQUEST_READS = (
    "sampling_params.json_schema",
    "sampling_params.regex",
    "sampling_params.ebnf",
    "sampling_params.structural_tag",
)
LOGPROB_REQUEST_READS = ("req.return_logprob",)


def refused_requests_contract(grammar_tree: bool, spec_logprobs: bool) -> Dict[str, Dict[str, object]]:
    """The request check's refusals a release without ``grammar_tree`` / ``spec_logprobs`` needs."""
    reads = (() if grammar_tree else GRAMMAR_REQUEST_READS) + (() if spec_logprobs else LOGPROB_REQUEST_READS)
    return {VALIDATE_DFLASH_REQUEST: {"source_reads": reads}} if reads else {}


# Grammar-constrained requests from 0.5.17: spec_utils builds the grammar bitmask over a verify
# tree's left-child / right-sibling links, which DDTREE's verify input carries; eagle_sample
# applies it before the tree accept.
GRAMMAR_TREE_CONTRACT: Dict[str, Dict[str, object]] = {
    "sglang.srt.speculative.spec_utils:GrammarTree.from_device": {
        "params": ("retrieve_next_token", "retrieve_next_sibling", "draft_token"),
    },
    # (its host-to-device step and resetting the extend stage's mask are what
    # SGLANG_DDTREE_GRAMMAR_MASK=path repeats)
    "sglang.srt.speculative.spec_utils:build_grammar_vocab_mask": {
        "params": ("reqs", "tree", "sampling_info", "device", "barrier"),
        "source_reads": ("vocab_mask.to(device, non_blocking=True)", "sampling_info.grammar_mask = None"),
    },
    # what ddtree_grammar_path calls on a request's grammar to fill and apply its own bitmask
    "sglang.srt.constrained.base_grammar_backend:BaseGrammarObject.allocate_vocab_mask": {
        "params": ("vocab_size", "batch_size", "device"),
    },
    "sglang.srt.constrained.base_grammar_backend:BaseGrammarObject.fill_vocab_mask": {"params": ("vocab_mask", "idx")},
    "sglang.srt.constrained.base_grammar_backend:BaseGrammarObject.apply_vocab_mask": {
        "params": ("logits", "vocab_mask"),
    },
    # eagle_sample applies the mask; under SGLANG_DDTREE_GRAMMAR_MASK=path its greedy accept
    # must read the masked rows by argmax after exactly these adjustments
    # (ddtree_grammar_path.PRE_MASK_ADJUSTMENTS, which send a batch to SGLang's walk).
    "sglang.srt.speculative.eagle_utils:eagle_sample": {
        **SHARED_CONTRACT["sglang.srt.speculative.eagle_utils:eagle_sample"],
        "params": ("verify_input", "batch", "logits_output", "grammar_mask"),
        "source_reads": (
            "sanitize_nan_logits(next_token_logits,",
            "sampling_info.acc_additive_penalties",
            "sampling_info.acc_scaling_penalties",
            "sampling_info.logit_bias",
            "grammar_mask.apply(next_token_logits)",
            "torch.argmax(next_token_logits, dim=-1)",
        ),
    },
    # ... whose first step the path mask repeats before it reads the verify's logits
    "sglang.srt.utils.async_probe:sanitize_nan_logits": {"params": ("logits", "msg")},
    # DDTREE's spec class answers supports_grammar_overlap() False unless
    # SGLANG_DDTREE_GRAMMAR_OVERLAP=1: the scheduler then resolves the previous round's result,
    # which advances each grammar, before a grammar batch's round, and hands the worker no
    # barrier; True, it overlaps the batch and hands the worker the barrier instead.
    "sglang.srt.managers.schedule_batch:ScheduleBatch.grammar_needs_sync": {
        "source_reads": ("not self.spec_algorithm.supports_grammar_overlap()",),
    },
    "sglang.srt.managers.scheduler:Scheduler.run_batch": {
        "source_reads": ("supports_grammar_overlap()", 'fwd_kwargs["grammar_barrier"]'),
    },
}


# return_logprob from 0.5.18: a speculative round's output logprobs come from the verify rows
# its tokens were accepted at (accept_index, as EAGLE's tree worker passes them), one row per
# request of accept-width entries, which the scheduler reads up to each accept length.
SPEC_LOGPROBS_CONTRACT: Dict[str, Dict[str, object]] = {
    "sglang.srt.layers.logprob_processor:compute_spec_logprobs": {
        "params": ("batch", "logits_output", "predict", "accept_index"),
        "source_reads": ("predict[flat_accept_idx]", "next_token_logits[flat_accept_idx]"),
    },
    "sglang.srt.managers.scheduler_components.batch_result_processor"
    ":SchedulerBatchResultProcessor._apply_decode_logprobs": {
        "source_reads": ("accepted_logprobs = next_token_logprobs[i]",),
    },
}


def installed_release() -> Tuple[int, ...]:
    """(major, minor, patch) of the installed sglang; ``.postN`` and local tags dropped."""
    parts = []
    for piece in _distribution_version("sglang").split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def contract_problems(contract: Dict[str, Dict[str, object]]) -> List[str]:
    problems: List[str] = []
    for target, wants in contract.items():
        try:
            obj = _resolve(target)
        except (ImportError, AttributeError) as error:
            problems.append(f"{target}: not found ({error})")
            continue
        problems += _check_params(target, obj, wants.get("params", ()))
        problems += _check_fields(target, obj, wants.get("fields", ()))
        problems += _check_members(target, obj, wants.get("members", ()))
        problems += _check_assigned(target, obj, wants.get("assigned", ()))
        problems += _check_reads(target, obj, wants.get("reads_subset_of"))
        problems += _check_source(target, obj, wants.get("source_reads", ()))
        problems += _check_source_lacks(target, obj, wants.get("source_lacks", ()))
    return problems


def _resolve(target: str):
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def _check_params(target, obj, names) -> List[str]:
    if not names:
        return []
    params = inspect.signature(obj).parameters
    return [f"{target}: no parameter `{n}`" for n in names if n not in params]


def _check_fields(target, obj, names) -> List[str]:
    if not names:
        return []
    fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
    return [f"{target}: no dataclass field `{n}`" for n in names if n not in fields]


def _check_members(target, obj, names) -> List[str]:
    return [f"{target}: no member `{n}`" for n in names if not hasattr(obj, n)]


def _check_assigned(target, obj, names) -> List[str]:
    """Instance attributes: assigned as ``self.<name> =`` somewhere in the class body."""
    if not names:
        return []
    source = inspect.getsource(obj)
    return [
        f"{target}: never assigns `self.{n}`"
        for n in names
        if not re.search(rf"self\.{re.escape(n)}\s*(:[^=]+)?=[^=]", source)
    ]


def _check_source(target, obj, expressions) -> List[str]:
    """Expressions the source must contain: where the payload expects ``obj`` to read a value
    it overrides in scope (a release that reads it elsewhere would not see the override)."""
    if not expressions:
        return []
    source = inspect.getsource(obj)
    return [f"{target}: no longer reads `{e}`" for e in expressions if e not in source]


def _check_source_lacks(target, obj, expressions) -> List[str]:
    """Expressions the source must not contain: where a release that adds one (a type gate, a
    side stream) would change what the payload relies on."""
    if not expressions:
        return []
    source = inspect.getsource(obj)
    return [f"{target}: now contains `{e}`" for e in expressions if e in source]


def _check_reads(target, obj, spec) -> List[str]:
    """Attributes ``param.X`` that ``obj`` reads must all exist on the class we pass."""
    if not spec:
        return []
    param, provider = spec
    cls = _resolve(provider)
    reads = set(re.findall(rf"\b{param}\.(\w+)", inspect.getsource(obj)))
    names = {f.name for f in dataclasses.fields(cls)} | set(dir(cls))
    return [f"{target} reads `{param}.{r}`, which {provider} lacks" for r in sorted(reads - names)]
