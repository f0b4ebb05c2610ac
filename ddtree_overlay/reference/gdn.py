"""The gated delta rule of Qwen3.5 / Qwen3.6 GDN layers in plain torch: one token at a time
over a tree of nodes, and the chunked (WY) form used for training.

What this file must agree with (read from the SGLang 0.5.14 wheel):
- `layers/attention/fla/fused_sigmoid_gating_recurrent.py` (decode and target verify):
  g = -exp(A_log) * softplus(a + dt_bias) (softplus threshold 20), beta = sigmoid(b);
  q, k are l2-normalised with x / sqrt(sum(x^2) + 1e-6), q is scaled by head_k_dim^-0.5; value
  head hv reads key head hv // (HV / H); per token, in fp32:
      h *= exp(g);  v -= h^T k;  v *= beta;  h += k v^T;  o = h^T q
  with h [K, V] per value head. A tree verify reloads each node's h from its parent's slot
  (`retrieve_parent_token`); node 0's parent is the committed state.
- `layers/attention/mamba/causal_conv1d_triton.py`: a depthwise causal conv of width W over
  the raw [q | k | v] projection, then SiLU; in a tree every node convolves over its ancestor
  chain, the W - 1 newest raw inputs before the root coming from the committed conv window.
- `layers/attention/fla/chunk.py`: the same recurrence computed chunk by chunk (prefill).

Axis letters: B batch, S new nodes, C conv channels, W conv width, H key heads, HV value heads,
K key head dim, V value head dim. `parents` [B, S] int64: parents[b, i] < i, -1 = committed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

L2NORM_EPS = 1e-6
SOFTPLUS_THRESHOLD = 20.0


def gates(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """a, b: [B, S, HV] -> g (log decay, <= 0), beta: [B, S, HV] fp32 (`fused_gdn_gating`)."""
    x = a.float() + dt_bias.float()
    g = -A_log.float().exp() * F.softplus(x, beta=1.0, threshold=SOFTPLUS_THRESHOLD)
    return g, b.float().sigmoid()


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)


def expand_heads(x: torch.Tensor, hv: int) -> torch.Tensor:
    """[..., H, K] -> [..., HV, K]: value head hv reads key head hv // (HV / H)."""
    return x.repeat_interleave(hv // x.shape[-2], dim=-2)


def chain_parents(batch: int, s: int, device: torch.device | str) -> torch.Tensor:
    """[B, S] parents of a chain: node i's parent is i - 1, node 0's the committed state."""
    return (torch.arange(s, device=device) - 1).expand(batch, s)


# ----------------------------------------------------------------------------------------------
# Causal conv1d


def conv_tree(
    raw: torch.Tensor, weight: torch.Tensor, window0: torch.Tensor, parents: torch.Tensor | None
) -> torch.Tensor:
    """Depthwise causal conv + SiLU, every node over its own ancestor chain.

    raw: [B, S, C] pre-conv inputs; weight: [C, W]; window0: [B, C, W-1] the committed raw
    inputs (oldest first); parents: [B, S] or None for a chain. Returns [B, S, C] in fp32."""
    bsz, s, _ = raw.shape
    w = weight.float()
    if parents is None:  # chain: one conv over [window0 | raw]
        seq = torch.cat([window0.float(), raw.float().transpose(1, 2)], dim=2)
        return F.silu(F.conv1d(seq, w.unsqueeze(1), groups=w.shape[0])).transpose(1, 2)
    rows = torch.arange(bsz, device=raw.device)
    windows = raw.new_empty(bsz, s, *window0.shape[1:], dtype=torch.float32)  # [B, S, C, W-1]
    out = torch.empty(bsz, s, w.shape[0], dtype=torch.float32, device=raw.device)
    for i in range(s):
        p = parents[:, i]
        before = torch.where(
            (p >= 0).view(bsz, 1, 1), windows[rows, p.clamp(min=0)], window0.float()
        )
        full = torch.cat([before, raw[:, i].float().unsqueeze(-1)], dim=-1)  # [B, C, W]
        out[:, i] = F.silu((full * w).sum(-1))
        windows[:, i] = full[..., 1:]
    return out


def conv_window_after(window0: torch.Tensor, raw_path: torch.Tensor) -> torch.Tensor:
    """The committed conv window after a root-first path. raw_path: [B, P, C] -> [B, C, W-1]."""
    seq = torch.cat([window0, raw_path.to(window0.dtype).transpose(1, 2)], dim=2)
    return seq[..., seq.shape[-1] - window0.shape[-1] :].contiguous()


# ----------------------------------------------------------------------------------------------
# Recurrence, one token at a time


def delta_step(
    h: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> torch.Tensor:
    """One token's state update. h: [B, HV, K, V] fp32; k: [B, HV, K] (l2-normalised);
    v: [B, HV, V]; g, beta: [B, HV]. Returns the new h (the kernel's order of operations)."""
    h = h * g.exp()[..., None, None]
    u = (v - torch.einsum("bhkv,bhk->bhv", h, k)) * beta[..., None]
    return h + k[..., :, None] * u[..., None, :]


def recurrent_tree(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state0: torch.Tensor,
    parents: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every node's output from its parent's state (the committed `state0` for parent -1).

    q, k: [B, S, HV, K] l2-normalised, q already scaled; v: [B, S, HV, V]; g, beta: [B, S, HV];
    state0: [B, HV, K, V] fp32; parents: [B, S] or None for a chain (then no per-node table is
    kept). Returns o [B, S, HV, V] fp32 and the state after the last node."""
    bsz, s = q.shape[:2]
    q, k, v = q.float(), k.float(), v.float()
    o = torch.empty(bsz, s, *v.shape[2:], dtype=torch.float32, device=q.device)
    h = state0.float()
    table = None if parents is None else state0.new_empty(bsz, s, *state0.shape[1:])
    rows = torch.arange(bsz, device=q.device)
    for i in range(s):
        if parents is not None:
            p = parents[:, i]
            h = torch.where((p >= 0).view(bsz, 1, 1, 1), table[rows, p.clamp(min=0)], state0)
        h = delta_step(h, k[:, i], v[:, i], g[:, i], beta[:, i])
        o[:, i] = torch.einsum("bhkv,bhk->bhv", h, q[:, i])
        if table is not None:
            table[:, i] = h
    return o, h


def replay(
    k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state0: torch.Tensor
) -> torch.Tensor:
    """The state after a root-first path of stashed step inputs (shapes as `recurrent_tree`)."""
    h = state0.float()
    for i in range(k.shape[1]):
        h = delta_step(h, k[:, i].float(), v[:, i].float(), g[:, i], beta[:, i])
    return h


# ----------------------------------------------------------------------------------------------
# Chunked (WY) form, differentiable: training and long prefills


def chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state0: torch.Tensor | None = None,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chain recurrence of `recurrent_tree`, chunk by chunk. Within a chunk, with
    G_t = cumsum(g) and u_t = beta_t (v_t - k_t^T e^{g_t} h_{t-1}):
        (I + A) U = beta V - diag(beta e^G) K h0,  A[t, s] = beta_t e^{G_t - G_s} k_t.k_s (s < t)
        o_t = e^{G_t} q_t^T h0 + sum_{s<=t} e^{G_t - G_s} (q_t.k_s) u_s
        h_C = e^{G_C} h0 + sum_s e^{G_C - G_s} k_s u_s^T
    Shapes as `recurrent_tree` (state0 None = zeros). Returns o fp32 and the final state.
    Runs in fp32 also under autocast: the decays and the triangular solve need it."""
    with torch.autocast(q.device.type, enabled=False):
        return _chunked_fp32(q, k, v, g, beta, state0, chunk)


def _chunked_fp32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state0: torch.Tensor | None,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    bsz, s, hv, dk = k.shape
    dv = v.shape[-1]
    pad = (-s) % chunk
    qf, kf, vf = (F.pad(x.float(), (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    gf, bf = (F.pad(x.float(), (0, 0, 0, pad)) for x in (g, beta))
    n = (s + pad) // chunk

    def blocks(x: torch.Tensor) -> torch.Tensor:  # [B, S, HV, ...] -> [B, HV, N, chunk, ...]
        return x.view(bsz, n, chunk, hv, *x.shape[3:]).transpose(1, 3).transpose(2, 3)

    qc, kc, vc, gc, bc = blocks(qf), blocks(kf), blocks(vf), blocks(gf), blocks(bf)
    gcum = gc.cumsum(-1)  # [B, HV, N, chunk]
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    diff = (gcum[..., :, None] - gcum[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = diff.exp()  # [.., t, s] e^{G_t - G_s} for s <= t, else 0
    kk = kc @ kc.transpose(-1, -2)
    a = (bc[..., None] * decay * kk).tril(-1)
    eye = torch.eye(chunk, dtype=torch.float32, device=q.device)
    solve = lambda rhs: torch.linalg.solve_triangular(eye + a, rhs, upper=False)  # noqa: E731
    u_v = solve(vc * bc[..., None])  # T (beta V)
    u_h = solve(kc * (bc * gcum.exp())[..., None])  # T diag(beta e^G) K
    qk = (qc @ kc.transpose(-1, -2)) * decay
    h = (
        torch.zeros(bsz, hv, dk, dv, dtype=torch.float32, device=q.device)
        if state0 is None
        else state0.float()
    )
    outs = []
    for c in range(n):
        u = u_v[:, :, c] - u_h[:, :, c] @ h
        outs.append((qc[:, :, c] * gcum[:, :, c, :, None].exp()) @ h + qk[:, :, c] @ u)
        g_last = gcum[:, :, c, -1]
        k_tail = kc[:, :, c] * (g_last[..., None] - gcum[:, :, c]).exp()[..., None]
        h = h * g_last.exp()[..., None, None] + k_tail.transpose(-1, -2) @ u
    o = torch.stack(outs, dim=1).transpose(2, 3).reshape(bsz, n * chunk, hv, dv)
    return o[:, :s], h
