"""Qwen3 target and DFlash drafter in plain torch, numerically shaped like SGLang 0.5.14.

What this file must agree with (read from the 0.5.14 wheel):
- `srt/models/qwen3.py` + `qwen2.py`: pre-norm decoder, per-head q_norm/k_norm (RMSNorm over
  head_dim) before neox RoPE, GQA, SiLU-gated MLP, final norm, untied `lm_head`.
- Aux hidden capture: SGLang captures the residual stream *before* layer k+1 for each
  `target_layer_ids` entry k (`layers_to_capture = [k + 1 for k in ids]`), i.e. the output of
  decoder layer k, which is HF `hidden_states[k + 1]`. Features are concatenated in list order.
  An id of L-1 is never captured by SGLang (there is no "before layer L"), so ids must be <= L-2.
- `srt/models/dflash.py`: context features are projected once, `hidden_norm(fc(cat_features))`;
  in every draft layer the context K/V are `k_proj/v_proj` of that projection (no
  input_layernorm), `k_norm` + RoPE at the context positions, placed before the block's own K/V.
  Q comes from the block only. Attention is non-causal inside the block. Final `norm`; the
  target's `embed_tokens` feeds the block and the target's `lm_head` reads the output.

RMSNorm follows SGLang's `forward_native`: normalise in fp32, multiply by the weight in fp32,
cast back. Only torch / safetensors / stdlib imports: this file is run inside foreign envs.

Axis letters: B batch, S new tokens, T keys (cache + new), N anchors per sequence,
Q block slots (block_size), H hidden, Hq/Hkv heads, D head_dim, V vocab.

One module past 500 lines: the dense target and the DFlash drafter share its layers (RMSNorm,
RoPE, attention, MLP) and the KV cache, and it reads side by side with SGLang's qwen3.py and
dflash.py, which it mirrors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------------------------
# Configs


@dataclass(frozen=True)
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048

    @classmethod
    def from_dict(cls, d: dict) -> Qwen3Config:
        # rope: v5 `rope_parameters` first, then legacy `rope_theta` (SGLang get_rope_config order)
        rope = d.get("rope_parameters") or {}
        kw = {f.name: d[f.name] for f in fields(Qwen3Config) if f.name in d}
        kw["rope_theta"] = float(rope.get("rope_theta", d.get("rope_theta", 10000.0)))
        kw.setdefault("head_dim", d["hidden_size"] // d["num_attention_heads"])
        return Qwen3Config(**kw)


@dataclass(frozen=True)
class DFlashConfig(Qwen3Config):
    block_size: int = 16
    mask_token_id: int = -1
    target_layer_ids: tuple[int, ...] = field(default_factory=tuple)
    num_target_layers: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> DFlashConfig:
        base = Qwen3Config.from_dict(d)
        dc = d.get("dflash_config") or {}
        return cls(
            **asdict(base),
            block_size=int(dc.get("block_size", d.get("block_size", 16))),
            mask_token_id=int(dc["mask_token_id"]),
            target_layer_ids=tuple(
                int(i) for i in dc.get("target_layer_ids", d.get("target_layer_ids"))
            ),
            num_target_layers=int(dc.get("num_target_layers", d.get("num_target_layers", 0))),
        )


def qwen3_config_json(cfg: Qwen3Config, *, bos: int, eos: int, pad: int) -> dict:
    """The target `config.json` SGLang 0.5.14 loads as `Qwen3ForCausalLM`."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": cfg.num_hidden_layers,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }


def dflash_config_json(cfg: DFlashConfig) -> dict:
    """The drafter `config.json` SGLang 0.5.14 loads as `DFlashDraftModel` (model_type qwen3)."""
    d = qwen3_config_json(cfg, bos=0, eos=0, pad=0)
    for k in ("bos_token_id", "eos_token_id", "pad_token_id", "max_window_layers", "use_cache"):
        d.pop(k)
    d["architectures"] = ["DFlashDraftModel"]
    d["layer_types"] = ["full_attention"] * cfg.num_hidden_layers
    d["block_size"] = cfg.block_size
    d["num_target_layers"] = cfg.num_target_layers
    d["dflash_config"] = {
        "mask_token_id": cfg.mask_token_id,
        "target_layer_ids": list(cfg.target_layer_ids),
        "block_size": cfg.block_size,
    }
    return d


