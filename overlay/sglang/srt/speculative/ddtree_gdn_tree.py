"""DDTREE's tree verify through Gated-DeltaNet layers without per-node state snapshots.

SGLang's tree verify (``fused_sigmoid_gating_recurrent`` with ``retrieve_parent_token``) writes
every verify node's recurrent state [HV, V, K] to memory so that its children can start from it,
and the commit copies the last accepted node's snapshot: at Qwen3.6-27B shape (48 GDN layers,
HV 48, K = V 128, fp32) 144 MiB per request per verify token. The "flat" recurrent state keeps
none of that:

- verify: one Triton program per (request, value head, V block) walks the request's tree in
  depth-first preorder (children in index order) from the committed state h0, its [K, BV]
  state block in registers, and writes each node's output at its visit. A node whose parent
  is the node just visited costs one delta-rule step and no state traffic; a later child of a
  branch node (>= 2 children) first reloads its parent's state from a per-layer scratch, which
  the branch node wrote when it was visited. N nodes cost N steps, one state store per branch
  node and one reload per later child (SGLang's kernel: N steps, N stores, N - 1 reloads). The
  committed slot is only read.
- walk: the preorder and each node's scratch slots (``tree_walk``: reload from, store to) come
  from ``retrieve_parent_token`` in one small kernel per forward, at its first GDN layer (the
  conv kernel fills the same parents in every layer); the other layers reuse it.
- scratch: a stack. A branch node takes the slot after its open branch ancestors' (those with
  children still to visit) and frees it when its last child starts, so a request needs as many
  slots as branch nodes are open at once: at most (N - 1) // 2 (each has two children) and at
  most block - 1 (they lie on one path, at depths up to block - 2). One slot per branch node
  would need up to (N - 1) // 2 slots, 128 at budget 256; the stack keeps 15 at block 16. One
  layer's worth, [rows, slots, HV, V, K] fp32, reused by every layer: at Qwen3.6-27B shape
  3 MiB a slot, 45 MiB per request from width 31 on (``scratch_bytes_per_request``).
- stash: the same kernel writes each node's per-token inputs - k [H, K] and v [HV, V] as the
  layer's activations hold them, g and beta [HV] in fp32 as the kernel computes them - per layer
  into a buffer of (request rows x widest verify width) nodes: about 0.5 % of a snapshot.
- commit: after acceptance one kernel replays the accepted path's stashed inputs from h0, per
  layer, and writes the request's committed slot (and the prefix-cache tracking slot at the
  tracking step). A node's verify state is the same steps from h0 along its path (the fp32
  scratch round-trip is exact), so the committed state is the state the accepted node's output
  was computed from.

The conv1d windows stay SGLang's per-node windows (see ``ddtree_hybrid.RecurrentStateCommit``).

Wiring (the patch sets of 0.5.14 to 0.5.23): the pool - and 0.5.15+'s unified pool - allocates no
SSM snapshots (``ssm_snapshot_tokens``), the hybrid memory split (the model runner's KV-cache
mixin; 0.5.16+ ``KVCacheConfigurator``) reserves a flat node's bytes and a request's scratch
(``verify_memory_tokens``), the target's model runner installs the stash, the scratch and this
verify right after its pools (``install_flat_state``, before any CUDA graph is captured), the
GDN backend's target verify calls ``flat_tree_verify()`` when one is installed, and the DDTREE
worker's commit replays (``ddtree_hybrid``). The speculative flags are read as the release
resolved them, through its ``ddtree_compat`` (0.5.19+: the spec bag, not the server args).

Switch: ``SGLANG_DDTREE_HYBRID_STATE=flat|snapshot`` (``ddtree_envs``). Flat is the default: on
an H200 (2026-12-02, 0.5.14) this verify's node outputs and committed state were bit-identical to
SGLang's snapshot kernel's, and at Qwen3.6-27B's shape (random weights, B = 32) a whole step took
5 - 9 % less at bs 1 / 4 and more concurrent requests fitted than with the snapshots.
``snapshot`` keeps SGLang's own tree path, to compare against
(``ddtree_overlay/bench/check_presets.py`` preset ``hybrid-flat``).

Layouts are SGLang 0.5.14's (0.5.15 to 0.5.23 pass the same, q, k, v possibly without the
leading 1; 0.5.21+ may pass them as strided views of the projection, heads still contiguous):
q, k [1, T, H, K], v [1, T, HV, V], a, b [T, HV] (token-major, heads packed), recurrent state
[slots, HV, V, K] with K contiguous, ``retrieve_parent_token`` [bs, N] as the conv kernel fills
it (node 0 is the root; parents before children).

One module past 500 lines: the torch oracle, the stash, the walk, the verify and commit kernels
and the wiring share one state layout (the stash's per-node inputs, the committed slot), and a
payload file is installed whole under its name in every release's manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from sglang.srt.speculative.ddtree_envs import envs


# The GDN kernels' numerics (fused_sigmoid_gating_recurrent.py, as target_verify calls it).
SOFTPLUS_THRESHOLD = 20.0
L2NORM_EPS = 1e-6
_BV = 32  # the replay commit's V block per program, as SGLang's recurrent kernel


def verify_v_block(bs: int, v_dim: int) -> int:
    """The depth-first verify's V block: one program per (request, V block, value head) walks
    the whole tree, so a narrow block buys parallelism. On an H200 at Qwen3.6-27B's shape, B = 32
    (2026-12-02, scripts/gpu/gdn_flat_state.py), ms per layer at bs 1 / 8 / 32: V block 32
    0.162 / 0.228 / 0.835, 16 0.149 / 0.187 / 0.591, 8 0.077 / 0.195 / 0.664 (SGLang's snapshot
    kernel 0.10-0.16 / 0.366 / 1.43)."""
    return min(triton.next_power_of_2(v_dim), 8 if bs <= 4 else 16)


# The verify's lookahead: 0 none, 1 the walk's next entry loaded during each step, 2 also the
# next step's inputs. On an H100 at Qwen3.6-27B's shape, B = 15 (2026-12-05,
# scripts/gpu/gdn_flat_state.py), ms per layer at bs 1 / 4 / 10 / 32: 0: 0.052 / 0.052 / 0.086 /
# 0.242, 1: 0.048 / 0.050 / 0.084 / 0.237, 2: 0.048 / 0.053 / 0.100 / 0.270 (it holds k and q
# twice, replicated across the block's columns: sm_90 76 -> 118 registers a thread at V block 8,
# 127 -> 247 at 16, triton 3.6.0). Depth 2 stays for a timing on the cards not yet measured.
LOOKAHEAD = 1


def max_path_len(block_size: int) -> int:
    """Root-to-node path length bound of a DDTREE tree: its deepest node is block_size - 1."""
    return triton.next_power_of_2(max(int(block_size), 1))


# ----------------------------------------------------------------------------------------------
# Plain torch: the kernels' specification (each node along its own path, replay)


def _gates_torch(a, b, A_log, dt_bias):
    x = a.float() + dt_bias.float()
    softplus = torch.where(x <= SOFTPLUS_THRESHOLD, torch.log(1.0 + torch.exp(x)), x)
    return -torch.exp(A_log.float()) * softplus, torch.sigmoid(b.float())


def _l2norm_torch(x):
    x = x.float()
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def _delta_step_torch(h, k, v, g, beta):
    """h [HV, V, K] fp32; k [HV, K] normalised; v [HV, V]; g, beta [HV]."""
    h = h * torch.exp(g)[:, None, None]
    u = (v.float() - (h * k[:, None, :]).sum(-1)) * beta[:, None]
    return h + u[:, :, None] * k[:, None, :]


def tree_verify_torch(q, k, v, a, b, A_log, dt_bias, state, slots, parents, scale):
    """Every verify node's output by walking its path from the committed state.

    q, k [bs*N, H, K]; v [bs*N, HV, V]; a, b [bs*N, HV]; state [slots, HV, V, K];
    slots [bs] (< 0: zero state); parents [bs, N] (entry 0 unused). Returns o [bs*N, HV, V]
    fp32."""
    bs, n = parents.shape
    hv = v.shape[1]
    group = hv // k.shape[1]
    kn = _l2norm_torch(k).repeat_interleave(group, dim=1)
    qn = _l2norm_torch(q).repeat_interleave(group, dim=1) * scale
    g, beta = _gates_torch(a, b, A_log, dt_bias)
    o = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for i in range(bs):
        slot = int(slots[i])
        h0 = state[slot].float() if slot >= 0 else state.new_zeros(state.shape[1:], dtype=torch.float32)
        for node in range(n):
            h = h0
            for t in path_to(parents[i], node):
                r = i * n + t
                h = _delta_step_torch(h, kn[r], v[r], g[r], beta[r])
            o[i * n + node] = (h * qn[i * n + node][:, None, :]).sum(-1)
    return o


def path_to(parents_row: torch.Tensor, node: int) -> list:
    """Root-first path of verify nodes from node 0 to ``node``."""
    path = [node]
    while path[-1] != 0:
        path.append(int(parents_row[path[-1]]))
    return path[::-1]


def replay_commit_torch(state, stash, layer, slot, path_rows, track_slot=-1, track_pos=-1):
    """State after replaying stash rows ``path_rows`` (root first) from ``state[slot]``; writes
    it to ``state[slot]``, and the state after ``track_pos`` steps to ``state[track_slot]``."""
    hv = stash.v.shape[2]
    h = state[slot].float()
    for pos, r in enumerate(path_rows):
        k = _l2norm_torch(stash.k[layer, r]).repeat_interleave(hv // stash.k.shape[2], dim=0)
        h = _delta_step_torch(h, k, stash.v[layer, r], stash.g[layer, r], stash.beta[layer, r])
        if pos == track_pos and track_slot >= 0:
            state[track_slot] = h.to(state.dtype)
    state[slot] = h.to(state.dtype)


# ----------------------------------------------------------------------------------------------
# The per-node input stash


@dataclass
class GDNInputStash:
    """Per-node inputs of the last tree verify, every GDN layer: row ``i * width + node`` holds
    batch request i's verify node. k, v keep the activations' dtype (the replay normalises k
    as the verify did), g and beta are the fp32 gates the verify applied."""

    k: torch.Tensor  # [L, rows * width, H, K]
    v: torch.Tensor  # [L, rows * width, HV, V]
    g: torch.Tensor  # [L, rows * width, HV] fp32
    beta: torch.Tensor  # [L, rows * width, HV] fp32
    width: int  # nodes per request row: the widest verify width

    @classmethod
    def allocate(cls, *, layers, rows, width, key_heads, value_heads, k_dim, v_dim, dtype, device):
        nodes = int(rows) * int(width)
        return cls(
            k=torch.zeros((layers, nodes, key_heads, k_dim), dtype=dtype, device=device),
            v=torch.zeros((layers, nodes, value_heads, v_dim), dtype=dtype, device=device),
            g=torch.zeros((layers, nodes, value_heads), dtype=torch.float32, device=device),
            beta=torch.zeros((layers, nodes, value_heads), dtype=torch.float32, device=device),
            width=int(width),
        )

    @classmethod
    def for_pool(cls, spec_state, activation_dtype: torch.dtype) -> "GDNInputStash":
        """A stash beside a recurrent-state pool: as many request rows and nodes per row as its
        per-node conv windows, key heads read off its conv channels [q | k | v]."""
        windows = spec_state.intermediate_conv_window[0]  # [L, spec slots, max width, C, W - 1]
        layers, rows, width, channels = (int(d) for d in windows.shape[:4])
        temporal = spec_state.temporal  # [L, slots, HV, V, K]
        value_heads, v_dim, k_dim = (int(d) for d in temporal.shape[2:])
        key_heads, rest = divmod(channels - value_heads * v_dim, 2 * k_dim)
        if rest or key_heads < 1:
            raise ValueError(
                f"DDTREE's flat recurrent state expects Gated-DeltaNet conv channels [q | k | v], "
                f"got {channels} channels for {value_heads} value heads of {v_dim} x {k_dim}."
            )
        return cls.allocate(
            layers=layers,
            rows=rows,
            width=width,
            key_heads=key_heads,
            value_heads=value_heads,
            k_dim=k_dim,
            v_dim=v_dim,
            dtype=activation_dtype,
            device=temporal.device,
        )

    @property
    def rows(self) -> int:
        return int(self.k.shape[1]) // self.width

    @property
    def bytes_per_node(self) -> int:
        """Bytes one verify node stashes, all layers."""
        tensors = (self.k, self.v, self.g, self.beta)
        return sum(t[:, 0].numel() * t.element_size() for t in tensors)


def stash_bytes_per_node(*, layers, key_heads, value_heads, k_dim, v_dim, activation_itemsize) -> int:
    """What ``GDNInputStash.bytes_per_node`` will be, before it is allocated."""
    per_layer = (key_heads * k_dim + value_heads * v_dim) * activation_itemsize + 2 * value_heads * 4
    return int(layers) * per_layer


# ----------------------------------------------------------------------------------------------
# The verify's branch-node scratch


def branch_slots(width: int, block_size: int) -> int:
    """Scratch slots a request's tree walk uses: the branch nodes open at once, at most
    (width - 1) // 2 (two children each) and block_size - 1 (one path's depths); at least one,
    so the scratch is never empty."""
    return max(1, min((int(width) - 1) // 2, int(block_size) - 1))


def allocate_branch_scratch(*, rows, width, block_size, value_heads, v_dim, k_dim, device) -> torch.Tensor:
    """[rows, branch_slots, HV, V, K] fp32: one layer's branch-node states, reused by every layer."""
    slots = branch_slots(width, block_size)
    return torch.empty((int(rows), slots, value_heads, v_dim, k_dim), dtype=torch.float32, device=device)


