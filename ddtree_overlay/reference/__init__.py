"""Offline reference decoder: target-only, DFlash and DDTree over a Qwen3 target + DFlash drafter,
and EAGLE-3's chain over a Qwen3 target + EAGLE-3 drafter.

Pure torch (+ safetensors, numpy, stdlib); importable without the rest of `ddtree_overlay`, so it
can run inside SGLang's env by path. Modules:
- `model`   Qwen3 target (KV cache, aux-hidden capture) and DFlash drafter; checkpoint I/O
- `eagle3`  EAGLE-3 drafter (serving and training-time-test forms); its checkpoint I/O
- `hybrid`  Qwen3.5 / Qwen3.6 hybrid target (GDN + gated attention) and its MTP head
- `hybrid_cache`  its cache: KV, conv windows, recurrent states; commits a verify's path
- `gdn`     the gated delta rule: over a tree one node at a time, and chunked (training)
- `tree`    DDTree best-first builder, ancestor mask, verification walk
- `decode`  generate_ar / generate_dflash / generate_ddtree / generate_eagle3
- `metrics` per-prompt and aggregate JSON
- `cli`     `python -m ddtree_overlay.reference --help`

Glossary (one meaning everywhere): node 0 = root = the token carried from the last verify
(bonus token); budget B = drafted nodes, root excluded; N = B + 1 verify tokens; nodes in heap-pop
order with parents[0] = -1 and parents[i] < i; position = committed length + depth; accept
length = accepted drafts + 1 (bonus included), like SGLang's spec_accept_length.
"""

from .decode import (
    DecodeResult,
    RoundTree,
    generate_ar,
    generate_ddtree,
    generate_dflash,
    generate_eagle3,
)
from .eagle3 import Eagle3Config, Eagle3Draft, load_eagle3_draft
from .hybrid import Qwen35Config, Qwen35Target, load_any_target, load_hybrid_target
from .model import DFlashConfig, DFlashDraft, Qwen3Config, Qwen3Target, load_draft, load_target
from .tree import Acceptance, DDTreeDraft, ancestor_mask, build_ddtree_tree, follow_verified_tree

__all__ = [
    "Acceptance",
    "DDTreeDraft",
    "DFlashConfig",
    "DFlashDraft",
    "DecodeResult",
    "Eagle3Config",
    "Eagle3Draft",
    "Qwen3Config",
    "Qwen3Target",
    "Qwen35Config",
    "Qwen35Target",
    "RoundTree",
    "ancestor_mask",
    "build_ddtree_tree",
    "follow_verified_tree",
    "generate_ar",
    "generate_ddtree",
    "generate_dflash",
    "generate_eagle3",
    "load_any_target",
    "load_draft",
    "load_eagle3_draft",
    "load_hybrid_target",
    "load_target",
]