# ----------------------------------------------------------------------------------------------
# Building blocks


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # SGLang RMSNorm.forward_native: fp32 normalise, fp32 weight multiply, cast back.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # positions: [...] int64 -> cos, sin: [..., D] fp32 (neox layout: halves repeated)
    inv_freq = 1.0 / (
        theta
        ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    )
    freqs = positions.to(torch.float32).unsqueeze(-1) * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, h, S, D]; cos/sin: [B, S, D] fp32 -> neox rotate_half in fp32, cast back.
    xf = x.float()
    half = xf.shape[-1] // 2
    rot = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos.unsqueeze(1) + rot * sin.unsqueeze(1)).to(x.dtype)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool = False,
) -> torch.Tensor:
    # q: [B, Hq, S, D]; k, v: [B, Hkv, T, D]; mask: bool [B or 1, 1, S, T] (True = visible)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class HeadLayout:
    """Head split and output projection of an attention module with ``cfg.head_dim`` and
    ``o_proj``: Qwen3's here, the EAGLE-3 drafter's Llama attention (`eagle3.py`)."""

    def heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        # [B, S, n*D] -> [B, n, S, D]
        return x.view(*x.shape[:2], n, self.cfg.head_dim).transpose(1, 2)

    def out(self, o: torch.Tensor) -> torch.Tensor:
        # o: [B, Hq, S, D] -> [B, S, H]
        return self.o_proj(o.transpose(1, 2).reshape(o.shape[0], o.shape[2], -1))


class Attention(HeadLayout, nn.Module):
    """Qwen3 attention weights; the target and the drafter use the same projections."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        hq, hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, hq * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, hkv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, hkv * d, bias=False)
        self.o_proj = nn.Linear(hq * d, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def project_q(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return apply_rope(
            self.q_norm(self.heads(self.q_proj(x), self.cfg.num_attention_heads)), cos, sin
        )

    def project_kv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x: [B, S, H] -> k, v: [B, Hkv, S, D]; k gets k_norm then RoPE (SGLang apply_k_norm/apply_k_rope)
        hkv = self.cfg.num_key_value_heads
        k = apply_rope(self.k_norm(self.heads(self.k_proj(x), hkv)), cos, sin)
        return k, self.heads(self.v_proj(x), hkv)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        *,
        cache: KVCache | None,
        index: int,
        cache_start: int,
        mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """Target layer: h [B, S, H] residual stream in -> residual stream out."""
        a = self.self_attn
        x = self.input_layernorm(h)
        q = a.project_q(x, cos, sin)
        k, v = a.project_kv(x, cos, sin)
        if cache is not None:
            k, v = cache.write(index, cache_start, k, v)
        h = h + a.out(attend(q, k, v, mask, causal=causal))
        return h + self.mlp(self.post_attention_layernorm(h))


# ----------------------------------------------------------------------------------------------
# KV cache


class KVCache:
    """Per-layer K/V buffers [B, Hkv, Tmax, D]; slot t holds position-agnostic (already roped) keys.

    The decoders own the committed length; this object only stores, reads and compacts.
    """

    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_kv: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (batch, n_kv, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len

    @classmethod
    def for_model(cls, cfg: Qwen3Config, like: torch.Tensor, *, batch: int, max_len: int) -> KVCache:
        """A cache shaped for ``cfg``'s layers and heads, in ``like``'s dtype and device."""
        return cls(
            cfg.num_hidden_layers,
            batch,
            cfg.num_key_value_heads,
            max_len,
            cfg.head_dim,
            like.dtype,
            like.device,
        )

    def write(
        self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # k, v: [B, Hkv, S, D] written at slots [start, start+S); returns views of slots [0, start+S)
        end = start + k.shape[2]
        assert end <= self.max_len, f"KV cache overflow: {end} > {self.max_len}"
        self.k[layer][:, :, start:end] = k
        self.v[layer][:, :, start:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def compact(self, start: int, keep: list[int]) -> None:
        """Move the kept entries of the window written at `start` to [start, start+len(keep))."""
        if keep == list(range(len(keep))):
            return  # a prefix of the window (chain acceptance): already in place
        idx = torch.tensor(keep, dtype=torch.long, device=self.k[0].device) + start
        for buf in (*self.k, *self.v):
            buf[:, :, start : start + len(keep)] = buf.index_select(2, idx)


# ----------------------------------------------------------------------------------------------
# Target


@dataclass(frozen=True)
class TargetOutput:
    logits: torch.Tensor  # [B, S, V] fp32
    aux: torch.Tensor | None  # [B, S, K*H] model dtype, features at `capture` ids (list order)


class Qwen3Body(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3Target(nn.Module):
    """`Qwen3ForCausalLM`: state-dict names equal the HF / SGLang checkpoint names."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen3Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache.for_model(self.cfg, self.lm_head.weight, batch=batch, max_len=max_len)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        *,
        cache: KVCache | None = None,
        cache_start: int = 0,
        mask: torch.Tensor | None = None,
        capture: tuple[int, ...] = (),
        logits: bool = True,
    ) -> TargetOutput:
        """input_ids, positions: [B, S]. With `cache`, new K/V go to slots [cache_start, +S) and the
        queries see slots [0, cache_start+S) through `mask` [B|1, 1, S, cache_start+S] (bool,
        True = visible); mask=None means causal over the new tokens with the whole prefix visible.
        `capture` = target_layer_ids: feature for id k is the residual stream after layer k."""
        assert input_ids.shape == positions.shape, (input_ids.shape, positions.shape)
        s = input_ids.shape[1]
        if mask is None and cache_start > 0 and s > 1:
            mask = causal_mask_with_prefix(cache_start, s, input_ids.device)
        causal = mask is None and cache_start == 0 and s > 1  # a single new token sees everything
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta)
        h = self.model.embed_tokens(input_ids)
        feats: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            h = layer(
                h, cos, sin, cache=cache, index=i, cache_start=cache_start, mask=mask, causal=causal
            )
            if i in capture:
                feats[i] = h  # SGLang: captured before layer i+1 == output of layer i
        if capture:
            missing = [k for k in capture if k not in feats or k > self.cfg.num_hidden_layers - 2]
            assert not missing, f"target_layer_ids {missing} not capturable (need k <= L-2)"
        aux = torch.cat([feats[k] for k in capture], dim=-1) if capture else None
        out = self.lm_head(self.model.norm(h)).float() if logits else h.new_zeros(0)
        return TargetOutput(logits=out, aux=aux)


