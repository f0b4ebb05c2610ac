"""The hybrid target's cache: KV for the attention layers, conv window and recurrent state for
the GDN layers, and the per-node inputs of the last forward so a verify can be committed.

The decoders own the committed length, as with `model.KVCache`. A forward over S new nodes
leaves the state after its last node committed (right for a prefill, a decode step or a fully
accepted chain). After a verify, `compact(start, keep)` commits the accepted root-first path
`keep` instead: the KV of its nodes moves to slots start.., and each GDN layer's conv window and
recurrent state become the ones after keep[-1], replayed from the state before the verify with
the path's own stashed inputs (the numbers the verify computed for those nodes; SGLang keeps
per-node snapshots instead and copies one, `commit_mamba_states_after_verify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from . import gdn
from .model import KVCache

if TYPE_CHECKING:
    from .hybrid import Qwen35Config


@dataclass(frozen=True)
class Stash:
    """One GDN layer's view of the last forward. Shapes: [B, S, ...] per node."""

    window0: torch.Tensor  # [B, C, W-1] conv window before the forward
    state0: torch.Tensor  # [B, HV, K, V] fp32 recurrent state before the forward
    raw: torch.Tensor  # [B, S, C] pre-conv inputs
    k: torch.Tensor  # [B, S, HV, K]
    v: torch.Tensor  # [B, S, HV, V]
    g: torch.Tensor  # [B, S, HV] fp32
    beta: torch.Tensor  # [B, S, HV] fp32
    parents: torch.Tensor | None  # [B, S]; None = chain


class HybridCache:
    def __init__(self, cfg: Qwen35Config, *, batch: int, max_len: int, like: torch.Tensor) -> None:
        n_attn = sum(cfg.is_attention(i) for i in range(cfg.num_hidden_layers))
        n_gdn = cfg.num_hidden_layers - n_attn
        self.kv = KVCache(
            n_attn, batch, cfg.num_key_value_heads, max_len, cfg.head_dim, like.dtype, like.device
        )
        window = (batch, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1)
        state = (
            batch,
            cfg.linear_num_value_heads,
            cfg.linear_key_head_dim,
            cfg.linear_value_head_dim,
        )
        # conv windows hold raw projections (model dtype); states are fp32 (mamba_ssm_dtype)
        self.conv = [
            torch.zeros(window, dtype=like.dtype, device=like.device) for _ in range(n_gdn)
        ]
        self.ssm = [
            torch.zeros(state, dtype=torch.float32, device=like.device) for _ in range(n_gdn)
        ]
        self.stash: list[Stash | None] = [None] * n_gdn
        self.start: int | None = None  # cache_start of the last forward

    @classmethod
    def for_model(
        cls, cfg: Qwen35Config, like: torch.Tensor, *, batch: int, max_len: int
    ) -> HybridCache:
        return cls(cfg, batch=batch, max_len=max_len, like=like)

    def begin(self, start: int) -> None:
        self.start = start

    def record(
        self,
        slot: int,
        *,
        raw: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        parents: torch.Tensor | None,
        state: torch.Tensor,
    ) -> None:
        """A GDN layer's forward is done: stash its inputs, commit the state after its last node."""
        window0, state0 = self.conv[slot], self.ssm[slot]
        self.stash[slot] = Stash(window0, state0, raw, k, v, g, beta, parents)
        path = None if parents is None else ancestor_path(parents, raw.shape[1] - 1)
        self.conv[slot] = gdn.conv_window_after(window0, raw if path is None else raw[:, path])
        self.ssm[slot] = state

    def compact(self, start: int, keep: list[int]) -> None:
        """Commit the accepted root-first path `keep` of the forward made at `start`."""
        assert start == self.start, f"compact at {start}, last forward at {self.start}"
        assert all(st is not None for st in self.stash), "compact before any forward"
        for st in self.stash:
            check_path(st.parents, keep)
        self.kv.compact(start, keep)
        for slot, st in enumerate(self.stash):
            if st.parents is None and len(keep) == st.raw.shape[1]:
                continue  # the whole chain: already committed
            self.conv[slot] = gdn.conv_window_after(st.window0, st.raw[:, keep])
            self.ssm[slot] = gdn.replay(
                st.k[:, keep], st.v[:, keep], st.g[:, keep], st.beta[:, keep], st.state0
            )


def ancestor_path(parents: torch.Tensor, node: int) -> list[int]:
    """Root-first path to `node` in the first row's tree (rows of a cache share one tree)."""
    path, cur = [], node
    while cur >= 0:
        path.append(cur)
        cur = int(parents[0, cur])
    return path[::-1]


def check_path(parents: torch.Tensor | None, keep: list[int]) -> None:
    """`keep` must run root-first down one branch, in every row: parents[keep[j]] == keep[j-1]."""
    if parents is None:
        ok = keep == list(range(len(keep)))
    else:
        expected = torch.tensor([-1, *keep[:-1]], device=parents.device)
        ok = bool((parents[:, keep] == expected).all())
    assert ok, f"keep {keep} is not a root-first path of the last forward's tree"