def scratch_bytes_per_request(*, width, block_size, value_heads, v_dim, k_dim) -> int:
    """What one request row of ``allocate_branch_scratch`` holds."""
    return branch_slots(width, block_size) * value_heads * v_dim * k_dim * 4


# ----------------------------------------------------------------------------------------------
# Triton


@triton.jit
def _gates(a, b, A_log, dt_bias, SOFTPLUS_THRESHOLD: tl.constexpr):
    x = a + dt_bias
    softplus = tl.where(x <= SOFTPLUS_THRESHOLD, tl.log(1.0 + tl.exp(x)), x)
    return -tl.exp(A_log) * softplus, 1.0 / (1.0 + tl.exp(-b))


@triton.jit
def _delta_rule_step(b_h, b_k, b_v, b_g, b_beta, L2NORM_EPS: tl.constexpr):
    """One gated delta-rule update of a [K, BV] fp32 state block by one token (k raw, as
    loaded): the verify's tree walk and the commit's replay run the same step, so the state
    they reach is the same bit for bit."""
    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + L2NORM_EPS)
    b_h *= tl.exp(b_g)
    b_v -= tl.sum(b_h * b_k[:, None], 0)
    b_v *= b_beta
    return b_h + b_k[:, None] * b_v[None, :]


@triton.jit
def _lane(vec, idx, i):
    """vec[i] of a register vector, as a scalar."""
    return tl.sum(tl.where(idx == i, vec, 0))


