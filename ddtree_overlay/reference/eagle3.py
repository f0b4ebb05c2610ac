"""EAGLE-3 drafter in plain torch, numerically shaped like SGLang 0.5.14's `LlamaForCausalLMEagle3`.

What this file must agree with (read from the 0.5.14 wheel, `srt/models/llama_eagle3.py` and
`llama.py`, and the EAGLE worker `speculative/eagle_worker_v2.py`):
- One Llama decoder layer (`midlayer` in the checkpoint; SGLang's loader renames it `layers.0`).
  Its q/k/v projections read 2H = cat(input_layernorm(embed(token)), hidden_norm(hidden)); no
  q/k norm; neox RoPE; GQA; SiLU-gated MLP. The residual is the incoming hidden, not normed:
  r1 = hidden + o_proj(attn), r2 = r1 + mlp(post_attention_layernorm(r1)).
- The incoming hidden is fc(target features) where its width is K*H (draft extend over newly
  committed tokens), the drafter's own r2 otherwise (draft decode steps: SGLang feeds the
  pre-norm r2 back, `norm_output` unset). Entry j pairs token x_{j+1} with the hidden of
  position j, at position j; each decode step moves the position by one.
- logits = lm_head(norm(r2)). embed_tokens is the target's (the worker's `set_embed`), so the
  checkpoint carries none; lm_head is the drafter's own because `draft_vocab_size` is set.
- `d2t` (int64 [draft vocab], target id - draft id) becomes hot_token_id = d2t + arange: zeros
  map the full vocabulary onto itself. The loader skips `t2d` (bool [vocab]); it is kept for
  the public checkpoint format.
- Target features: the one for id k is the residual stream after target layer k, as for DFlash
  (`model.Qwen3Target(capture=...)`), concatenated in `eagle_aux_hidden_state_layer_ids` order.
  Without those ids SGLang captures before layers [2, L // 2, L - 3]: for the 6-layer fixture
  target [2, 3, 3], two features where `fc` expects three.

Axis letters as in `model.py`: B batch, S new tokens, T positions, K aux layers, H hidden, Hq/Hkv
heads, G = Hq / Hkv, D head_dim, V vocab.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .model import (
    MLP,
    HeadLayout,
    KVCache,
    RMSNorm,
    apply_rope,
    attend,
    causal_mask_with_prefix,
    rope_cos_sin,
)


@dataclass(frozen=True)
class Eagle3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    aux_layer_ids: tuple[int, ...]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    num_hidden_layers: int = 1  # KVCache.for_model reads it; EAGLE-3 has one layer

    @classmethod
    def from_dict(cls, d: dict) -> Eagle3Config:
        rope = d.get("rope_parameters") or {}
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d["num_key_value_heads"],
            head_dim=d.get("head_dim", d["hidden_size"] // d["num_attention_heads"]),
            aux_layer_ids=tuple(d["eagle_config"]["eagle_aux_hidden_state_layer_ids"]),
            rms_norm_eps=d["rms_norm_eps"],
            rope_theta=float(rope.get("rope_theta", d.get("rope_theta", 10000.0))),
            max_position_embeddings=d["max_position_embeddings"],
        )


def eagle3_config_json(cfg: Eagle3Config, *, bos: int, eos: int, pad: int) -> dict:
    """The drafter `config.json` SGLang 0.5.14 loads as `LlamaForCausalLMEagle3`."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.vocab_size,  # set: lm_head is loaded from this checkpoint
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
            "use_aux_hidden_state": True,
        },
    }


