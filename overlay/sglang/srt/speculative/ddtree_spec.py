"""DDTREE registration: the spec class, its server-args hook and the worker factory.

Imported at the end of ``spec_info.py`` so every process that resolves
``--speculative-algorithm`` names (the engine, schedulers, launch_server)
knows DDTREE. Keep module-level imports light: spec_info is still finishing
its own import when this runs.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from sglang.srt.speculative.ddtree_envs import envs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

DDTREE_DEFAULT_BUDGET = 15
DDTREE_ATTENTION_BACKENDS = ("triton", "flashinfer")


class DDTreeSpecAlgo(CustomSpecAlgo):
    """DDTREE answers as DFLASH wherever DFlash plumbing applies.

    ``is_dflash()`` is True on purpose: target aux-hidden capture at
    ``target_layer_ids``, draft KV pool sizing, the draft runner's
    TARGET_VERIFY graphs with input_embeds, direct-carry overlap state, the
    no-pre-claim ``kv_committed_len`` accounting and DFlash's request
    validation are all keyed on it.
    """

    def is_dflash(self) -> bool:
        return True

    def is_dflash_family(self) -> bool:
        # sglang 0.5.16+ keys DFlash's plumbing on the family predicate.
        return True

    def supports_target_verify_for_draft(self) -> bool:
        return True

    def has_draft_kv(self) -> bool:
        return True

    def need_topk(self) -> bool:
        return False

    def carries_draft_hidden_states(self) -> bool:
        return False

    def create_future_map(
        self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True, **kwargs
    ):
        # kwargs: what later releases add (0.5.16: needs_confidence_relay).
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, **kwargs)

    def supports_grammar_overlap(self) -> bool:
        # Off by default (a grammar batch then runs synchronously; GPU-checked neither way
        # yet). On, the scheduler hands the worker its grammar barrier, which the bitmask build
        # calls first (ddtree_compat.grammar_mask), as for DFLASH.
        from sglang.srt.speculative.ddtree_envs import envs

        return envs.SGLANG_DDTREE_GRAMMAR_OVERLAP.get()

    def get_platform_worker_cls(self):
        # sglang 0.5.23 asks for an out-of-tree platform's worker; DDTREE has none.
        return None

    def handle_server_args(self, server_args: "ServerArgs") -> None:
        _handle_ddtree(server_args)


def _handle_ddtree(server_args: "ServerArgs") -> None:
    """Validate DDTREE flags and set the verify width.

    Afterwards ``speculative_dflash_block_size`` is the drafter's block,
    ``speculative_num_draft_tokens`` the verify width N (tree nodes incl. the
    root, padded up to the block): the target runner, its CUDA graphs and
    DFlash's KV over-allocation all read the latter, and
    ``speculative_ddtree_budget`` the drafted nodes of the widest round. With a
    budget schedule or adaptive budgets these are the widest shape's
    (ddtree_budget; the chain's: the block); the worker adds narrower verify
    graphs. Reads and writes go through
    the release's ``ddtree_compat`` (plain attributes up to 0.5.18, declared
    resolutions from 0.5.19).
    """
    from sglang.srt.arg_groups.speculative_hook import _handle_dflash
    from sglang.srt.speculative.ddtree_budget import BudgetPolicy
    from sglang.srt.speculative.ddtree_compat import declare, server_args_view
    from sglang.srt.speculative.ddtree_envs import envs
    from sglang.srt.speculative.ddtree_hybrid import HYBRID_TREE_TOPK, gated_deltanet_layers

    cfg = server_args_view(server_args)
    policy = BudgetPolicy.from_flags(
        budget=cfg.speculative_ddtree_budget,
        # Only the releases whose patch set declares these flags have them.
        schedule=getattr(cfg, "speculative_ddtree_budget_schedule", None),
        adaptive=getattr(cfg, "speculative_ddtree_adaptive_budgets", None),
        default_budget=DDTREE_DEFAULT_BUDGET,
        tree_shape=envs.SGLANG_DDTREE_TREE_SHAPE.get(),
    )
    problem = next(_unsupported_ddtree_settings(cfg), None)
    if problem is not None:
        raise ValueError(problem)
    target_config = _target_hf_config(cfg)
    hybrid = gated_deltanet_layers(target_config) > 0

    if cfg.speculative_num_draft_tokens is not None:
        raise ValueError(
            "DDTREE sets the verify width from --speculative-ddtree-budget; "
            "do not pass --speculative-num-draft-tokens "
            f"(got {cfg.speculative_num_draft_tokens}). "
            "Use --speculative-dflash-block-size for the drafter's block."
        )
    hybrid_problem = next(_unsupported_hybrid_settings(cfg, target_config), None) if hybrid else None
    if hybrid_problem is not None:
        raise ValueError(hybrid_problem)

    _handle_dflash(server_args)  # resolves the block size into num_draft_tokens
    if hybrid:
        # After _handle_dflash, which forces a top-k of 1: the pools then keep a dense
        # per-node conv window and the linear-attention kernels follow the tree links.
        declare(server_args, speculative_eagle_topk=HYBRID_TREE_TOPK)
    block_size = int(cfg.speculative_num_draft_tokens)
    declare(
        server_args,
        speculative_ddtree_budget=policy.widest_nodes(block_size),
        speculative_dflash_block_size=block_size,
        speculative_num_draft_tokens=policy.widest_verify_tokens(block_size),
    )
    logger.info(
        "DDTREE budget=%s, block_size=%d, verify width=%d",
        policy.label,
        block_size,
        cfg.speculative_num_draft_tokens,
    )


def _unsupported_ddtree_settings(cfg):
    """Every reason DDTREE cannot run with these flags, in order of checking."""
    from sglang.srt.speculative.ddtree_compat import GRAMMAR_TREE, attention_backends

    prefill_backend, decode_backend = attention_backends(cfg)
    for name, backend in (("prefill", prefill_backend), ("decode", decode_backend)):
        if backend not in DDTREE_ATTENTION_BACKENDS:
            yield (
                "DDTREE requires --attention-backend triton or flashinfer, "
                f"got {backend} ({name}); its tree-mask path is not wired for DDTREE "
                "(on Hopper fa3 is the default: pass --attention-backend triton)."
            )
    try:
        # auto settles at each backend's start (ddtree_attention_choice: auto_keeps_extend,
        # draft_keeps_extend): only splitkv's server settings are checked here
        split_kv_asked = envs.SGLANG_DDTREE_VERIFY_ATTENTION.get() == "splitkv"
        draft_split_kv_asked = envs.SGLANG_DDTREE_DRAFT_ATTENTION.get() == "splitkv"
    except ValueError as bad_value:
        yield str(bad_value)
    else:
        if split_kv_asked:
            from sglang.srt.speculative.ddtree_attention_choice import (
                split_kv_server_conflict,
            )

            if conflict := split_kv_server_conflict(cfg):
                yield (
                    "SGLANG_DDTREE_VERIFY_ATTENTION=splitkv runs in the triton backend's own "
                    f"verify path, and {conflict}: pass --attention-backend triton without "
                    "that setting, or unset SGLANG_DDTREE_VERIFY_ATTENTION."
                )
        # The drafter's backend as DFlash's worker picks it: its own flag, else the target's.
        draft_backend = getattr(cfg, "speculative_draft_attention_backend", None) or prefill_backend
        if draft_split_kv_asked and draft_backend != "triton":
            yield (
                "SGLANG_DDTREE_DRAFT_ATTENTION=splitkv runs in the triton backend, and the "
                f"drafter's is {draft_backend}: pass --speculative-draft-attention-backend "
                "triton, or unset SGLANG_DDTREE_DRAFT_ATTENTION."
            )
    if _attention_dp(cfg):
        # DFlash allows it from 0.5.20 (NPU) / 0.5.23 (CUDA). DDTREE's top-K runs collectives
        # over the whole TP group each round, which attention-DP ranks (other batches, or
        # idle) would not match.
        yield "DDTREE does not support dp attention (--enable-dp-attention / --attn-dp-size)."
    if cfg.speculative_draft_window_size is not None:
        yield (
            "DDTREE does not support --speculative-draft-window-size yet, "
            f"got {cfg.speculative_draft_window_size}."
        )
    if cfg.speculative_use_rejection_sampling:
        yield (
            "DDTREE verifies by target-only tree sampling (lossless); "
            "--speculative-use-rejection-sampling is not supported."
        )
    thresholds = (
        cfg.speculative_accept_threshold_single,
        cfg.speculative_accept_threshold_acc,
    )
    if thresholds != (1.0, 1.0):
        yield (
            "DDTREE requires --speculative-accept-threshold-single/acc == 1.0 "
            f"to stay lossless, got {thresholds}."
        )
    if cfg.speculative_adaptive:
        yield "DDTREE does not support --speculative-adaptive."
    if cfg.enable_return_hidden_states:
        yield "DDTREE does not support --enable-return-hidden-states."
    if getattr(cfg, "enable_strict_thinking", False) and not GRAMMAR_TREE:
        # Strict thinking gives every request a reasoning grammar, which DFlash's request
        # check (json_schema / regex / ebnf / structural_tag) lets through to the round.
        yield (
            "DDTREE cannot apply --enable-strict-thinking's grammar to its tree verify on this "
            "sglang release (0.5.17+ can)."
        )
    if getattr(cfg, "elastic_ep_backend", None) is not None:
        # From 0.5.21 a scale event recaptures the target's decode graphs and replaces its
        # runner; the verify-width graphs DDTREE holds would go stale.
        yield "DDTREE does not support elastic EP (--elastic-ep-backend)."


def _target_hf_config(cfg):
    """The target's HF config, read as DFlash reads its drafter's."""
    from sglang.srt.utils.hf_transformers_utils import get_config

    return get_config(
        cfg.model_path,
        trust_remote_code=cfg.trust_remote_code,
        revision=cfg.revision,
        model_override_args=json.loads(cfg.json_model_override_args),
    )


def _unsupported_hybrid_settings(cfg, target_config):
    """Every reason DDTREE cannot verify a tree through a Gated-DeltaNet target's layers."""
    conv_width = int(getattr(target_config.get_text_config(), "linear_conv_kernel_dim", 4))
    if not 2 <= conv_width <= 4:
        # causal_conv1d_update walks tree ancestors for kernel widths 2 - 4 only.
        yield (
            "DDTREE verifies a tree through Gated-DeltaNet conv1d kernels of width 2 - 4, "
            f"got linear_conv_kernel_dim={conv_width}."
        )
    kernels = {
        flag: getattr(cfg, flag, None)
        for flag in (
            "linear_attn_backend",
            "linear_attn_decode_backend",
            "linear_attn_prefill_backend",
        )
    }
    for flag, backend in kernels.items():
        if backend == "flashinfer":
            # With a FlashInfer GDN kernel SGLang verifies through it, and it has no tree path.
            yield (
                "DDTREE on a Gated-DeltaNet target verifies through the Triton GDN kernel "
                f"(its tree path); --{flag.replace('_', '-')} flashinfer has none."
            )
    try:
        envs.SGLANG_DDTREE_HYBRID_STATE.get()  # read again by the pool and the worker
    except ValueError as bad_value:
        yield str(bad_value)
    # 0.5.16 spells the flag --enable-gdn-replayssm-spec; 0.5.17+ --enable-linear-replayssm-spec.
    for flag in ("enable_linear_replayssm_spec", "enable_gdn_replayssm_spec"):
        if getattr(cfg, flag, False):
            yield (
                f"DDTREE does not support --{flag.replace('_', '-')}: ReplaySSM verifies "
                "linear chains only."
            )


def _attention_dp(cfg) -> bool:
    # 0.5.22+ resolves --enable-dp-attention into attn_dp_size and leaves the flag false;
    # releases before have no attn_dp_size.
    return bool(cfg.enable_dp_attention) or int(getattr(cfg, "attn_dp_size", 1)) > 1


def _ddtree_worker_factory(server_args: "ServerArgs"):
    from sglang.srt.speculative.ddtree_worker_v2 import DDTreeWorkerV2

    return DDTreeWorkerV2


SpeculativeAlgorithm.register(
    "DDTREE", supports_overlap=True, spec_class=DDTreeSpecAlgo
)(_ddtree_worker_factory)