@triton.jit
def _parent(p_parents, i):
    """Node i's parent; an entry that is not an earlier node (a padded request's leftovers)
    reads as the root, so every row is a tree."""
    p = tl.load(p_parents + i)
    return tl.where((p >= 0) & (p < i), p, 0)


@triton.jit
def _tree_walk_kernel(
    parent_ptr,  # [bs, >= N] parent node per verify node, entry 0 unused
    walk_ptr,  # [bs, N, 3] out: preorder node, scratch slot to reload its parent from, slot to store it to
    n_tokens,
    slots,  # scratch slots per request
    stride_parent_req,
    BN: tl.constexpr,
):
    req = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BN)
    valid = idx < n_tokens
    p_parents = parent_ptr + req * stride_parent_req

    # Every node's first and last child (children are visited in index order).
    first = tl.full([BN], -1, tl.int32)
    last = tl.full([BN], -1, tl.int32)
    for i in range(1, n_tokens):
        here = idx == _parent(p_parents, i)
        first = tl.where(here & (first < 0), i, first)
        last = tl.where(here, i, last)

    # Subtree sizes, leaves up (a parent's index is below its children's).
    size = valid.to(tl.int32)
    for r in range(1, n_tokens):
        i = n_tokens - r
        size = tl.where(idx == _parent(p_parents, i), size + _lane(size, idx, i), size)

    # Root down: a node's preorder position is its parent's next free one; `opened` counts the
    # branch ancestors still open at its visit (the stack below it): a node's slot if it
    # branches, and its later children's reload slot. A last child's visit closes its parent.
    pos = tl.zeros([BN], tl.int32)
    free = tl.where(idx == 0, 1, 0)  # next preorder position for the node's next child
    opened = tl.zeros([BN], tl.int32)
    reload = tl.full([BN], -1, tl.int32)
    for i in range(1, n_tokens):
        p = _parent(p_parents, i)
        at = _lane(free, idx, p)
        opened_p = _lane(opened, idx, p)
        mine = idx == i
        pos = tl.where(mine, at, pos)
        free = tl.where(idx == p, at + _lane(size, idx, i), tl.where(mine, at + 1, free))
        opened = tl.where(mine, opened_p + (i != _lane(last, idx, p)).to(tl.int32), opened)
        later_child = i != _lane(first, idx, p)
        reload = tl.where(mine & later_child, tl.minimum(opened_p, slots - 1), reload)
    # A walk deeper than the slots allow (not a DDTREE tree) shares the last slot: wrong
    # outputs for that request, never a write outside its scratch.
    store = tl.where((first >= 0) & (first != last), tl.minimum(opened, slots - 1), -1)

    p_walk = walk_ptr + (req * n_tokens + pos) * 3
    tl.store(p_walk, idx, mask=valid)
    tl.store(p_walk + 1, reload, mask=valid)
    tl.store(p_walk + 2, store, mask=valid)