def causal_mask_with_prefix(prefix: int, s: int, device: torch.device | str) -> torch.Tensor:
    # [1, 1, S, prefix+S]: every new token sees the prefix and new tokens up to itself
    m = torch.ones(s, prefix + s, dtype=torch.bool, device=device)
    m[:, prefix:] = torch.tril(m[:, prefix:])
    return m.view(1, 1, s, prefix + s)


# ----------------------------------------------------------------------------------------------
# DFlash drafter


class DFlashDraft(nn.Module):
    """`DFlashDraftModel`: no embedding and no head; the target's are used. Names match SGLang."""

    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.fc = nn.Linear(
            len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False
        )
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache.for_model(self.cfg, self.fc.weight, batch=batch, max_len=max_len)

    def project_target_hidden(self, aux: torch.Tensor) -> torch.Tensor:
        # aux: [B, S, K*H] -> [B, S, H]
        assert aux.shape[-1] == self.fc.in_features, (aux.shape, self.fc.in_features)
        return self.hidden_norm(self.fc(aux))

    def forward(
        self,
        block_emb: torch.Tensor,
        block_positions: torch.Tensor,
        *,
        cache: KVCache,
        ctx_aux: torch.Tensor,
        ctx_positions: torch.Tensor,
        ctx_start: int,
    ) -> torch.Tensor:
        """One draft pass (serving form, as SGLang / z-lab run it).

        block_emb: [B, Q, H] = target embed of [root, MASK x (Q-1)]; block_positions: [B, Q].
        ctx_aux: [B, C, K*H] target features of tokens committed since the last pass, at
        ctx_positions [B, C]; they are appended to the draft cache at slots [ctx_start, +C).
        The cache holds context only: block K/V are used for this pass and never stored.
        Returns hidden [B, Q, H] after the final norm (logits = target lm_head of it)."""
        assert (
            block_emb.shape[:2] == block_positions.shape
            and ctx_aux.shape[:2] == ctx_positions.shape
        )
        ctx = self.project_target_hidden(ctx_aux)
        ccos, csin = rope_cos_sin(ctx_positions, self.cfg.head_dim, self.cfg.rope_theta)
        bcos, bsin = rope_cos_sin(block_positions, self.cfg.head_dim, self.cfg.rope_theta)
        h = block_emb
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            kc, vc = a.project_kv(ctx, ccos, csin)  # context K/V: no input_layernorm
            kc, vc = cache.write(i, ctx_start, kc, vc)
            x = layer.input_layernorm(h)
            kb, vb = a.project_kv(x, bcos, bsin)
            q = a.project_q(x, bcos, bsin)
            o = attend(
                q, torch.cat([kc, kb], dim=2), torch.cat([vc, vb], dim=2), None
            )  # non-causal
            h = h + a.out(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)

    def forward_anchor_blocks(
        self, block_emb: torch.Tensor, anchors: torch.Tensor, ctx_aux: torch.Tensor
    ) -> torch.Tensor:
        """Training form: N blocks per sequence in one pass, each as if served at its anchor.

        block_emb: [B, N, Q, H] (slot 0 = embed(x_anchor), others = embed(MASK));
        anchors: [B, N] int64; ctx_aux: [B, S, K*H] features at positions 0..S-1.
        Block n sees context positions j < anchors[n] (the anchor's own features do not exist
        at serving time) and its own Q slots bidirectionally; never other blocks.
        Returns hidden [B, N, Q, H] after the final norm. Equals `forward` at each anchor."""
        b, n, qn, hd = block_emb.shape
        s = ctx_aux.shape[1]
        c = self.cfg
        g = c.num_attention_heads // c.num_key_value_heads
        ctx = self.project_target_hidden(ctx_aux)
        ccos, csin = rope_cos_sin(
            torch.arange(s, device=ctx.device).expand(b, s), c.head_dim, c.rope_theta
        )
        bpos = (anchors.unsqueeze(-1) + torch.arange(qn, device=anchors.device)).view(b, n * qn)
        bcos, bsin = rope_cos_sin(bpos, c.head_dim, c.rope_theta)
        ctx_ok = torch.arange(s, device=anchors.device).view(1, 1, 1, 1, 1, s) < anchors.view(
            b, 1, 1, n, 1, 1
        )
        h = block_emb.reshape(b, n * qn, hd)
        for layer in self.layers:
            a = layer.self_attn
            kc, vc = a.project_kv(ctx, ccos, csin)  # [B, Hkv, S, D]
            x = layer.input_layernorm(h)
            kb, vb = a.project_kv(x, bcos, bsin)  # [B, Hkv, N*Q, D]
            q = a.project_q(x, bcos, bsin)  # [B, Hq, N*Q, D]
            q = q.view(b, c.num_key_value_heads, g, n, qn, c.head_dim)
            kb = kb.view(b, c.num_key_value_heads, n, qn, c.head_dim)
            vb = vb.view(b, c.num_key_value_heads, n, qn, c.head_dim)
            scale = 1.0 / math.sqrt(c.head_dim)
            s_ctx = torch.einsum("bhgnqd,bhsd->bhgnqs", q, kc).float() * scale
            s_ctx = s_ctx.masked_fill(~ctx_ok, float("-inf"))
            s_blk = torch.einsum("bhgnqd,bhnkd->bhgnqk", q, kb).float() * scale
            p = torch.softmax(torch.cat([s_ctx, s_blk], dim=-1), dim=-1).to(q.dtype)
            o = torch.einsum("bhgnqs,bhsd->bhgnqd", p[..., :s], vc) + torch.einsum(
                "bhgnqk,bhnkd->bhgnqd", p[..., s:], vb
            )
            h = h + a.out(o.reshape(b, c.num_attention_heads, n * qn, c.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h).view(b, n, qn, hd)


# ----------------------------------------------------------------------------------------------
# Checkpoints (config.json + model.safetensors, the formats SGLang 0.5.14 loads)


def init_weights(module: nn.Module, seed: int, std: float = 0.02) -> None:
    """Proper random init: linears/embeddings ~ N(0, std), norms = 1 (never SGLang's dummy U(±1e-3))."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(module.named_parameters()):
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def save_checkpoint(
    module: nn.Module,
    config: dict,
    out_dir: str | Path,
    rename: Callable[[str], str] = lambda name: name,
) -> None:
    """config.json + model.safetensors, floating tensors in bf16 (integer and bool buffers keep
    their dtype); `rename` maps module names to checkpoint names."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    sd = {
        rename(k): v.detach().to("cpu", torch.bfloat16 if v.is_floating_point() else v.dtype).contiguous()
        for k, v in module.state_dict().items()
    }
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})