class Eagle3Attention(HeadLayout, nn.Module):
    """Llama attention over the 2H layer input: no q/k norm, unlike Qwen3's."""

    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.cfg = cfg
        hq, hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h2 = 2 * cfg.hidden_size
        self.q_proj = nn.Linear(h2, hq * d, bias=False)
        self.k_proj = nn.Linear(h2, hkv * d, bias=False)
        self.v_proj = nn.Linear(h2, hkv * d, bias=False)
        self.o_proj = nn.Linear(hq * d, cfg.hidden_size, bias=False)

    def qkv(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # x: [B, S, 2H], positions: [B, S] -> q [B, Hq, S, D], k, v [B, Hkv, S, D] (q, k roped)
        c = self.cfg
        cos, sin = rope_cos_sin(positions, c.head_dim, c.rope_theta)
        q = apply_rope(self.heads(self.q_proj(x), c.num_attention_heads), cos, sin)
        k = apply_rope(self.heads(self.k_proj(x), c.num_key_value_heads), cos, sin)
        return q, k, self.heads(self.v_proj(x), c.num_key_value_heads)


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Eagle3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def attention_input(self, emb: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        # emb, hidden: [B, S, H] -> [B, S, 2H], embedding half first (SGLang's torch.cat order)
        return torch.cat([self.input_layernorm(emb), self.hidden_norm(hidden)], dim=-1)

    def finish(self, hidden: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """r2 from the incoming hidden (the residual) and the attention output, both [B, S, H]."""
        r1 = hidden + attn_out
        return r1 + self.mlp(self.post_attention_layernorm(r1))


class Eagle3Draft(nn.Module):
    """`LlamaForCausalLMEagle3`: state-dict names equal the checkpoint names SGLang loads."""

    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.midlayer = Eagle3Layer(cfg)
        self.fc = nn.Linear(len(cfg.aux_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool))

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache.for_model(self.cfg, self.fc.weight, batch=batch, max_len=max_len)

    def project_target_hidden(self, aux: torch.Tensor) -> torch.Tensor:
        # aux: [B, S, K*H] -> [B, S, H]
        assert aux.shape[-1] == self.fc.in_features, (aux.shape, self.fc.in_features)
        return self.fc(aux)

    def logits(self, r2: torch.Tensor) -> torch.Tensor:
        # r2: [..., H] -> [..., V] fp32
        return self.lm_head(self.norm(r2)).float()

    def forward(
        self,
        emb: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        *,
        cache: KVCache,
        cache_start: int,
    ) -> torch.Tensor:
        """Serving form: emb, hidden [B, S, H] at positions [B, S] -> r2 [B, S, H].

        K/V go to cache slots [cache_start, +S); each entry sees slots up to its own."""
        assert emb.shape == hidden.shape and emb.shape[:2] == positions.shape
        layer = self.midlayer
        q, k, v = layer.self_attn.qkv(layer.attention_input(emb, hidden), positions)
        k, v = cache.write(0, cache_start, k, v)
        s = emb.shape[1]
        mask = None  # one new entry sees every slot up to its own; many from slot 0: causal
        if s > 1 and cache_start > 0:
            mask = causal_mask_with_prefix(cache_start, s, emb.device)
        o = attend(q, k, v, mask, causal=s > 1 and cache_start == 0)
        return layer.finish(hidden, layer.self_attn.out(o))

    def forward_training_time_test(
        self, step_emb: list[torch.Tensor], aux: torch.Tensor, positions: torch.Tensor
    ) -> list[torch.Tensor]:
        """Training form (EAGLE-3's training-time test): len(step_emb) draft steps at once.

        step_emb[k]: [B, T, H] = embed(x_{j+1+k}) for j < T; aux: [B, T, K*H] target features at
        positions j; positions: [B, T] (= j). Step 0 is the draft extend over the whole prefix
        (causal). Step k >= 1 is the k-th decode step of a round whose extend ended at j: its
        hidden is step k-1's r2 at j, its position j + k, and it sees step 0's entries at
        positions <= j and the entries of steps 1..k at j. Returns each step's r2 [B, T, H];
        equal to `forward` at every j."""
        layer = self.midlayer
        hidden = self.project_target_hidden(aux)
        q, k0, v0 = layer.self_attn.qkv(layer.attention_input(step_emb[0], hidden), positions)
        outs = [layer.finish(hidden, layer.self_attn.out(attend(q, k0, v0, None, causal=True)))]
        own_k, own_v = [], []  # steps 1..k: [B, Hkv, T, D] each
        for step, emb in enumerate(step_emb[1:], start=1):
            hidden = outs[-1]
            q, k, v = layer.self_attn.qkv(layer.attention_input(emb, hidden), positions + step)
            own_k.append(k)
            own_v.append(v)
            o = self._attend_prefix_and_chain(q, k0, v0, own_k, own_v)
            outs.append(layer.finish(hidden, layer.self_attn.out(o)))
        return outs

    def _attend_prefix_and_chain(
        self,
        q: torch.Tensor,
        k0: torch.Tensor,
        v0: torch.Tensor,
        own_k: list[torch.Tensor],
        own_v: list[torch.Tensor],
    ) -> torch.Tensor:
        """q: [B, Hq, T, D], step k's queries at every j; k0, v0: [B, Hkv, T, D], step 0's
        entries, seen at positions <= j; own_k, own_v: steps 1..k's [B, Hkv, T, D], each seen at
        j only. Returns o [B, Hq, T, D]."""
        c = self.cfg
        b, _, t, d = q.shape
        q = q.reshape(b, c.num_key_value_heads, c.num_attention_heads // c.num_key_value_heads, t, d)
        scale = 1.0 / math.sqrt(d)
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        s_prefix = torch.einsum("bhgid,bhjd->bhgij", q, k0).float() * scale
        s_prefix = s_prefix.masked_fill(~causal, float("-inf"))
        s_own = torch.stack([torch.einsum("bhgid,bhid->bhgi", q, k) for k in own_k], dim=-1)
        p = torch.softmax(torch.cat([s_prefix, s_own.float() * scale], dim=-1), dim=-1).to(q.dtype)
        o = torch.einsum("bhgij,bhjd->bhgid", p[..., :t], v0)
        o = o + torch.einsum("bhgim,mbhid->bhgid", p[..., t:], torch.stack(own_v))
        return o.reshape(b, c.num_attention_heads, t, d)


def load_eagle3_draft(
    model_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Eagle3Draft:
    from safetensors.torch import load_file

    d = Path(model_dir)
    cfg_json = json.loads((d / "config.json").read_text())
    arch = cfg_json.get("architectures")
    assert arch == ["LlamaForCausalLMEagle3"], arch
    assert cfg_json["draft_vocab_size"] == cfg_json["vocab_size"], "reference expects the full vocab"
    m = Eagle3Draft(Eagle3Config.from_dict(cfg_json))
    m.load_state_dict(load_file(str(d / "model.safetensors")), strict=True)
    assert not m.d2t.any(), "reference expects d2t = 0 (identity vocabulary map)"
    return m.to(device=device, dtype=dtype).eval()
