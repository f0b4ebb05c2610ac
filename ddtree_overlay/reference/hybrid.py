"""Qwen3.5 / Qwen3.6 hybrid target (Gated DeltaNet + gated full attention, 3:1) in plain torch.

What this file must agree with (read from the SGLang 0.5.14 wheel, `models/qwen3_5.py`,
`configs/qwen3_5.py`, `configs/qwen3_next.py`, `models/qwen3_5_mtp.py`):
- layer i is full attention when (i + 1) % full_attention_interval == 0, else GDN;
- every decoder norm is `GemmaRMSNorm`: x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32
  (input/post-attention layernorms, the final norm, q_norm/k_norm, the MTP norms); the GDN
  output norm is the plain-weight gated `RMSNorm` of `fla/layernorm_gated.py`: per value head,
  rmsnorm(o) * w * silu(z);
- GDN in-projections: `in_proj_qkv` -> [q (H*K) | k (H*K) | v (HV*V)] flat, head-major, then
  the causal conv + SiLU over those channels; `in_proj_z` -> z; `in_proj_b` -> b;
  `in_proj_a` -> a; the recurrence is `gdn.py`'s; `out_proj` after the gated norm;
- gated attention: `q_proj` gives per head [q (D) | gate (D)]; q_norm/k_norm per head, then
  neox RoPE on the first D * partial_rotary_factor dims (inv_freq over that rotary dim; the
  mrope_section of Qwen3.5 configs is the same rotation when the 3 position rows are equal, as
  they are for text); scale D^-0.5; output * sigmoid(gate), then `o_proj`;
- MLP: SiLU-gated, as Qwen3's; aux capture as the dense target (feature k = residual stream
  after layer k, k <= L - 2);
- MTP head (`Qwen3_5ForCausalLMMTP`): x = fc(cat[pre_fc_norm_embedding(embed(t_{i+1})),
  pre_fc_norm_hidden(h_i)]) at position i, with h_i the target's hidden after its final norm;
  one full-attention decoder layer, then `norm`, then the target's lm_head predicts t_{i+2}.

Checkpoint names are those of `Qwen3_5ForConditionalGeneration`: `model.language_model.*`,
`lm_head.weight`, `mtp.*` (`checkpoint_name`). Only torch / safetensors / stdlib imports.
Axis letters as `model.py`; cache and recurrent state handling in `hybrid_cache.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import gdn
from .hybrid_cache import HybridCache
from .model import (
    MLP,
    Qwen3Target,
    apply_rope,
    attend,
    causal_mask_with_prefix,
    load_target,
    rope_cos_sin,
)

ARCHITECTURE = "Qwen3_5ForConditionalGeneration"
BODY_PREFIX = "model.language_model."


@dataclass(frozen=True)
class Qwen35Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    full_attention_interval: int = 4
    partial_rotary_factor: float = 0.25
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    mtp_num_hidden_layers: int = 1

    @classmethod
    def from_dict(cls, d: dict) -> Qwen35Config:
        """From a `qwen3_5` config.json (its text_config) or a bare `qwen3_5_text` one."""
        t = d.get("text_config", d)
        rope = t.get("rope_parameters") or {}
        kw = {f.name: t[f.name] for f in fields(cls) if f.name in t}
        kw["rope_theta"] = float(rope.get("rope_theta", t.get("rope_theta", 10000.0)))
        kw["partial_rotary_factor"] = float(
            t.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25))
        )
        return cls(**kw)

    def is_attention(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval == 0

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + self.value_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim


class GemmaRMSNorm(nn.Module):
    """SGLang `GemmaRMSNorm.forward_native`: fp32 normalise, times (1 + w), cast back."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