def _load_state(module: nn.Module, path: Path, dtype: torch.dtype, device: str) -> None:
    from safetensors.torch import load_file

    sd = load_file(str(path))
    sd = {
        k[len("model.") :] if isinstance(module, DFlashDraft) and k.startswith("model.") else k: v
        for k, v in sd.items()
    }
    missing, unexpected = module.load_state_dict(sd, strict=False)
    assert not missing, f"{path}: missing weights {missing}"
    assert not unexpected, f"{path}: unexpected weights {unexpected}"
    module.to(device=device, dtype=dtype).eval()


def load_target(
    model_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Qwen3Target:
    d = Path(model_dir)
    cfg_json = json.loads((d / "config.json").read_text())
    assert cfg_json.get("architectures") == ["Qwen3ForCausalLM"], cfg_json.get("architectures")
    assert not cfg_json.get("tie_word_embeddings", False), "reference expects an untied lm_head"
    m = Qwen3Target(Qwen3Config.from_dict(cfg_json))
    _load_state(m, d / "model.safetensors", dtype, device)
    return m


def load_draft(
    model_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> DFlashDraft:
    d = Path(model_dir)
    cfg_json = json.loads((d / "config.json").read_text())
    assert cfg_json.get("architectures") == ["DFlashDraftModel"], cfg_json.get("architectures")
    m = DFlashDraft(DFlashConfig.from_dict(cfg_json))
    _load_state(m, d / "model.safetensors", dtype, device)
    return m
