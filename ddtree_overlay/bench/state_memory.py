"""What a hybrid (Gated-DeltaNet) target's verify keeps of the recurrent state per request, from
its config.json (`target_config.GatedDeltaNet`), in either of DDTREE's two modes.

``SGLANG_DDTREE_HYBRID_STATE`` (the payload's switch, ``ddtree_envs``; the engines inherit it
from the bench's environment) picks DDTREE's mode; DFLASH and NEXTN always keep snapshots.

- flat (``ddtree_gdn_tree``, the default): per verify node the conv window and a stash of the
  node's inputs (k [key heads, K] and v [value heads, V] in the model dtype, g and beta [value
  heads] fp32), every GDN layer; plus one layer's branch scratch per request, shared by all
  layers: min((width - 1) // 2, block - 1) slots (at least one) of value heads x V x K fp32.
- snapshot (SGLang's path): one recurrent-state snapshot per verify token
  (``intermediate_ssm_state_cache``: value heads x key dim x value dim in ``mamba_ssm_dtype``)
  and one conv window per verify token (``intermediate_conv_window``: conv channels x (kernel
  - 1) in the model dtype), every GDN layer.

So per request on each GPU: width x (bytes per node) [+ the scratch], divided by the TP size
(the heads split over the ranks); a pool holds the requests and one spare slot. The flat
formulas restate the payload's ``stash_bytes_per_node``, ``branch_slots`` and
``scratch_bytes_per_request`` (the bench runs without sglang or triton, so it cannot import
them); tests/payload/test_payload_ddtree_gdn_tree.py holds the two to each other. The payload
logs what it allocated (``RecurrentStateCommit.describe`` in ``ddtree_hybrid.py``); this is the
plan's view, before an engine starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ddtree_overlay.bench.arms import BLOCK_SIZE, DDTREE
from ddtree_overlay.bench.target_config import GatedDeltaNet
from ddtree_overlay.engine import errors

HYBRID_STATE_ENV = "SGLANG_DDTREE_HYBRID_STATE"
SNAPSHOT, FLAT = "snapshot", "flat"
HYBRID_STATES = (FLAT, SNAPSHOT)  # the payload's choices; unset means the first
DEFAULT_HYBRID_STATE = HYBRID_STATES[0]
SCRATCH_BYTES = 4  # the branch scratch is fp32 whatever the state dtype
GIB = 1 << 30
MIB = 1 << 20


def hybrid_state_from_env() -> str:
    """DDTREE's mode as the engines will read it from this process's environment. The payload
    refuses any other value (an empty one too), so the bench does before an engine starts."""
    raw = os.environ.get(HYBRID_STATE_ENV)
    if raw is None:
        return DEFAULT_HYBRID_STATE
    if raw not in HYBRID_STATES:
        raise errors.bad_setting(HYBRID_STATE_ENV, raw, " or ".join(f"`{s}`" for s in HYBRID_STATES))
    return raw


def state_of(algorithm: str, ddtree_state: str) -> str:
    """The mode an arm's verify keeps its state in: DDTREE's is the switch's, the others' snapshots."""
    return ddtree_state if algorithm == DDTREE else SNAPSHOT


def conv_window_bytes(gdn: GatedDeltaNet) -> int:
    """One verify node's conv window, every GDN layer (both modes keep one)."""
    return gdn.layers * gdn.conv_channels * (gdn.conv_kernel - 1) * gdn.activation_bytes


def recurrent_state_bytes(gdn: GatedDeltaNet) -> int:
    """One recurrent state (a request's, or a snapshot of one verify node), every GDN layer."""
    return gdn.layers * gdn.value_heads * gdn.key_dim * gdn.value_dim * gdn.state_bytes


def stash_bytes_per_node(gdn: GatedDeltaNet) -> int:
    """One flat verify node's stashed inputs, every GDN layer (k, v; g and beta fp32)."""
    per_layer = (gdn.key_heads * gdn.key_dim + gdn.value_heads * gdn.value_dim) * gdn.activation_bytes
    return gdn.layers * (per_layer + 2 * gdn.value_heads * 4)


def branch_slots(width: int, block_size: int) -> int:
    """The flat verify's scratch slots per request: the branch nodes open at once."""
    return max(1, min((width - 1) // 2, block_size - 1))


def scratch_bytes_per_request(gdn: GatedDeltaNet, width: int, block_size: int) -> int:
    """One request's branch scratch: one layer's states, one per slot, fp32."""
    return branch_slots(width, block_size) * gdn.value_heads * gdn.value_dim * gdn.key_dim * SCRATCH_BYTES


def node_bytes(gdn: GatedDeltaNet, state: str) -> int:
    """What one verify node keeps, every GDN layer, at TP = 1."""
    kept = recurrent_state_bytes(gdn) if state == SNAPSHOT else stash_bytes_per_node(gdn)
    return kept + conv_window_bytes(gdn)


def verify_state(
    gdn: GatedDeltaNet, state: str, *, verify_width: int, tp_size: int = 1, block_size: int = BLOCK_SIZE
) -> dict[str, Any]:
    """One request's verify state on each GPU in ``state`` mode at ``verify_width`` (the widest
    an engine verifies: its pools' stride): per node, the flat mode's scratch, the sum, and
    ``per_request_text`` saying it (``33 x 147 MiB = 4.7 GiB``, ``33 x 3.58 MiB + 45 MiB scratch = 163 MiB``)."""
    per_node = node_bytes(gdn, state) // tp_size
    scratch = scratch_bytes_per_request(gdn, verify_width, block_size) // tp_size if state == FLAT else 0
    entry = {
        "state": state,
        "verify_width": verify_width,
        "tp_size": tp_size,
        "per_node_bytes": per_node,
        "scratch_bytes": scratch,
        "per_request_bytes": verify_width * per_node + scratch,
    }
    plus = f" + {size_text(scratch)} scratch" if scratch else ""
    text = f"{verify_width} x {size_text(per_node)}{plus} = {size_text(entry['per_request_bytes'])}"
    return entry | {"per_request_text": text}


def memory_entry(
    gdn: GatedDeltaNet, state: str, *, verify_width: int, concurrency: int, tp_size: int = 1
) -> dict[str, Any]:
    """One arm's verify state on each GPU at one concurrency: per request (`verify_state`), for
    ``concurrency`` requests plus the pool's spare slot, and beside them the requests' own live
    states (one per request, more with the radix cache's extra slots); ``text`` says it in a
    line."""
    entry = verify_state(gdn, state, verify_width=verify_width, tp_size=tp_size)
    entry |= {
        "concurrency": concurrency,
        "total_bytes": (concurrency + 1) * entry["per_request_bytes"],
        "live_bytes": concurrency * (node_bytes(gdn, SNAPSHOT) // tp_size),
    }
    return entry | {"text": describe(entry)}


def size_text(nbytes: float) -> str:
    """``4.7 GiB``, ``147 MiB``, ``0.58 MiB``."""
    if nbytes >= GIB:
        return f"{nbytes / GIB:.1f} GiB"
    return f"{nbytes / MIB:.0f} MiB" if nbytes >= 10 * MIB else f"{nbytes / MIB:.2f} MiB"


def describe(entry: Mapping[str, Any]) -> str:
    """``flat: 33 x 3.58 MiB + 45 MiB scratch = 163 MiB per request, 2.7 GiB at concurrency 16
    (+ 2.3 GiB live)``."""
    return (
        f"{entry['state']}: {entry['per_request_text']} per request, "
        f"{size_text(entry['total_bytes'])} at concurrency {entry['concurrency']} "
        f"(+ {size_text(entry['live_bytes'])} live)"
    )