class GatedRMSNorm(nn.Module):
    """`fla/layernorm_gated.RMSNorm`, norm before gate: rmsnorm(x) * w * silu(z), in fp32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float() * F.silu(z.float())).to(x.dtype)


class GatedAttention(nn.Module):
    def __init__(self, cfg: Qwen35Config) -> None:
        super().__init__()
        self.cfg = cfg
        hq, hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, hq * d * 2, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, hkv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, hkv * d, bias=False)
        self.o_proj = nn.Linear(hq * d, cfg.hidden_size, bias=False)
        self.q_norm = GemmaRMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(d, cfg.rms_norm_eps)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [B, h, S, D]; only the first rotary_dim dims rotate
        rd = self.cfg.rotary_dim
        return torch.cat([apply_rope(x[..., :rd], cos, sin), x[..., rd:]], dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        *,
        kv: tuple | None,
        mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """x: [B, S, H] (normed) -> [B, S, H]. kv = (KVCache, slot, cache_start) or None."""
        c = self.cfg
        b, s, _ = x.shape
        q, gate = self.q_proj(x).view(b, s, c.num_attention_heads, 2 * c.head_dim).chunk(2, -1)
        q = self.rope(self.q_norm(q).transpose(1, 2), cos, sin)
        k = self.k_proj(x).view(b, s, c.num_key_value_heads, c.head_dim)
        k = self.rope(self.k_norm(k).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(b, s, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        if kv is not None:
            cache, slot, start = kv
            k, v = cache.write(slot, start, k, v)
        o = attend(q, k, v, mask, causal=causal).transpose(1, 2)  # [B, S, Hq, D]
        return self.o_proj((o * torch.sigmoid(gate)).reshape(b, s, -1))


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: Qwen35Config) -> None:
        super().__init__()
        self.cfg = cfg
        hv, cd = cfg.linear_num_value_heads, cfg.conv_dim
        self.in_proj_qkv = nn.Linear(cfg.hidden_size, cd, bias=False)
        self.in_proj_z = nn.Linear(cfg.hidden_size, cfg.value_dim, bias=False)
        self.in_proj_b = nn.Linear(cfg.hidden_size, hv, bias=False)
        self.in_proj_a = nn.Linear(cfg.hidden_size, hv, bias=False)
        self.conv1d = nn.Conv1d(cd, cd, cfg.linear_conv_kernel_dim, groups=cd, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(hv))
        self.A_log = nn.Parameter(torch.zeros(hv))
        self.norm = GatedRMSNorm(cfg.linear_value_head_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(cfg.value_dim, cfg.hidden_size, bias=False)

    def split(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Post-conv [B, S, C] -> q (scaled), k: [B, S, HV, K] l2-normalised; v: [B, S, HV, V]."""
        c = self.cfg
        kd = c.linear_num_key_heads * c.linear_key_head_dim
        q, k, v = mixed.split([kd, kd, c.value_dim], dim=-1)
        heads = (*mixed.shape[:2], c.linear_num_key_heads, c.linear_key_head_dim)
        hv = c.linear_num_value_heads
        q = gdn.expand_heads(gdn.l2norm(q.reshape(heads)), hv) * c.linear_key_head_dim**-0.5
        k = gdn.expand_heads(gdn.l2norm(k.reshape(heads)), hv)
        return q, k, v.reshape(*mixed.shape[:2], hv, c.linear_value_head_dim)

    def forward(
        self,
        x: torch.Tensor,
        *,
        cache: HybridCache | None,
        slot: int,
        parents: torch.Tensor | None,
    ) -> torch.Tensor:
        """x: [B, S, H] (normed) -> [B, S, H]. Without a cache: a chain from zero state, in the
        chunked form (training). With one: node by node from `parents` (None = chain) and the
        cache's committed state; the cache keeps what `HybridCache.compact` needs."""
        c = self.cfg
        raw = self.in_proj_qkv(x)
        g, beta = gdn.gates(self.in_proj_a(x), self.in_proj_b(x), self.A_log, self.dt_bias)
        weight = self.conv1d.weight.squeeze(1)
        if cache is None:
            window0 = raw.new_zeros(x.shape[0], c.conv_dim, c.linear_conv_kernel_dim - 1)
            q, k, v = self.split(gdn.conv_tree(raw, weight, window0, None))
            o, _ = gdn.chunked(q, k, v, g, beta)
        else:
            window0, state0 = cache.conv[slot], cache.ssm[slot]
            q, k, v = self.split(gdn.conv_tree(raw, weight, window0, parents))
            o, state = gdn.recurrent_tree(q, k, v, g, beta, state0, parents)
            cache.record(slot, raw=raw, k=k, v=v, g=g, beta=beta, parents=parents, state=state)
        z = self.in_proj_z(x).view(*x.shape[:2], c.linear_num_value_heads, -1)
        o = self.norm(o, z).reshape(*x.shape[:2], c.value_dim)
        return self.out_proj(o.to(x.dtype))


class HybridLayer(nn.Module):
    def __init__(self, cfg: Qwen35Config, attention: bool) -> None:
        super().__init__()
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if attention:
            self.self_attn = GatedAttention(cfg)
        else:
            self.linear_attn = GatedDeltaNet(cfg)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def mix(self, x: torch.Tensor, ctx: LayerContext, slot: int) -> torch.Tensor:
        if hasattr(self, "self_attn"):
            kv = None if ctx.cache is None else (ctx.cache.kv, slot, ctx.cache_start)
            return self.self_attn(x, ctx.cos, ctx.sin, kv=kv, mask=ctx.mask, causal=ctx.causal)
        return self.linear_attn(x, cache=ctx.cache, slot=slot, parents=ctx.parents)

    def forward(self, h: torch.Tensor, ctx: LayerContext, slot: int) -> torch.Tensor:
        h = h + self.mix(self.input_layernorm(h), ctx, slot)
        return h + self.mlp(self.post_attention_layernorm(h))