def tree_walk(parents: torch.Tensor, num_verify_tokens: int, slots: int) -> torch.Tensor:
    """Each request's depth-first walk of its tree: [bs, N, 3] int32, row j the j-th node in
    preorder, the scratch slot its parent's state reloads from (-1: the parent was the previous
    node) and the slot its own state goes to (-1: fewer than two children). From
    ``retrieve_parent_token`` [bs, >= N]; no host sync."""
    bs, n = int(parents.shape[0]), int(num_verify_tokens)
    walk = torch.empty((bs, n, 3), dtype=torch.int32, device=parents.device)
    if bs and n:
        _tree_walk_kernel[(bs,)](
            parents, walk, n, int(slots), parents.stride(0), BN=triton.next_power_of_2(n), num_warps=1
        )
    return walk


@triton.jit
def _walk_step(walk_ptr, base, j, HAS_PARENTS: tl.constexpr):
    """The walk's j-th step: (node, reload slot, store slot); without parents the chain's."""
    if HAS_PARENTS:
        p_walk = walk_ptr + (base + j) * 3
        return tl.load(p_walk), tl.load(p_walk + 1), tl.load(p_walk + 2)
    else:
        return j, j * 0 - 1, j * 0 - 1


@triton.jit
def _node_inputs(row, k_head, v_head, a_head, b_head, q_head, stride_k, stride_v, stride_a, stride_b, stride_q, o_k, o_v, mask_k, mask_v):
    """One verify row's inputs from the head's base pointers: k, v as stored, a, b, q (k, a, b
    and q in fp32)."""
    b_k = tl.load(k_head + row * stride_k + o_k, mask=mask_k, other=0).to(tl.float32)
    v_raw = tl.load(v_head + row * stride_v + o_v, mask=mask_v, other=0)
    b_a = tl.load(a_head + row * stride_a).to(tl.float32)
    b_b = tl.load(b_head + row * stride_b).to(tl.float32)
    b_q = tl.load(q_head + row * stride_q + o_k, mask=mask_k, other=0).to(tl.float32)
    return b_k, v_raw, b_a, b_b, b_q


