"""The DDTREE compat interface and its sglang 0.5.14 behaviour, the base of every family shim.

Where the DFlash v2 worker of one release family differs, the DDTree worker asks the
release's ``ddtree_compat`` (installed from ``overlay/shims/<family>/``). Each family shim
subclasses ``CompatShim``, overrides only the methods where its family differs from
0.5.14, and binds the module names the worker imports from one instance::

    globals().update(FamilyShim().module_names())

Why a class and not module functions star-imported from here: a base function that calls
another interface member (``api_contract_problems`` reads ``CONTRACT``) would, after a
star import, still see this module's globals, never the family's override; a method
looks its collaborators up on ``self``, so an override is seen wherever the base uses it,
and a family extends a member with ``super()``. The worker's ``ddtree_compat.X(...)``
calls and ``from ddtree_compat import X`` keep working on the bound methods.

0.5.14: the draft input carries ``verified_id`` (int32), planning lengths
(``planning_seq_lens_*`` / ``reserved_seq_lens_*``) and a ``verify_done`` event; server
args are plain attributes (resolution layers arrive in 0.5.19).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from typing import Dict

import torch

from sglang.srt.speculative.ddtree_contract import (
    DFLASH_WORKER,
    DFLASH_WORKER_ASSIGNED,
    GRAMMAR_TREE_CONTRACT,
    SHARED_CONTRACT,
    SPEC_LOGPROBS_CONTRACT,
    contract_problems,
    refused_requests_contract,
)
from sglang.srt.speculative.ddtree_sampling import (
    SGL_KERNEL_SITE,
    TOP_K_FIRST_WITH_MIN_P,
    SamplerBackend,
    law_problems,
    sampler_filters,
)

# Frames a scheduler's stack may already hold when the grammar bitmask walk starts (Python's
# default recursion limit: what SGLang's own trees have room for).
_STACK_IN_USE = 1000

# The names every ``ddtree_compat`` module binds: the worker, _handle_ddtree and the
# matrix's in-target checks read them.
INTERFACE = (
    "api_contract_problems",
    "root_tokens",
    "planning_seq_lens",
    "next_draft_input",
    "server_args_view",
    "declare",
    "attention_backends",
    "spec_arg",
    "published_server_args",
    "draft_width_during_init",
    "draft_width_scope",
    "verify_width_scope",
    "open_window",
    "draft_forward_batch",
    "draft_forward_context",
    "verify_input_extras",
    "finish_verify_logits",
    "mamba_track_interval",
    "draft_commit_loc",
    "grammar_tree",
    "grammar_mask",
    "output_logprobs",
    "sampling_filters",
)


class CompatShim:
    """sglang 0.5.14's answers; a family shim overrides where its release differs."""

    # Whether the release constrains a verify tree by grammar (0.5.17+; see grammar_tree).
    GRAMMAR_TREE = False
    # Whether the release returns a speculative round's logprobs (0.5.18+; see output_logprobs).
    SPEC_LOGPROBS = False
    # Where eagle_sample finds its top-k / top-p renormalisers, and how the sampler reads its
    # backend (see sampling_filters).
    RENORM_SITE = SGL_KERNEL_SITE
    SAMPLER_BACKEND = SamplerBackend("sglang.srt.server_args", "get_global_server_args", "sampling_backend")

    CONTRACT = {
        **SHARED_CONTRACT,
        DFLASH_WORKER: {
            "members": (
                "_append_target_hidden_to_draft_kv_by_loc",
                "_make_next_draft_input_decode",
                "init_attention_backends",
                "init_cuda_graphs",
                "forward_batch_generation",
            ),
            "assigned": DFLASH_WORKER_ASSIGNED,
        },
        DFLASH_WORKER + "._make_next_draft_input_decode": {
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
        "sglang.srt.server_args:ServerArgs": {"members": ("get_attention_backends",)},
        "sglang.srt.server_args:get_global_server_args": {},
    }

    def module_names(self) -> Dict[str, object]:
        """``CONTRACT``, ``GRAMMAR_TREE``, ``SPEC_LOGPROBS`` and the interface's functions,
        bound to this shim, by module name."""
        names: Dict[str, object] = {
            "CONTRACT": self.CONTRACT,
            "GRAMMAR_TREE": self.GRAMMAR_TREE,
            "SPEC_LOGPROBS": self.SPEC_LOGPROBS,
        }
        names.update((name, getattr(self, name)) for name in INTERFACE)
        return names

    def api_contract_problems(self):
        contract = {
            **self.CONTRACT,
            **(GRAMMAR_TREE_CONTRACT if self.GRAMMAR_TREE else {}),
            **(SPEC_LOGPROBS_CONTRACT if self.SPEC_LOGPROBS else {}),
            **refused_requests_contract(self.GRAMMAR_TREE, self.SPEC_LOGPROBS),
        }
        return contract_problems(contract) + law_problems(self.RENORM_SITE, self.SAMPLER_BACKEND)

    def root_tokens(self, draft_input) -> torch.Tensor:
        """The bonus token of the last verify: the tree's root and the draft block's slot 0."""
        return draft_input.verified_id

    def planning_seq_lens(self, batch, draft_input, width: int):
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

    def next_draft_input(self, worker, *, bonus: torch.Tensor, new_seq_lens: torch.Tensor, draft_input):
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

    # --- server args: plain attributes --------------------------------------------------------

    def server_args_view(self, server_args):
        """What ``_handle_ddtree`` reads the flags from while server args are being resolved."""
        return server_args

    def declare(self, server_args, **fields) -> None:
        """``_handle_ddtree``'s writes, in order."""
        for name, value in fields.items():
            setattr(server_args, name, value)

    def attention_backends(self, cfg):
        """(prefill, decode) attention backends."""
        return cfg.get_attention_backends()

    def spec_arg(self, server_args, name: str):
        """A resolved speculative flag, as the worker reads it at construction."""
        return getattr(server_args, name)

    def published_server_args(self):
        """The server args this process published, for code handed none (a pool's constructor);
        ValueError where none were published (a pool made outside a server)."""
        from sglang.srt.server_args import get_global_server_args

        return get_global_server_args()

    @contextmanager
    def draft_width_during_init(self, server_args, block_size: int):
        """The server_args DFlash's __init__ gets. It deep-copies them for the draft runner
        (0.5.14): let it copy the block size as speculative_num_draft_tokens, then restore
        the verify width."""
        num_verify_tokens = int(server_args.speculative_num_draft_tokens)
        server_args.speculative_num_draft_tokens = int(block_size)
        try:
            yield server_args
        finally:
            server_args.speculative_num_draft_tokens = num_verify_tokens

    def draft_width_scope(self, worker):
        """Draft-side initialisation after __init__: the draft runner has its own copy."""
        return nullcontext()

    @contextmanager
    def verify_width_scope(self, model_runner, num_verify_tokens: int, batch_sizes):
        """The target's server args while a narrower verify width's attention backend and decode
        graphs are built: the width the backend reads, and the batch sizes to capture (0.5.14's
        runner reads them from cuda_graph_config.decode.bs)."""
        server_args = model_runner.server_args
        decode = server_args.cuda_graph_config.decode
        saved = server_args.speculative_num_draft_tokens, decode.bs
        server_args.speculative_num_draft_tokens = int(num_verify_tokens)
        decode.bs = list(batch_sizes)
        try:
            yield
        finally:
            server_args.speculative_num_draft_tokens, decode.bs = saved

    # --- the decode round ---------------------------------------------------------------------

    def open_window(self, worker, batch, draft_input, cache_loc_2d):
        """The iteration's KV write window as the release tracks it (a KV-loc plan from 0.5.22)."""
        return None

    def draft_forward_batch(self, worker, window, batch, **fields):
        """The draft block's TARGET_VERIFY ForwardBatch, with what the release's DFlash adds."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        return ForwardBatch(**fields)

    def draft_forward_context(self, worker):
        return nullcontext()

    def verify_input_extras(self, window) -> dict:
        return {}

    def finish_verify_logits(self, worker, logits_output) -> None:
        """The target returns whole-vocabulary verify logits in this release: nothing to do."""

    def mamba_track_interval(self, worker, batch) -> int:
        """Tokens between the prefix-cache recurrent-state checkpoints of a hybrid target."""
        return int(worker.server_args.mamba_track_interval)

    def draft_commit_loc(self, worker, window, cache_loc_2d: torch.Tensor, width: int) -> torch.Tensor:
        """Draft-pool KV slots of the first ``width`` verify positions. Shape: [bs, width]."""
        return cache_loc_2d[:, :width].contiguous()

    # --- grammar-constrained requests -----------------------------------------------------------

    def grammar_tree(self, batch, verify_input):
        """The round's tree as the grammar bitmask walks it (None: no request has a grammar).

        From 0.5.17 (``GRAMMAR_TREE``) its links and tokens start their copy to the host here,
        before the verify launch, as EAGLE's do. Up to 0.5.16 DFlash's request check refuses
        grammar-constrained requests before they reach a batch; one that got through anyway
        stops the round rather than decode past its grammar."""
        if not batch.has_grammar:
            return None
        if not self.GRAMMAR_TREE:
            raise ValueError(
                "DDTREE cannot constrain its tree verify by grammar on this sglang release "
                "(0.5.17+ can): send grammar-constrained requests to another server."
            )
        from sglang.srt.speculative.spec_utils import GrammarTree

        links = verify_input.retrieve_next_token
        # SGLang's bitmask walk (spec_utils.traverse_tree) recurses once per child or sibling
        # hop, so up to a request's N nodes deep: a root with B > ~900 children (EAGLE's trees
        # never have them) would raise RecursionError in the scheduler.
        frames = int(links.shape[-1]) + _STACK_IN_USE
        if sys.getrecursionlimit() < frames:
            sys.setrecursionlimit(frames)
        return GrammarTree.from_device(
            links, verify_input.retrieve_next_sibling, verify_input.draft_token.view(links.shape)
        )

    def grammar_mask(self, batch, tree, logits_output, barrier):
        """The grammar bitmask over ``tree``'s nodes, one row per verify logits row (None: no
        grammar). ``barrier``, where the scheduler hands one (grammar batches overlapped:
        SGLANG_DDTREE_GRAMMAR_OVERLAP), first advances each grammar over the previous round's
        tokens. Under SGLANG_DDTREE_GRAMMAR_MASK=path a greedy batch's rows are filled along
        each request's accept path only, where its grammars write xgrammar's bitmask layout
        (ddtree_grammar_path); otherwise SGLang's walk fills every node the grammar allows."""
        if tree is None:
            return None
        from sglang.srt.speculative.ddtree_envs import envs
        from sglang.srt.speculative.ddtree_grammar_path import PathRows, path_grammar_mask, path_mask_applies

        sampling_info = batch.sampling_info
        path_rows = None
        if envs.SGLANG_DDTREE_GRAMMAR_MASK.get() == "path" and path_mask_applies(sampling_info):
            path_rows = PathRows.allocate(batch.reqs, sampling_info.vocab_size)
        if path_rows is not None:
            from sglang.srt.utils.async_probe import sanitize_nan_logits

            logits = logits_output.next_token_logits
            # eagle_sample's first step (SGLANG_SANITIZE_NAN_LOGITS), here before the path is
            # read: the accept's argmax sees no NaN, so neither may the walk that predicts it.
            sanitize_nan_logits(logits, "verify: target model logits")
            mask = path_grammar_mask(batch.reqs, tree, logits, path_rows, barrier)
            if mask is None:
                return None
            sampling_info.grammar_mask = None  # as SGLang's build: not the extend stage's mask
            return mask.to(logits.device)
        from sglang.srt.speculative.spec_utils import build_grammar_vocab_mask

        return build_grammar_vocab_mask(
            reqs=batch.reqs,
            tree=tree,
            sampling_info=sampling_info,
            device=logits_output.next_token_logits.device,
            barrier=barrier,
        )

    # --- output logprobs ------------------------------------------------------------------------

    def output_logprobs(self, batch, logits_output, predict, accept_index) -> None:
        """Each accepted token's logprob (and its top and chosen-id logprobs, where a request
        asks) into ``logits_output``, read at the verify row the token was accepted at
        (``accept_index``: [bs, accept width] flat rows, as eagle_sample returns them, the
        stride the scheduler reads). From 0.5.18 (``SPEC_LOGPROBS``) this is SGLang's own
        speculative logprob step, as EAGLE's tree worker calls it. Up to 0.5.17 DFlash's request
        check refuses return_logprob requests before they reach a batch; one that got through
        anyway stops the round."""
        if not batch.return_logprob:
            return
        if not self.SPEC_LOGPROBS:
            raise ValueError(
                "DDTREE cannot return logprobs on this sglang release (0.5.18+ can): "
                "send return_logprob requests to another server."
            )
        from sglang.srt.layers.logprob_processor import compute_spec_logprobs

        compute_spec_logprobs(batch, logits_output, predict, accept_index=accept_index)

    def sampling_filters(self, sampling_info, rows_per_request: int):
        """The scope of an ``eagle_sample`` call at T > 0 in which its target probabilities
        take the top-k / top-p / min-p law of SGLang's sampler (``ddtree_sampling``); under
        SGLANG_DDTREE_SAMPLING_FILTERS=eagle, eagle_sample's own."""
        from sglang.srt.speculative.ddtree_envs import envs

        if envs.SGLANG_DDTREE_SAMPLING_FILTERS.get() == "eagle":
            return nullcontext()
        top_k_first = (
            sampling_info.need_min_p_sampling
            and self.SAMPLER_BACKEND.read() in TOP_K_FIRST_WITH_MIN_P
        )
        return sampler_filters(self.RENORM_SITE, sampling_info, rows_per_request, top_k_first)