@dataclass(frozen=True)
class LayerContext:
    """What every layer of one forward shares."""

    cos: torch.Tensor
    sin: torch.Tensor
    cache: HybridCache | None
    cache_start: int
    mask: torch.Tensor | None
    causal: bool
    parents: torch.Tensor | None


@dataclass(frozen=True)
class HybridOutput:
    logits: torch.Tensor  # [B, S, V] fp32 (empty when not asked for)
    aux: torch.Tensor | None  # [B, S, K*H] features at `capture` ids (list order)
    hidden: torch.Tensor  # [B, S, H] after the final norm (what the MTP head reads)


def parents_from_mask(mask: torch.Tensor | None, cache_start: int, s: int) -> torch.Tensor | None:
    """[B, S] parent of each new node: its newest visible new node (-1 = committed state), or
    None when that is a chain. Valid because ancestors are visible and parents[i] < i."""
    if mask is None:
        return None
    new = mask[:, 0, :, cache_start:]  # [B|1, S, S]
    j = torch.arange(s, device=mask.device)
    parents = torch.where(new & (j[None, :] < j[:, None]), j, -1).amax(-1)  # [B|1, S]
    return None if bool((parents == j - 1).all()) else parents


class Qwen35Body(nn.Module):
    def __init__(self, cfg: Qwen35Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            [HybridLayer(cfg, cfg.is_attention(i)) for i in range(cfg.num_hidden_layers)]
        )
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MTPHead(nn.Module):
    """`Qwen3_5ForCausalLMMTP`'s own weights (`mtp.*`); embed and lm_head are the target's."""

    def __init__(self, cfg: Qwen35Config) -> None:
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = GemmaRMSNorm(h, eps)
        self.pre_fc_norm_hidden = GemmaRMSNorm(h, eps)
        self.layers = nn.ModuleList([HybridLayer(cfg, attention=True)])
        self.norm = GemmaRMSNorm(h, eps)
        self.cfg = cfg

    def forward(
        self, next_emb: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Training form, causal over the sequence. next_emb: [B, S, H] = embed(t_{i+1});
        hidden: [B, S, H] target hidden after its final norm at i; positions: [B, S] = i.
        Returns [B, S, H] after `norm`; the target's lm_head of it predicts t_{i+2}."""
        x = torch.cat([self.pre_fc_norm_embedding(next_emb), self.pre_fc_norm_hidden(hidden)], -1)
        cos, sin = rope_cos_sin(positions, self.cfg.rotary_dim, self.cfg.rope_theta)
        ctx = LayerContext(cos, sin, None, 0, None, hidden.shape[1] > 1, None)
        return self.norm(self.layers[0](self.fc(x), ctx, 0))


class Qwen35Target(nn.Module):
    """The hybrid target, with the forward signature of `model.Qwen3Target`."""

    def __init__(self, cfg: Qwen35Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen35Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = MTPHead(cfg) if cfg.mtp_num_hidden_layers else None
        # cache slot of each layer: its index among the layers of its kind (KV cache for
        # attention layers, conv window + recurrent state for GDN layers)
        kinds = [cfg.is_attention(i) for i in range(cfg.num_hidden_layers)]
        self.slots = [kinds[:i].count(kind) for i, kind in enumerate(kinds)]

    def new_cache(self, batch: int, max_len: int) -> HybridCache:
        return HybridCache.for_model(self.cfg, self.lm_head.weight, batch=batch, max_len=max_len)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        *,
        cache: HybridCache | None = None,
        cache_start: int = 0,
        mask: torch.Tensor | None = None,
        capture: tuple[int, ...] = (),
        logits: bool = True,
    ) -> HybridOutput:
        """As `Qwen3Target.forward`. With a cache, each GDN node starts from its parent's state:
        the parents are read off `mask` (newest visible new node; none: a chain), so a tree
        verify needs no extra argument. The recurrent state after the last new node becomes
        the committed one; `cache.compact(cache_start, keep)` moves it to keep[-1]."""
        assert input_ids.shape == positions.shape, (input_ids.shape, positions.shape)
        s = input_ids.shape[1]
        if mask is None and cache_start > 0 and s > 1:
            mask = causal_mask_with_prefix(cache_start, s, input_ids.device)
        cos, sin = rope_cos_sin(positions, self.cfg.rotary_dim, self.cfg.rope_theta)
        parents = parents_from_mask(mask, cache_start, s)
        ctx = LayerContext(
            cos=cos,
            sin=sin,
            cache=cache,
            cache_start=cache_start,
            mask=mask,
            causal=mask is None and cache_start == 0 and s > 1,
            parents=None if parents is None else parents.expand(input_ids.shape[0], s),
        )
        if cache is not None:
            cache.begin(cache_start)
        h = self.model.embed_tokens(input_ids)
        feats: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            h = layer(h, ctx, self.slots[i])
            if i in capture:
                feats[i] = h
        if capture:
            bad = [k for k in capture if k not in feats or k > self.cfg.num_hidden_layers - 2]
            assert not bad, f"target_layer_ids {bad} not capturable (need k <= L-2)"
        aux = torch.cat([feats[k] for k in capture], dim=-1) if capture else None
        hidden = self.model.norm(h)
        out = self.lm_head(hidden).float() if logits else h.new_zeros(0)
        return HybridOutput(logits=out, aux=aux, hidden=hidden)


# ----------------------------------------------------------------------------------------------
# Checkpoints (the names and config.json `Qwen3_5ForConditionalGeneration` loads)


def checkpoint_name(name: str) -> str:
    """Module name -> checkpoint name: the body lives under `model.language_model.`."""
    return BODY_PREFIX + name[len("model.") :] if name.startswith("model.") else name


def module_name(name: str) -> str:
    return "model." + name[len(BODY_PREFIX) :] if name.startswith(BODY_PREFIX) else name


def mrope_section(rotary_dim: int) -> list[int]:
    """Qwen3.5's split of the rotary half-dim over (t, h, w): 32 -> [11, 11, 10]."""
    n = rotary_dim // 2
    return [n // 3 + (i < n % 3) for i in range(3)]


def qwen35_config_json(cfg: Qwen35Config, *, bos: int, eos: int, pad: int, vision: dict) -> dict:
    """The `config.json` of a Qwen3.5 / Qwen3.6 checkpoint (keys as Qwen3.6-27B's), for `cfg`.
    `vision`: the vision_config; SGLang builds that tower from it (0.5.14 always does)."""
    rope = {
        "mrope_interleaved": True,
        "mrope_section": mrope_section(cfg.rotary_dim),
        "partial_rotary_factor": cfg.partial_rotary_factor,
        "rope_theta": cfg.rope_theta,
        "rope_type": "default",
    }
    kinds = [
        "full_attention" if cfg.is_attention(i) else "linear_attention"
        for i in range(cfg.num_hidden_layers)
    ]
    text = {
        **{f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "rope_theta"},
        "model_type": "qwen3_5_text",
        "dtype": "bfloat16",
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "layer_types": kinds,
        "mamba_ssm_dtype": "float32",
        "mlp_only_layers": [],
        "mtp_use_dedicated_embeddings": False,
        "rope_parameters": rope,
        "tie_word_embeddings": False,
        "use_cache": True,
        "initializer_range": 0.02,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "qwen3_5",
        "dtype": "bfloat16",
        "text_config": text,
        "vision_config": vision,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }


def init_hybrid_weights(module: nn.Module, seed: int, std: float = 0.02) -> None:
    """Linears / embeddings ~ N(0, std); Gemma norms 0 (scale 1), the gated norm 1; conv
    U(+-1/sqrt(width)) as torch's default; dt_bias 1, A = exp(A_log) ~ U(1, 16) as HF Qwen3-Next."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(module.named_parameters()):
        with torch.no_grad():
            if name.endswith("linear_attn.norm.weight") or name.endswith("dt_bias"):
                p.fill_(1.0)
            elif name.endswith("norm.weight"):
                p.zero_()
            elif name.endswith("A_log"):
                p.copy_((1 + 15 * torch.rand(p.shape, generator=g)).log())
            elif name.endswith("conv1d.weight"):
                bound = p.shape[-1] ** -0.5
                p.copy_((2 * torch.rand(p.shape, generator=g) - 1) * bound)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def load_hybrid_target(
    model_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Qwen35Target:
    from safetensors.torch import load_file

    d = Path(model_dir)
    cfg_json = json.loads((d / "config.json").read_text())
    assert cfg_json.get("architectures") == [ARCHITECTURE], cfg_json.get("architectures")
    model = Qwen35Target(Qwen35Config.from_dict(cfg_json))
    sd = {module_name(k): v for k, v in load_file(str(d / "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not missing, f"{d}: missing weights {missing}"
    assert not unexpected, f"{d}: unexpected weights {unexpected}"
    return model.to(device=device, dtype=dtype).eval()


def load_any_target(
    model_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Qwen3Target | Qwen35Target:
    """The dense or the hybrid target, by the checkpoint's `architectures`."""
    arch = json.loads((Path(model_dir) / "config.json").read_text()).get("architectures")
    load = load_hybrid_target if arch == [ARCHITECTURE] else load_target
    return load(model_dir, dtype=dtype, device=device)