@triton.jit
def _tree_verify_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    a_ptr,
    b_ptr,
    A_log_ptr,
    dt_bias_ptr,
    o_ptr,  # [T, HV, V]
    state_ptr,  # [slots, HV, V, K] committed states, read only
    slot_ptr,  # [bs] state slot per request, < 0: zero state
    walk_ptr,  # [bs, N, 3] tree_walk's (HAS_PARENTS)
    scratch_ptr,  # [scratch_rows, branch slots, HV, V, K] fp32 (HAS_PARENTS)
    stash_k_ptr,  # [rows * width, H, K] this layer's stash
    stash_v_ptr,  # [rows * width, HV, V]
    stash_g_ptr,  # [rows * width, HV]
    stash_beta_ptr,
    n_tokens,  # verify nodes per request this round
    scratch_rows,
    stash_rows,
    stash_width,
    stride_q_tok,
    stride_q_head,
    stride_k_tok,
    stride_k_head,
    stride_v_tok,
    stride_v_head,
    stride_a_tok,
    stride_b_tok,
    stride_state_slot,
    stride_scratch_req,
    stride_scratch_slot,
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_PARENTS: tl.constexpr,
    STASH: tl.constexpr,
    SOFTPLUS_THRESHOLD: tl.constexpr,
    L2NORM_EPS: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    req = tl.program_id(0).to(tl.int64)
    i_v = tl.program_id(1)
    i_hv = tl.program_id(2)
    i_h = i_hv // (HV // H)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]
    head = i_hv * V * K + o_v[None, :] * K + o_k[:, None]

    slot = tl.load(slot_ptr + req).to(tl.int64)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if slot >= 0:
        b_h += tl.load(state_ptr + slot * stride_state_slot + head, mask=mask_h, other=0).to(tl.float32)
    b_A_log = tl.load(A_log_ptr + i_hv).to(tl.float32)
    b_dt_bias = tl.load(dt_bias_ptr + i_hv).to(tl.float32)
    # Rows past the scratch can only be padding (slot < 0), whose outputs nobody reads.
    has_scratch = req < scratch_rows
    # Scalar base, the [BK, BV] offsets rebuilt at each use: a pointer block kept across the
    # loop would hold 2 x BK x BV / 32 registers per thread and spill the state.
    scratch_base = scratch_ptr + req * stride_scratch_req + i_hv * V * K

    base = req * n_tokens
    k_head, v_head = k_ptr + i_h * stride_k_head, v_ptr + i_hv * stride_v_head
    a_head, b_head, q_head = a_ptr + i_hv, b_ptr + i_hv, q_ptr + i_h * stride_q_head
    # PREFETCH steps of lookahead (LOOKAHEAD): 1 loads the walk's next entry during this
    # step, so a step's input loads need not wait for its entry; 2 also loads the next step's
    # inputs, so a step starts with them in registers (the last steps ask for the last node
    # again). The same arithmetic on the same values whatever the depth.
    first = tl.zeros([], dtype=tl.int32)
    if PREFETCH >= 1:
        nx_node, nx_reload, nx_store = _walk_step(walk_ptr, base, first, HAS_PARENTS)
    if PREFETCH == 2:
        nx_k, nx_v, nx_a, nx_b, nx_q = _node_inputs(
            base + nx_node, k_head, v_head, a_head, b_head, q_head,
            stride_k_tok, stride_v_tok, stride_a_tok, stride_b_tok, stride_q_tok, o_k, o_v, mask_k, mask_v,
        )
        cur_node, cur_reload, cur_store = nx_node, nx_reload, nx_store
        nx_node, nx_reload, nx_store = _walk_step(walk_ptr, base, tl.minimum(first + 1, n_tokens - 1), HAS_PARENTS)
    for j in range(n_tokens):  # preorder: every parent before its children
        if PREFETCH == 2:
            node, reload, store = cur_node, cur_reload, cur_store
            b_k, v_raw, b_a, b_b, b_q = nx_k, nx_v, nx_a, nx_b, nx_q
            nx_k, nx_v, nx_a, nx_b, nx_q = _node_inputs(
                base + nx_node, k_head, v_head, a_head, b_head, q_head,
                stride_k_tok, stride_v_tok, stride_a_tok, stride_b_tok, stride_q_tok, o_k, o_v, mask_k, mask_v,
            )
            cur_node, cur_reload, cur_store = nx_node, nx_reload, nx_store
            nx_node, nx_reload, nx_store = _walk_step(walk_ptr, base, tl.minimum(j + 2, n_tokens - 1), HAS_PARENTS)
        else:
            if PREFETCH == 1:
                node, reload, store = nx_node, nx_reload, nx_store
                nx_node, nx_reload, nx_store = _walk_step(walk_ptr, base, tl.minimum(j + 1, n_tokens - 1), HAS_PARENTS)
            else:
                node, reload, store = _walk_step(walk_ptr, base, j, HAS_PARENTS)
            # Every input of the node first: none waits behind the scratch store below.
            b_k, v_raw, b_a, b_b, b_q = _node_inputs(
                base + node, k_head, v_head, a_head, b_head, q_head,
                stride_k_tok, stride_v_tok, stride_a_tok, stride_b_tok, stride_q_tok, o_k, o_v, mask_k, mask_v,
            )
        row = base + node
        if HAS_PARENTS:
            if (reload >= 0) & has_scratch:
                # The store's own pointer block: each thread reads back what it wrote.
                p_reload = scratch_base + reload * stride_scratch_slot + o_v[None, :] * K + o_k[:, None]
                b_h = tl.load(p_reload, mask=mask_h, other=0)
        b_g, b_beta = _gates(b_a, b_b, b_A_log, b_dt_bias, SOFTPLUS_THRESHOLD)
        b_h = _delta_rule_step(b_h, b_k, v_raw.to(tl.float32), b_g, b_beta, L2NORM_EPS)
        if HAS_PARENTS:
            if (store >= 0) & has_scratch:
                p_store = scratch_base + store * stride_scratch_slot + o_v[None, :] * K + o_k[:, None]
                tl.store(p_store, b_h, mask=mask_h)

        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + L2NORM_EPS) * scale
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(o_ptr + (row * HV + i_hv) * V + o_v, b_o.to(o_ptr.dtype.element_ty), mask=mask_v)

        if STASH:
            if req < stash_rows:
                srow = req * stash_width + node
                tl.store(stash_v_ptr + (srow * HV + i_hv) * V + o_v, v_raw, mask=mask_v)
                if i_v == 0:
                    if i_hv % (HV // H) == 0:  # one writer per key head
                        p_k = k_head + row * stride_k_tok + o_k
                        tl.store(stash_k_ptr + (srow * H + i_h) * K + o_k, tl.load(p_k, mask=mask_k, other=0), mask=mask_k)
                    tl.store(stash_g_ptr + srow * HV + i_hv, b_g)
                    tl.store(stash_beta_ptr + srow * HV + i_hv, b_beta)


def tree_verify(
    *,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    ssm_states: torch.Tensor,
    cache_indices: torch.Tensor,
    num_verify_tokens: int,
    retrieve_parent_token: Optional[torch.Tensor],
    stash: Optional[GDNInputStash],
    layer: int,
    walk: Optional[torch.Tensor] = None,
    scratch: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    prefetch: Optional[int] = None,
) -> torch.Tensor:
    """One GDN layer's tree verify: o [1, T, HV, V] in q's dtype, as SGLang's target_verify.

    q, k [1, T, H, K] or [T, H, K]; v [1, T, HV, V]; a, b [T, HV]; T = bs * num_verify_tokens.
    ``retrieve_parent_token`` None verifies chains. ``stash`` None keeps no inputs. ``walk``
    (``tree_walk`` of these parents) and ``scratch`` (``allocate_branch_scratch``), both made
    here when None, are what a forward shares across its layers. ``prefetch`` is the walk's
    lookahead (``LOOKAHEAD`` when None; scripts/gpu/gdn_flat_state.py times each)."""
    h, kd = k.shape[-2], k.shape[-1]
    hv, vd = v.shape[-2], v.shape[-1]
    q3, k3, v3 = q.reshape(-1, h, kd), k.reshape(-1, h, kd), v.reshape(-1, hv, vd)
    a2, b2 = (x.reshape(-1, hv) for x in (a, b))
    a2, b2 = (x if x.stride(-1) == 1 else x.contiguous() for x in (a2, b2))
    if q3.stride(-1) != 1 or k3.stride(-1) != 1 or v3.stride(-1) != 1:
        raise RuntimeError("DDTREE's GDN tree verify expects head-contiguous q, k, v.")
    tokens, n = int(q3.shape[0]), int(num_verify_tokens)
    o = q.new_empty((1, tokens, hv, vd))
    if tokens == 0:
        return o
    bs = tokens // n
    parents = retrieve_parent_token
    if parents is not None:
        if scratch is None:
            scratch = allocate_branch_scratch(
                rows=bs, width=n, block_size=n, value_heads=hv, v_dim=vd, k_dim=kd, device=q.device
            )
        if walk is None:
            walk = tree_walk(parents, n, int(scratch.shape[1]))
        if walk.shape[0] < bs or walk.shape[1] != n:
            raise RuntimeError(
                f"DDTREE's GDN tree walk covers {tuple(walk.shape[:2])} nodes, not this verify's ({bs}, {n})."
            )
    layer_stash = None
    if stash is not None:
        layer_stash = (stash.k[layer], stash.v[layer], stash.g[layer], stash.beta[layer])
    bv = verify_v_block(bs, vd)
    depth = LOOKAHEAD if prefetch is None else int(prefetch)
    if depth not in (0, 1, 2):
        raise ValueError(f"DDTREE's GDN tree verify looks 0, 1 or 2 steps ahead, not {prefetch}.")
    grid = (bs, triton.cdiv(vd, bv), hv)
    _tree_verify_kernel[grid](
        q3,
        k3,
        v3,
        a2,
        b2,
        A_log,
        dt_bias,
        o,
        ssm_states,
        cache_indices,
        walk if parents is not None else cache_indices,
        scratch if parents is not None else o,
        *(layer_stash if layer_stash is not None else (o, o, o, o)),
        n,
        int(scratch.shape[0]) if parents is not None else 0,
        stash.rows if stash is not None else 0,
        stash.width if stash is not None else 0,
        q3.stride(0),
        q3.stride(1),
        k3.stride(0),
        k3.stride(1),
        v3.stride(0),
        v3.stride(1),
        a2.stride(0),
        b2.stride(0),
        ssm_states.stride(0),
        scratch.stride(0) if parents is not None else 0,
        scratch.stride(1) if parents is not None else 0,
        float(kd**-0.5 if scale is None else scale),
        H=h,
        HV=hv,
        K=kd,
        V=vd,
        BK=triton.next_power_of_2(kd),
        BV=bv,
        HAS_PARENTS=parents is not None,
        STASH=stash is not None,
        SOFTPLUS_THRESHOLD=SOFTPLUS_THRESHOLD,
        L2NORM_EPS=L2NORM_EPS,
        PREFETCH=depth,
        num_warps=1,
    )
    return o


@triton.jit
def tracking_position(accept_len, prefix_len, track_interval):
    """Accepted-path position whose state the prefix cache tracks: the one after which the
    sequence is as long as the last multiple of ``track_interval`` the round reached from
    ``prefix_len``; -1: the round crossed none. Lengths are >= 0, so C division is floor
    division."""
    post = prefix_len + accept_len
    boundary = post // track_interval * track_interval
    crossed = prefix_len // track_interval != post // track_interval
    return tl.where(crossed, boundary - prefix_len - 1, -1)


# not specialised on the round's verify width (adaptive widths compile once, none mid-serving)
# nor on the tracking interval (ddtree_warmup compiles it before a batch says which)
@triton.jit(do_not_specialize=["n_tokens", "track_interval"])
def _replay_commit_kernel(
    state_ptr,  # [L, slots, HV, V, K]
    stash_k_ptr,  # [L, rows * width, H, K]
    stash_v_ptr,  # [L, rows * width, HV, V]
    stash_g_ptr,  # [L, rows * width, HV]
    stash_beta_ptr,
    slot_ptr,  # [bs] committed slot, < 0: skip
    track_slot_ptr,  # [bs] prefix-cache tracking slot (HAS_TRACK)
    accept_index_ptr,  # [bs, W] accepted global verify rows, root first
    accept_len_ptr,  # [bs]
    prefix_len_ptr,  # [bs] committed length before the round (HAS_TRACK)
    track_interval,
    n_tokens,
    stash_width,
    stride_state_layer,
    stride_state_slot,
    stride_stash_k_layer,
    stride_stash_v_layer,
    stride_stash_gb_layer,
    stride_accept_req,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    MAX_PATH: tl.constexpr,
    HAS_TRACK: tl.constexpr,
    L2NORM_EPS: tl.constexpr,
):
    req = tl.program_id(0).to(tl.int64)
    i_v = tl.program_id(1)
    layer = (tl.program_id(2) // HV).to(tl.int64)
    i_hv = tl.program_id(2) % HV
    i_h = i_hv // (HV // H)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]
    head = i_hv * V * K + o_v[None, :] * K + o_k[:, None]

    slot = tl.load(slot_ptr + req).to(tl.int64)
    accept_len = tl.load(accept_len_ptr + req).to(tl.int64)
    length = tl.minimum(tl.where(slot >= 0, accept_len, 0), MAX_PATH)
    state_layer = state_ptr + layer * stride_state_layer
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if slot >= 0:
        b_h += tl.load(state_layer + slot * stride_state_slot + head, mask=mask_h, other=0).to(tl.float32)
    if HAS_TRACK:
        track_slot = tl.load(track_slot_ptr + req).to(tl.int64)
        prefix_len = tl.load(prefix_len_ptr + req).to(tl.int64)
        track_pos = tracking_position(accept_len, prefix_len, track_interval)
        track_pos = tl.where(track_slot >= 0, track_pos, -1)
    k_layer = stash_k_ptr + layer * stride_stash_k_layer
    v_layer = stash_v_ptr + layer * stride_stash_v_layer
    gb_offset = layer * stride_stash_gb_layer
    for pos in range(length):
        node = tl.load(accept_index_ptr + req * stride_accept_req + pos) - req * n_tokens
        srow = req * stash_width + node
        b_k = tl.load(k_layer + (srow * H + i_h) * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_v = tl.load(v_layer + (srow * HV + i_hv) * V + o_v, mask=mask_v, other=0).to(tl.float32)
        b_g = tl.load(stash_g_ptr + gb_offset + srow * HV + i_hv)
        b_beta = tl.load(stash_beta_ptr + gb_offset + srow * HV + i_hv)
        b_h = _delta_rule_step(b_h, b_k, b_v, b_g, b_beta, L2NORM_EPS)
        if HAS_TRACK:
            if pos == track_pos:
                p_track = state_layer + track_slot * stride_state_slot + head
                tl.store(p_track, b_h.to(p_track.dtype.element_ty), mask=mask_h)
    if length > 0:
        p_live = state_layer + slot * stride_state_slot + head
        tl.store(p_live, b_h.to(p_live.dtype.element_ty), mask=mask_h)


def replay_commit(
    *,
    ssm_states: torch.Tensor,
    stash: GDNInputStash,
    cache_indices: torch.Tensor,
    accept_index: torch.Tensor,
    accept_lens: torch.Tensor,
    num_verify_tokens: int,
    max_path: int,
    prefix_lens: Optional[torch.Tensor] = None,
    track_indices: Optional[torch.Tensor] = None,
    track_interval: Optional[int] = None,
) -> None:
    """Committed state of batch request i := its state after its accepted path, every layer.

    ssm_states [L, slots, HV, V, K]; accept_index [bs, W] the accepted global verify rows
    (root first, as eagle_sample returns them), accept_lens [bs]. With track_indices and
    track_interval, track_indices[i] takes the state at ``tracking_position`` (from
    prefix_lens [bs], the committed lengths before the round) where the round crossed a
    tracking boundary. No host sync."""
    bs = int(accept_lens.shape[0])
    if bs == 0:
        return
    layers, _, hv, vd, kd = ssm_states.shape
    h = int(stash.k.shape[2])
    has_track = track_indices is not None and track_interval is not None
    slots = cache_indices[:bs]
    bv = min(triton.next_power_of_2(vd), _BV)
    grid = (bs, triton.cdiv(vd, bv), layers * hv)
    _replay_commit_kernel[grid](
        ssm_states,
        stash.k,
        stash.v,
        stash.g,
        stash.beta,
        slots,
        track_indices if has_track else slots,
        accept_index,
        accept_lens,
        prefix_lens if has_track else accept_lens,
        int(track_interval) if has_track else 1,
        int(num_verify_tokens),
        stash.width,
        ssm_states.stride(0),
        ssm_states.stride(1),
        stash.k.stride(0),
        stash.v.stride(0),
        stash.g.stride(0),
        accept_index.stride(0),
        H=h,
        HV=hv,
        K=kd,
        V=vd,
        BK=triton.next_power_of_2(kd),
        BV=bv,
        MAX_PATH=int(max_path),
        HAS_TRACK=has_track,
        L2NORM_EPS=L2NORM_EPS,
        num_warps=1,
    )


# ----------------------------------------------------------------------------------------------
# Wiring: what the pool, the memory split and the GDN backend ask


def flat_state_requested(server_args) -> bool:
    """Whether these server args run DDTREE's flat GDN tree verify: DDTREE on a Gated-DeltaNet
    target (its hook set a tree top-k) and the switch at ``flat``. The flags are read as the
    release resolved them (``ddtree_compat.spec_arg``: 0.5.19+ the spec bag's)."""
    from sglang.srt.speculative.ddtree_compat import spec_arg

    if server_args is None or str(spec_arg(server_args, "speculative_algorithm")) != "DDTREE":
        return False
    if int(spec_arg(server_args, "speculative_eagle_topk") or 1) <= 1:
        return False
    return envs.SGLANG_DDTREE_HYBRID_STATE.get() == "flat"


def ssm_snapshot_tokens(speculative_num_draft_tokens: int) -> int:
    """Verify tokens the recurrent-state pool keeps SSM snapshots for: none in flat mode."""
    from sglang.srt.speculative.ddtree_compat import published_server_args

    try:
        server_args = published_server_args()
    except ValueError:  # a pool made outside a server (SGLang's own tests, tools): not DDTREE
        return speculative_num_draft_tokens
    return 0 if flat_state_requested(server_args) else speculative_num_draft_tokens


def verify_memory_tokens(
    server_args, cache_params, activation_dtype: torch.dtype, num_draft_tokens: Optional[int] = None
) -> float:
    """The verify-token count SGLang's hybrid memory split multiplies one request's recurrent
    state (conv + SSM, every layer) by to reserve verify memory: the verify width, or in flat
    mode what a request's flat nodes hold (conv windows and stashed inputs) and its branch
    scratch (one layer's), in units of that state. ``num_draft_tokens``: the width the split
    itself reads where that is not the server args' (0.5.17+: the spec bag's)."""
    from sglang.srt.speculative.ddtree_compat import spec_arg

    tokens = num_draft_tokens
    if tokens is None:
        tokens = spec_arg(server_args, "speculative_num_draft_tokens")
    if not flat_state_requested(server_args):
        return tokens
    value_heads, v_dim, k_dim = cache_params.shape.temporal
    conv_numel = sum(int(rows) * int(cols) for rows, cols in cache_params.shape.conv)
    conv_channels = int(cache_params.shape.conv[0][0])
    layers = len(cache_params.layers)
    per_node = conv_numel * cache_params.dtype.conv.itemsize * layers + stash_bytes_per_node(
        layers=layers,
        key_heads=(conv_channels - value_heads * v_dim) // (2 * k_dim),
        value_heads=value_heads,
        k_dim=k_dim,
        v_dim=v_dim,
        activation_itemsize=activation_dtype.itemsize,
    )
    scratch = scratch_bytes_per_request(
        width=tokens,
        block_size=spec_arg(server_args, "speculative_dflash_block_size"),
        value_heads=value_heads,
        v_dim=v_dim,
        k_dim=k_dim,
    )
    return (tokens * per_node + scratch) / cache_params.mamba_cache_per_req


class FlatTreeVerify:
    """The GDN backend's target_verify under DDTREE's flat recurrent state: ``tree_verify``
    with the stash and this layer's row of it, the shared branch scratch, and the forward's
    tree walk. The walk is built at the forward's first GDN layer, so a captured graph rebuilds
    it every replay; the parents' address (the same in every replay) only checks that the
    later layers verify the batch it was built for."""

    def __init__(self, stash: GDNInputStash, scratch: torch.Tensor, layer_index: dict, max_path: int):
        self.stash = stash
        self.scratch = scratch
        self.layer_index = dict(layer_index)  # model layer id -> GDN layer row of the pool
        self.first_layer = min(self.layer_index)  # the GDN layer a forward runs first
        self.max_path = int(max_path)
        self._walk = None  # (parents' address, tree_walk) of the forward under way

    def __call__(self, layer_id: int, **inputs) -> torch.Tensor:
        parents = inputs["retrieve_parent_token"]
        walk = None
        if parents is not None:
            if layer_id == self.first_layer:
                built = tree_walk(parents, inputs["num_verify_tokens"], int(self.scratch.shape[1]))
                self._walk = (parents.data_ptr(), built)
            address, walk = self._walk if self._walk is not None else (None, None)
            if address != parents.data_ptr():
                raise RuntimeError(
                    f"DDTREE's GDN tree walk was built for another batch than layer {layer_id}'s verify."
                )
        return tree_verify(
            **inputs, stash=self.stash, layer=self.layer_index[layer_id], walk=walk, scratch=self.scratch
        )


_flat_tree_verify: Optional[FlatTreeVerify] = None


def install_flat_state(model_runner) -> None:
    """After a model runner made its pools: under DDTREE's flat recurrent state, the target's
    input stash, branch scratch and the tree verify its GDN layers call from then on (one target
    per process). Before any CUDA graph is captured, so the captured verify is this one."""
    from sglang.srt.speculative.ddtree_compat import spec_arg

    global _flat_tree_verify
    server_args = model_runner.server_args
    pool = model_runner.req_to_token_pool
    if (
        model_runner.is_draft_worker
        or not flat_state_requested(server_args)
        or not hasattr(pool, "get_speculative_mamba2_params_all_layers")
    ):
        return
    stash = GDNInputStash.for_pool(pool.get_speculative_mamba2_params_all_layers(), model_runner.dtype)
    block_size = int(spec_arg(server_args, "speculative_dflash_block_size"))
    _, _, value_heads, v_dim = stash.v.shape
    scratch = allocate_branch_scratch(
        rows=stash.rows,
        width=stash.width,
        block_size=block_size,
        value_heads=int(value_heads),
        v_dim=int(v_dim),
        k_dim=int(stash.k.shape[3]),
        device=stash.v.device,
    )
    _flat_tree_verify = FlatTreeVerify(stash, scratch, pool.mamba_map, max_path_len(block_size))


def flat_tree_verify() -> Optional[FlatTreeVerify]:
    """What the GDN backend's target_verify calls instead of SGLang's kernel; None: SGLang's."""
    return _flat_tree_verify
