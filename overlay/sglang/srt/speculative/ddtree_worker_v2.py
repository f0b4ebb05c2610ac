"""DDTREE speculative decoding worker (spec-v2): a DFlash draft grown into a tree.

One decode round, as the paper defines it:
  draft     DFlash block [bonus, MASK x (L)] through the drafter (slot 0 = bonus)
  topk      per-position top-K log-probs, fp32, full-vocabulary normaliser
            (under TP: vocab-parallel, one all-gather; see ddtree_tp), and
            the best B prefixes (best-first rule), nodes in pop order, and/or
            the top-1 chain, as the budget policy asks (ddtree_budget); one
            CUDA-graph replay per round (ddtree_cuda_graph_runner), two around
            the all-gather under TP
  tree      verify tensors and the tree mask of the round's shape (FULL layout,
            or tail-only where the split-KV verify runs, ddtree_attention_choice):
            the chain, or the first nodes of the tree, as many as the round's
            budget (with adaptive budgets chosen per round; see ddtree_adaptive)
  verify    one TARGET_VERIFY forward over root + B nodes: positions = prefix +
            depth, ancestor-only mask
  accept    SGLang's tree kernels: verify_tree_greedy at T=0, target-only tree
            sampling at T>0 (lossless, honours temperature / top-p / top-k / min-p
            as SGLang's sampler applies them: ddtree_sampling)
  commit    the accepted path's KV moved to the front of the verify block, and
            the accepted nodes' target features written into the draft KV
Prefill and idle batches are DFlash's own.

One module past 500 lines: it is the one ``DFlashWorkerV2`` subclass SGLang instantiates, and
its round (draft, tree, verify, commit) reads top to bottom in one class, as SGLang's own
spec workers do; what is not the round's order lives in the sibling ddtree_* modules.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import torch

from sglang.srt.distributed import get_tp_group
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.speculative.ddtree_adaptive import AdaptiveBudget, grammar_requests
from sglang.srt.speculative.ddtree_adaptive_tp import RankZeroBudget
from sglang.srt.speculative.ddtree_attention_choice import (
    draft_attention_in_use,
    verify_attention_in_use,
)
from sglang.srt.speculative.ddtree_budget import BudgetPolicy
from sglang.srt.speculative.ddtree_compat import (
    draft_commit_loc,
    draft_forward_batch,
    draft_forward_context,
    draft_width_during_init,
    draft_width_scope,
    finish_verify_logits,
    grammar_mask,
    grammar_tree,
    mamba_track_interval,
    next_draft_input,
    open_window,
    output_logprobs,
    planning_seq_lens,
    root_tokens,
    sampling_filters,
    spec_arg,
    verify_input_extras,
)
from sglang.srt.speculative.ddtree_cuda_graph_runner import (
    MAX_GRAPH_LOGITS_BYTES,
    DDTreeStageCudaGraphs,
    StaticInput,
    VerifyWidths,
    capture_batch_sizes,
)
from sglang.srt.speculative.ddtree_envs import envs
from sglang.srt.speculative.ddtree_gdn_tree import flat_tree_verify
from sglang.srt.speculative.ddtree_hybrid import RecurrentStateCommit, check_concurrency
from sglang.srt.speculative.ddtree_info import DDTreeVerifyInput
from sglang.srt.speculative.ddtree_kernels import (
    DDTreeAccepted,
    accepted_paths,
    prepare_draft_block,
)
from sglang.srt.speculative.ddtree_kv_move import accepted_kv_mover
from sglang.srt.speculative.ddtree_profile import (
    engine_paths,
    get_ddtree_profiler,
    get_round_sync_guard,
)
from sglang.srt.speculative.ddtree_tp import (
    combine_topk_pieces,
    gather_topk_pieces,
    gather_topk_pieces_with_tail,
    lm_head_topk_pieces,
)
from sglang.srt.speculative.ddtree_tree_stage import select_tree_stage
from sglang.srt.speculative.ddtree_utils import DDTreeDrafts, DDTreeDraftTopK, draft_logits
from sglang.srt.speculative.ddtree_warmup import warm_round_kernels
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.eagle_utils import eagle_sample
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

logger = logging.getLogger(__name__)


class DDTreeWorkerV2(DFlashWorkerV2):
    """DDTREE worker: DFlash's drafter and prefill, a tree verify per decode round."""

    def __init__(self, server_args, *args, **kwargs):
        # DFlash's __init__ builds the draft runner: while it runs, the draft side sees
        # the block size as its speculative_num_draft_tokens; the target keeps the
        # verify width (see _handle_ddtree and the release's ddtree_compat).
        num_verify_tokens = int(spec_arg(server_args, "speculative_num_draft_tokens"))
        block_size = int(spec_arg(server_args, "speculative_dflash_block_size"))
        with draft_width_during_init(server_args, block_size) as dflash_server_args:
            super().__init__(dflash_server_args, *args, **kwargs)

        self.budget_policy = BudgetPolicy.of_resolved_flags(
            budget=int(spec_arg(server_args, "speculative_ddtree_budget")),
            # Only the releases whose patch set declares these flags have them.
            schedule=getattr(server_args, "speculative_ddtree_budget_schedule", None),
            adaptive=getattr(server_args, "speculative_ddtree_adaptive_budgets", None),
            tree_shape=envs.SGLANG_DDTREE_TREE_SHAPE.get(),
        )
        # Set by init_cuda_graphs for an adaptive policy: the policy, or under TP its choice
        # on rank 0 shared with every rank.
        self.adaptive_budget = None
        self.accept_width = self.budget_policy.accept_width(self.block_size)
        self.vocab_size = int(self.target_worker.model_runner.model_config.vocab_size)
        self.recurrent_state = None  # set by init_attention_backends on hybrid targets
        self.move_accepted_kv = None  # set by init_attention_backends, once the pools exist
        tp_group = get_tp_group()
        # Under TP the target lm_head holds one vocabulary shard per rank.
        self._vocab_parallel_group = tp_group.device_group if tp_group.world_size > 1 else None
        self._tp_world = int(tp_group.world_size)
        self._tp_rank_in_group = int(tp_group.rank_in_group)
        # Pairs each rank sends per position under TP: the widest top-K's, every round, so
        # the ranks' all-gathers match whatever shape a round (or a rank's fallback) has.
        self._tp_pack_k = self.budget_policy.top_k(self.vocab_size)
        self.tree_stage = select_tree_stage()  # SGLANG_DDTREE_TREE_KERNEL
        # Whether the target's triton backend takes the tail-only [bs, N, N] mask
        # (ddtree_verify_attention) or the FULL layout: known once its backend exists.
        self.tail_mask = False
        self.tree_graphs = None  # set by init_cuda_graphs
        self.tp_tree_graphs = None  # (top-K pieces, combine + tree) under TP
        self.commit_graphs = None
        self.verify_widths = None
        self.profiler = get_ddtree_profiler()  # SGLANG_DDTREE_PROFILE: a no-op when unset
        self.round_sync_guard = get_round_sync_guard()  # SGLANG_DDTREE_SYNC_DEBUG
        if getattr(self, "tp_rank", 0) == 0:
            logger.info(
                "DDTREE worker ready: budget=%s, block_size=%d, verify width=%d, "
                "accept width=%d, tree stage=%s",
                self.budget_policy.label,
                self.block_size,
                num_verify_tokens,
                self.accept_width,
                self.tree_stage.name,
            )

    def init_attention_backends(self):
        # The scheduler sets up the target's pools and backends before this (and after
        # __init__, where neither exists yet), so the target is known here.
        model_runner = self.target_worker.model_runner
        self.tail_mask, verify_line = verify_attention_in_use(model_runner)
        if getattr(self, "tp_rank", 0) == 0:
            logger.info(verify_line)
        self.move_accepted_kv = accepted_kv_mover(model_runner.token_to_kv_pool_allocator.get_kvcache())
        self.recurrent_state = self._recurrent_state_commit()
        with draft_width_scope(self):
            super().init_attention_backends()
        split_kv_draft = draft_attention_in_use(self.draft_model_runner)
        if getattr(self, "tp_rank", 0) == 0:
            logger.info(
                "DDTREE drafter block: %s (SGLANG_DDTREE_DRAFT_ATTENTION=%s)",
                "the split-KV kernel" if split_kv_draft else "the backend's kernel",
                envs.SGLANG_DDTREE_DRAFT_ATTENTION.get(),
            )
        paths = engine_paths(
            split_kv_verify=self.tail_mask,
            split_kv_draft=split_kv_draft,
            hybrid_state=self.recurrent_state.mode if self.recurrent_state is not None else None,
        )
        self.profiler.attach("paths", lambda: paths)

    def _recurrent_state_commit(self) -> Optional[RecurrentStateCommit]:
        """On a hybrid Gated-DeltaNet target, the commit of its per-node recurrent state."""
        model_runner = self.target_worker.model_runner
        if not hasattr(model_runner.attn_backend, "update_mamba_state_after_mtp_verify"):
            return None
        if int(spec_arg(model_runner.server_args, "speculative_eagle_topk") or 1) <= 1:
            # _handle_ddtree selects SGLang's tree paths only for Gated-DeltaNet layers.
            raise ValueError(
                "DDTREE supports Gated-DeltaNet hybrid targets (Qwen3-Next, Qwen3.5 / Qwen3.6); "
                f"{model_runner.model_config.hf_config.architectures[0]} has other "
                "linear-attention or Mamba layers, whose tree verify DDTREE does not wire."
            )
        pool = model_runner.req_to_token_pool
        spec_state = pool.get_speculative_mamba2_params_all_layers()
        if envs.SGLANG_DDTREE_HYBRID_STATE.get() == "flat":
            commit = self._flat_recurrent_state(spec_state)
        else:
            commit = RecurrentStateCommit.from_pool(spec_state)
        warning = check_concurrency(model_runner, commit, block_size=int(self.block_size))
        if getattr(self, "tp_rank", 0) == 0:
            if warning is not None:
                logger.warning(warning)
            logger.info("DDTREE on a hybrid target, %s mode: %s", commit.mode, commit.describe())
        return commit

    def _flat_recurrent_state(self, spec_state) -> RecurrentStateCommit:
        """The flat state (SGLANG_DDTREE_HYBRID_STATE unset or flat): the commit over the stash
        the target's pools got (ddtree_gdn_tree.install_flat_state, from the release's patch set)."""
        verify = flat_tree_verify()
        if verify is None:
            import sglang

            raise ValueError(
                f"DDTREE's flat recurrent state (SGLANG_DDTREE_HYBRID_STATE unset or flat) is wired "
                f"for sglang 0.5.14 to 0.5.23, not {getattr(sglang, '__version__', 'this release')}: "
                "set SGLANG_DDTREE_HYBRID_STATE=snapshot."
            )
        return RecurrentStateCommit.flat(spec_state, verify.stash, verify.max_path, verify.scratch)

    def init_cuda_graphs(self):
        with draft_width_scope(self):
            super().init_cuda_graphs()
        self.verify_widths = VerifyWidths(
            self.target_worker.model_runner,
            policy=self.budget_policy,
            block_size=self.block_size,
            build=self._build_verify_width,
        )
        if self.budget_policy.is_adaptive:
            self.adaptive_budget = self._adaptive_budget(torch.device(self.device))
        self._capture_stage_graphs()
        self._warm_round_kernels()

    def _adaptive_budget(self, device: torch.device):
        """The per-round policy; under TP it runs on rank 0 only and every rank verifies its
        choice (ddtree_adaptive_tp)."""
        choices, batch_sizes = self.budget_policy.choices, self.verify_widths.capture_bs
        policy = None
        if self._tp_rank_in_group == 0:
            policy = AdaptiveBudget(choices, batch_sizes, device=device)
            self.profiler.attach("adaptive", policy.snapshot)
        if self._vocab_parallel_group is None:
            return policy
        return RankZeroBudget(policy, choices, batch_sizes, device=device)

    def _build_verify_width(self, num_verify_tokens: int, batch_sizes: list):
        """A narrower verify's target attention backend and decode graphs (those batch sizes;
        eager without any), built as SGLang's adaptive EAGLE builds a step state."""
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import (
            DecodeCudaGraphRunner,
        )
        from sglang.srt.speculative.ddtree_compat import verify_width_scope

        model_runner = self.target_worker.model_runner
        with verify_width_scope(model_runner, num_verify_tokens, batch_sizes):
            init_new_workspace = model_runner.init_new_workspace
            try:
                attn_backend = model_runner._get_attention_backend(init_new_workspace=True)
            finally:
                model_runner.init_new_workspace = init_new_workspace
            if not batch_sizes:
                return attn_backend, model_runner.eager_runner
            graph_runner = DecodeCudaGraphRunner(
                model_runner,
                attn_backend=attn_backend,
                speculative_num_draft_tokens=num_verify_tokens,
            )
        if getattr(self, "tp_rank", 0) == 0:
            logger.info(
                "DDTREE verify width %d captured for batch sizes %s",
                num_verify_tokens,
                graph_runner.capture_bs,
            )
        return attn_backend, graph_runner

    def _capture_stage_graphs(self) -> None:
        """Top-K + tree build, and the draft-KV commit, per captured batch size.

        Under TP the top-K + tree build is two graphs around the round's all-gather, and the
        commit stays eager (the draft model's TP layers are not captured here)."""
        model_runner = self.target_worker.model_runner
        device = torch.device(self.device)
        dtype = model_runner.model.lm_head.weight.dtype  # the target's hidden states, too
        if envs.SGLANG_DDTREE_TREE_GRAPH.get():
            logits_bytes = (self.block_size - 1) * self.vocab_size * (dtype.itemsize + 4)
            sizes = capture_batch_sizes(model_runner, logits_bytes, MAX_GRAPH_LOGITS_BYTES)
            if sizes is not None:
                hidden = (self.block_size - 1, int(model_runner.model_config.hidden_size))
                inputs = {"hidden": StaticInput(hidden, dtype)}
                if self._vocab_parallel_group is None:
                    self.tree_graphs = self._capture_stage(
                        self._build_drafts, sizes, inputs, device
                    )
                else:
                    self.tp_tree_graphs = self._capture_tp_tree(sizes, inputs, device)
        if self._vocab_parallel_group is not None:
            return
        fc = getattr(self.draft_model, "fc", None)
        if envs.SGLANG_DDTREE_COMMIT_GRAPH.get() and fc is not None:
            sizes = capture_batch_sizes(model_runner)
            if sizes is not None:
                width = self.accept_width
                inputs = {
                    "hidden": StaticInput((width, int(fc.in_features)), dtype),
                    "cache_loc": StaticInput((width,), torch.int64),
                    "positions": StaticInput((width,), torch.int64),
                    "commit_lens": StaticInput((), torch.int32, pad=0),  # padding writes nothing
                }
                self.commit_graphs = self._capture_stage(
                    self._eager_commit_draft_kv, sizes, inputs, device
                )

    def _warm_round_kernels(self) -> None:
        """Compile what a round launches outside the graphs for every shape the policy can pick,
        so that no shape's first round compiles it mid-serving (ddtree_warmup)."""
        start = time.perf_counter()
        device = torch.device(self.device)
        try:
            warm_round_kernels(
                self.tree_stage,
                self.budget_policy,
                block_size=int(self.block_size),
                vocab_size=self.vocab_size,
                logits_dtype=self.target_worker.model_runner.model.lm_head.weight.dtype,
                root_dtype=root_tokens(DFlashDraftInputV2.create_idle_input(device)).dtype,
                mask_token_id=int(self._mask_token_id),
                req_to_token=self.model_runner.req_to_token_pool.req_to_token,
                tail_only=self.tail_mask,
                recurrent_state=self.recurrent_state,
                move_accepted_kv=self.move_accepted_kv,
            )
        except Exception as e:  # as a failed capture: each shape's first round compiles instead
            logger.warning("DDTREE round kernels not warmed, first rounds compile them: %s", e)
            return
        if getattr(self, "tp_rank", 0) == 0:
            logger.info(
                "DDTREE round kernels warmed for shapes %s in %.1f s",
                "/".join(str(shape) for _, shape in self.budget_policy.rounds()),
                time.perf_counter() - start,
            )

    def _capture_tp_tree(self, sizes, inputs, device):
        """Under TP: this rank's top-K pieces, and the combine + tree build, as graphs; the
        all-gather between them runs eagerly each round."""
        width = 1 + 2 * self._tp_pack_k
        pieces = {"every": StaticInput((self.block_size - 1, self._tp_world, width), torch.float64)}
        local = self._capture_stage(self._tp_topk_pieces, sizes, inputs, device)
        combine = self._capture_stage(self._tp_scheduled_combine, sizes, pieces, device)
        return (local, combine) if local is not None and combine is not None else None

    def _capture_stage(self, stage, batch_sizes, inputs, device) -> Optional[DDTreeStageCudaGraphs]:
        graphs = DDTreeStageCudaGraphs(
            stage, batch_sizes=batch_sizes, inputs=inputs, device=device
        )
        try:
            with torch.inference_mode():
                graphs.capture_all()
        except Exception as e:  # as DFlash does for its kernels: slower, not broken
            logger.warning("DDTREE %s not captured, it runs eagerly: %s", stage.__name__, e)
            return None
        if getattr(self, "tp_rank", 0) == 0:
            logger.info(
                "DDTREE %s captured for batch sizes %s", stage.__name__, graphs.batch_sizes
            )
        return graphs

    def _maybe_build_draft_sampler(self):
        # DFlash (0.5.15+) may fold its greedy draft head into the draft CUDA graph;
        # DDTREE reads the draft hidden states instead, so it is never built.
        return None

    def forward_batch_generation(
        self, model_worker_batch: ScheduleBatch, on_publish=None, **kwargs
    ) -> GenerationBatchResult:
        batch = model_worker_batch
        if (
            batch.forward_mode.is_extend()
            or batch.is_extend_in_batch
            or batch.forward_mode.is_idle()
            or batch.spec_info is None
        ):
            if self.adaptive_budget is not None:
                self.adaptive_budget.interrupt()
            return super().forward_batch_generation(batch, on_publish=on_publish, **kwargs)
        with self.round_sync_guard:
            # None while DDTREE's grammar batches run unoverlapped (ddtree_contract)
            return self._tree_round(batch, on_publish, kwargs.get("grammar_barrier"))

    def _tree_round(
        self, batch: ScheduleBatch, on_publish, grammar_barrier
    ) -> GenerationBatchResult:
        draft_input = batch.spec_info
        if not isinstance(draft_input, DFlashDraftInputV2):
            raise RuntimeError("DDTREE expected DFlashDraftInputV2 state on the running batch.")
        # seq_lens may come from the previous overlap iteration on another stream.
        batch.seq_lens.record_stream(torch.get_device_module(self.device).current_stream())

        bs = len(batch.seq_lens)
        prefix_lens = batch.seq_lens
        adaptive = self.adaptive_budget
        if adaptive is None:
            width = self.verify_widths.width_for(bs)
        else:
            shape = adaptive.begin_round(bs, grammar_requests=grammar_requests(batch))
            width = self.verify_widths.by_shape[shape]
        n = width.num_verify_tokens
        seq_lens_cpu, seq_lens_sum = planning_seq_lens(batch, draft_input, n)
        profiler = self.profiler
        with profiler.stage("draft"):
            # KV slots of the verify block [bs, N]; the draft block uses the first block_size.
            block_ids, block_positions, cache_loc_2d = prepare_draft_block(
                root_tokens(draft_input),
                prefix_lens,
                batch.req_pool_indices,
                self.model_runner.req_to_token_pool.req_to_token,
                mask_token_id=int(self._mask_token_id),
                block_size=int(self.block_size),
                num_verify_tokens=n,
            )
            window = open_window(self, batch, draft_input, cache_loc_2d)
            draft_hidden = self._draft(
                batch, block_ids, block_positions, cache_loc_2d, seq_lens_cpu, seq_lens_sum, window
            )
        with profiler.stage("topk"):
            drafts = self._draft_trees(draft_hidden[:, 1:, :])
            tree = drafts.verified(width.shape)
        with profiler.stage("tree"):
            verify_tensors, custom_mask = self.tree_stage.write_verify_inputs(
                tree,
                root_tokens(draft_input),
                prefix_lens,
                n,
                self.block_size - 1,  # deepest node
                n * (seq_lens_sum + bs * n),  # FULL mask capacity from host-side length bounds
                tail_only=self.tail_mask,
            )
            verify_input = DDTreeVerifyInput.from_tree(
                buffers=verify_tensors,
                custom_mask=custom_mask,
                max_accept_width=self.accept_width,
                **verify_input_extras(window),
            )
            grammar = grammar_tree(batch, verify_input)
        with profiler.stage("verify"):
            with self.verify_widths.verifying(width):
                logits_output, can_run_cuda_graph = self._verify(
                    batch, verify_input, cache_loc_2d, seq_lens_cpu, seq_lens_sum
                )
        with profiler.stage("accept"):
            mask = grammar_mask(batch, grammar, logits_output, grammar_barrier)
            masked = {} if mask is None else {"grammar_mask": mask}  # 0.5.17+ only
            with sampling_filters(batch.sampling_info, verify_input.draft_token_num):
                predict, accept_lens, accept_index = eagle_sample(
                    verify_input, batch, logits_output, **masked
                )
            output_logprobs(batch, logits_output, predict, accept_index)
            accepted = accepted_paths(
                predict, accept_index, accept_lens, prefix_lens, cache_loc_2d
            )
            new_seq_lens = accepted.new_seq_lens
            if self.recurrent_state is not None:
                self._commit_recurrent_state(batch, accept_index, accept_lens, prefix_lens, n)
        if on_publish is not None:
            on_publish(new_seq_lens)

        with profiler.stage("commit"):
            self._commit(
                batch,
                block_positions=block_positions,
                logits_output=logits_output,
                accepted=accepted,
                accept_lens=accept_lens,
                cache_loc_2d=cache_loc_2d,
                window=window,
            )
            logits_output.hidden_states = None  # no D2H of aux features under overlap
            next_input = next_draft_input(
                self, bonus=accepted.bonus, new_seq_lens=new_seq_lens, draft_input=draft_input
            )
        if adaptive is not None:
            chain = drafts.chain
            adaptive.end_round(
                drafts.tree.log_scores, accept_lens, None if chain is None else chain.log_scores
            )
        profiler.round_done(bs, cuda_graph=can_run_cuda_graph, budget=width.shape)
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=accepted.tokens.reshape(-1),
            accept_lens=accept_lens,
            can_run_cuda_graph=can_run_cuda_graph,
            next_draft_input=next_input,
            speculative_num_draft_tokens=self.accept_width,  # stride of next_token_ids
            new_seq_lens=new_seq_lens,
        )

    def _draft(
        self, batch, block_ids, positions, cache_loc_2d, seq_lens_cpu, seq_lens_sum, window
    ):
        """DFlash's draft pass: block [bonus, MASK...] at positions prefix..prefix+L."""
        bs = len(batch.seq_lens)
        block_size = int(self.block_size)
        embed = self.target_worker.model_runner.model.get_input_embeddings()
        input_embeds = embed(block_ids)
        forward_batch = draft_forward_batch(
            self,
            window,
            batch,
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens,
            out_cache_loc=cache_loc_2d[:, :block_size].reshape(-1),
            seq_lens_sum=seq_lens_sum,
            seq_lens_cpu=seq_lens_cpu,
            positions=positions.reshape(-1),
            input_embeds=input_embeds.view(-1, input_embeds.shape[-1]),
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        with torch.inference_mode(), draft_forward_context(self):
            out = self.draft_model_runner.forward(forward_batch).logits_output
        if out.hidden_states is None:
            raise RuntimeError("DDTREE draft model returned no hidden states.")
        return out.hidden_states.view(bs, block_size, -1)

    def _draft_trees(self, draft_hidden: torch.Tensor) -> DDTreeDrafts:
        """The round's trees, as the budget policy asks at its batch size, from the hidden
        states of draft slots 1..L, [bs, L, H]."""
        if self._vocab_parallel_group is not None:
            return self._tp_draft_trees(draft_hidden)
        bs = int(draft_hidden.shape[0])
        graphs = self.tree_graphs
        if graphs is None or not graphs.can_run(bs):
            return self._build_drafts(draft_hidden)
        graphs.inputs_for(bs)["hidden"].copy_(draft_hidden)
        return graphs.replay(bs).first_rows(bs)

    def _tp_draft_trees(self, draft_hidden: torch.Tensor) -> DDTreeDrafts:
        bs = int(draft_hidden.shape[0])
        graphs = self.tp_tree_graphs
        if graphs is None or not graphs[0].can_run(bs):
            return self._build_drafts(draft_hidden)
        local, combine = graphs
        local.inputs_for(bs)["hidden"].copy_(draft_hidden)
        every = self._gather_topk_pieces(local.replay(bs)[:bs])
        combine.inputs_for(bs)["every"].copy_(every)
        return combine.replay(bs).first_rows(bs)

    def _gather_topk_pieces(self, packed: torch.Tensor) -> torch.Tensor:
        """The round's all-gather; with adaptive budgets rank 0's choice rides on it."""
        shared = self.adaptive_budget
        if shared is None:
            return gather_topk_pieces(packed, self._vocab_parallel_group)
        every, tails = gather_topk_pieces_with_tail(
            packed, shared.tail(), self._vocab_parallel_group
        )
        shared.received(tails)
        return every

    def _tp_topk_pieces(self, hidden: torch.Tensor) -> torch.Tensor:
        lm_head = self.target_worker.model_runner.model.lm_head
        return lm_head_topk_pieces(lm_head, hidden, k=self._tp_pack_k)

    def _tp_scheduled_combine(self, every: torch.Tensor) -> DDTreeDrafts:
        """Under TP: combine + tree build, captured per graph batch size with its trees."""
        stage = self.verify_widths.drafts_for(int(every.shape[0]))
        topk = combine_topk_pieces(every, stage.top_k(self.vocab_size))
        return self.tree_stage.build_drafts(topk, stage)

    def _build_drafts(self, hidden: torch.Tensor) -> DDTreeDrafts:
        """The tree stage with the trees of the graph batch size ``hidden``'s pads to: run
        eagerly, or captured per graph batch size."""
        stage = self.verify_widths.drafts_for(int(hidden.shape[0]))
        topk = self._draft_topk(hidden, stage.top_k(self.vocab_size))
        return self.tree_stage.build_drafts(topk, stage)

    def _draft_topk(self, draft_hidden: torch.Tensor, k: int) -> DDTreeDraftTopK:
        """Top-K of the target lm_head over the draft slots' hidden states [bs, L, H]."""
        if self._vocab_parallel_group is not None:
            return combine_topk_pieces(
                self._gather_topk_pieces(self._tp_topk_pieces(draft_hidden)), k
            )
        lm_head = self.target_worker.model_runner.model.lm_head
        weight = lm_head.weight[: self.vocab_size]  # drop vocab padding rows
        return self.tree_stage.draft_topk(draft_logits(draft_hidden, weight), k)

    def _verify(self, batch, verify_input, cache_loc_2d, seq_lens_cpu, seq_lens_sum):
        batch.out_cache_loc = cache_loc_2d.reshape(-1)
        saved = batch.seq_lens_cpu, batch.seq_lens_sum
        batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens_cpu, seq_lens_sum
        try:
            verify_forward_batch, _ = verify_input.prepare_for_verify(
                batch, self.target_worker
            )
        finally:
            batch.seq_lens_cpu, batch.seq_lens_sum = saved
        target_out = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )
        finish_verify_logits(self, target_out.logits_output)
        return target_out.logits_output, target_out.can_run_cuda_graph

    def _commit(
        self,
        batch,
        *,
        block_positions: torch.Tensor,
        logits_output,
        accepted: DDTreeAccepted,
        accept_lens: torch.Tensor,
        cache_loc_2d: torch.Tensor,
        window,
    ) -> None:
        """Accepted path -> committed slots prefix..prefix+accept_len, in both pools.

        Target: copy the accepted nodes' KV to the front of the verify block.
        Draft: project the accepted nodes' target features (root included) and
        write them as context KV at the same slots and positions prefix + r.
        """
        self.move_accepted_kv(accepted.kv_target, accepted.kv_source, self.accept_width)
        hidden = logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE verify requires target hidden states, but got None.")
        width = self.accept_width
        rows = accepted.node_index.reshape(-1)  # [bs * W] verify rows of the accepted nodes
        commit_loc_2d = draft_commit_loc(self, window, cache_loc_2d, width)
        positions = block_positions[:, :width]  # prefix + r, r < W <= block_size
        bs = int(commit_loc_2d.shape[0])
        graphs = self.commit_graphs
        if graphs is None or not graphs.can_run(bs):
            self._eager_commit_draft_kv(
                hidden=hidden[rows].view(bs, width, -1),
                cache_loc=commit_loc_2d,
                positions=positions,
                commit_lens=accept_lens,
            )
            return
        inputs = graphs.inputs_for(bs)
        torch.index_select(hidden, 0, rows, out=inputs["hidden"].view(bs * width, -1))
        inputs["cache_loc"].copy_(commit_loc_2d)
        inputs["positions"].copy_(positions)
        inputs["commit_lens"].copy_(accept_lens)
        graphs.replay(bs)

    def _commit_recurrent_state(self, batch, accept_index, accept_lens, prefix_lens, n) -> None:
        """Each request's recurrent state := its state after the accepted path (and the
        prefix-cache tracking slot's, where the round crossed a tracking boundary): in flat mode
        the path replayed from the stashed inputs, in snapshot mode the last accepted node's."""
        track_indices = getattr(batch, "mamba_track_indices", None)
        pool = self.target_worker.model_runner.req_to_token_pool
        self.recurrent_state.commit(
            pool.get_mamba_indices(batch.req_pool_indices),
            accept_index,
            accept_lens,
            n,
            prefix_lens,
            track_indices=track_indices,
            track_interval=mamba_track_interval(self, batch) if track_indices is not None else None,
        )

    def _eager_commit_draft_kv(self, hidden, cache_loc, positions, commit_lens) -> None:
        """DFlash's prefix-valid draft-KV writer over [bs, W] committed positions."""
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=hidden.reshape(-1, hidden.shape[-1]),
            cache_loc=cache_loc.reshape(-1),
            positions=positions.reshape(-1),
            cache_loc_2d=cache_loc,
            commit_lens=commit_lens,
        )

