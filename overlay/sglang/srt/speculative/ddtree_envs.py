"""Every ``SGLANG_DDTREE_*`` switch of the payload, with its default and meaning.

As SGLang declares its own switches (``sglang.srt.environ``): each is a class attribute of
``DDTreeEnvs``, read where it is used with ``envs.SGLANG_DDTREE_PROFILE.get()``, never through
``os.environ`` directly. Unlike SGLang's fields, a malformed value raises a one-line
ValueError naming the switch and what it takes, instead of warning and using the default: a
benchmark arm that misspells a switch must not quietly measure the default. The module imports
nothing of SGLang, so the payload's CPU tests load it alone.
"""

from __future__ import annotations

import os
from typing import Any, Tuple


class DDTreeEnvField:
    """One switch: its default when unset, and a parser that raises on a malformed value."""

    def __init__(self, default: Any, meaning: str):
        self.default = default
        self.meaning = meaning

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def get(self) -> Any:
        value = os.environ.get(self.name)
        return self.default if value is None else self.parse(value)

    def parse(self, value: str) -> Any:
        raise NotImplementedError


class DDTreeEnvStr(DDTreeEnvField):
    def parse(self, value: str) -> str:
        return value


class DDTreeEnvChoice(DDTreeEnvField):
    """One of a few words; the default is the first."""

    def __init__(self, choices: Tuple[str, ...], meaning: str):
        super().__init__(choices[0], meaning)
        self.choices = choices

    def parse(self, value: str) -> str:
        if value not in self.choices:
            words = " or ".join(repr(c) for c in self.choices)
            raise ValueError(f"{self.name} must be {words}, got {value!r}.")
        return value


class DDTreeEnvSwitch(DDTreeEnvField):
    """``0`` or ``1``, nothing else."""

    def parse(self, value: str) -> bool:
        if value not in ("0", "1"):
            raise ValueError(f"{self.name} must be 0 or 1, got {value!r}.")
        return value == "1"


class DDTreeEnvCount(DDTreeEnvField):
    """A whole number >= 1."""

    def parse(self, value: str) -> int:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{self.name} must be a whole number >= 1, got {value!r}.")
        return int(value)


class DDTreeEnvs:
    # fmt: off

    # What a round builds and verifies
    SGLANG_DDTREE_TREE_KERNEL = DDTreeEnvChoice(
        ("triton", "torch"),
        "who builds the tree, the verify tensors and the tree mask: Triton kernels "
        "(ddtree_kernels) or the equivalent torch ops (ddtree_utils)",
    )
    SGLANG_DDTREE_TREE_SHAPE = DDTreeEnvChoice(
        ("tree", "chain"),
        "tree: the budget flags' policy; chain: every round verifies the drafter's top-1 chain "
        "at the block's width (DFLASH's verify through DDTREE's machinery), whatever the flags",
    )

    SGLANG_DDTREE_VERIFY_ATTENTION = DDTreeEnvChoice(
        ("auto", "extend", "splitkv"),
        "the target verify's attention on the triton backend: SGLang's extend_attention_fwd "
        "with the FULL-layout tree mask, or splitkv (ddtree_verify_attention: split-KV over "
        "the prefix, a tail-only [bs, N, N] mask); auto: splitkv where it was measured faster "
        "and computes every layer, extend elsewhere (ddtree_attention_choice.auto_keeps_extend)",
    )
    SGLANG_DDTREE_DRAFT_ATTENTION = DDTreeEnvChoice(
        ("auto", "extend", "splitkv"),
        "the drafter's attention over its block on the triton backend: SGLang's "
        "extend_attention_fwd, or splitkv (ddtree_attention_choice: the verify's split-KV kernel, "
        "every block key visible); auto: splitkv where the drafter is on triton and the kernel "
        "computes its layers, extend elsewhere (ddtree_attention_choice.draft_keeps_extend); "
        "splitkv refuses a drafter it cannot run",
    )

    SGLANG_DDTREE_SAMPLING_FILTERS = DDTreeEnvChoice(
        ("sampler", "eagle"),
        "at T > 0 with top-k and top-p, or min-p: sampler: the tree samples the law of "
        "SGLang's sampler (the nucleus cut from the unfiltered distribution, min-p applied; "
        "ddtree_sampling); eagle: eagle_sample's own (top-k renormalised, the nucleus cut from "
        "what is left, min-p ignored), the sampling check's control arm",
    )

    # Gated-DeltaNet hybrid targets
    SGLANG_DDTREE_HYBRID_STATE = DDTreeEnvChoice(
        ("flat", "snapshot"),
        "how a tree verify keeps the GDN recurrent state: flat (no per-node snapshots: "
        "depth-first tree-walk verify from the committed state, replay commit; ddtree_gdn_tree), "
        "or SGLang's per-node snapshots",
    )
    SGLANG_DDTREE_SERVE_FEWER_REQUESTS = DDTreeEnvSwitch(
        False,
        "1: where the verify width's recurrent state leaves fewer concurrent requests than "
        "--max-running-requests asks for, warn and serve SGLang's cap instead of refusing to start",
    )

    # Grammar-constrained requests (0.5.17+)
    SGLANG_DDTREE_GRAMMAR_OVERLAP = DDTreeEnvSwitch(
        False,
        "1: batches holding a grammar request keep overlap scheduling, the round advancing "
        "each grammar through the scheduler's barrier before its bitmask, as DFLASH's does; "
        "unset, SGLang runs them synchronously",
    )

    SGLANG_DDTREE_GRAMMAR_MASK = DDTreeEnvChoice(
        ("tree", "path"),
        "tree: SGLang's bitmask walk fills a row for every tree node the grammar allows; path: "
        "a greedy batch's rows are filled along each request's accept path only, once the "
        "verify's logits exist (ddtree_grammar_path)",
    )

    # CUDA graphs of the round's fixed-shape stages
    SGLANG_DDTREE_TREE_GRAPH = DDTreeEnvSwitch(
        True, "replay the draft top-K and tree build from a CUDA graph per batch size; 0: eager"
    )
    SGLANG_DDTREE_COMMIT_GRAPH = DDTreeEnvSwitch(
        True, "replay the draft-KV commit from a CUDA graph per batch size; 0: eager"
    )

    # Measuring and debugging
    SGLANG_DDTREE_PROFILE = DDTreeEnvStr(
        "", "a .jsonl path: append per-stage GPU times of the decode rounds (ddtree_profile)"
    )
    SGLANG_DDTREE_PROFILE_EVERY = DDTreeEnvCount(
        1, "with the profile on, time one round in N"
    )
    SGLANG_DDTREE_SYNC_DEBUG = DDTreeEnvChoice(
        ("", "warn", "error"),
        "torch's CUDA sync debug mode inside each round: a host sync warns or raises",
    )

    # fmt: on


envs = DDTreeEnvs()


def declared() -> dict:
    """Every switch's name -> its field (for the docs' table and its test)."""
    return {
        name: field for name, field in vars(DDTreeEnvs).items() if isinstance(field, DDTreeEnvField)
    }
