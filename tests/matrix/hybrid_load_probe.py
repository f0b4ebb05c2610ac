"""Run by a release env's interpreter: what stock SGLang makes of the hybrid fixture's files.

`python -I hybrid_load_probe.py CONFIG_JSON NAMES_JSON` prints one JSON object:
- `config`: the release's own `Qwen3_5Config` parsed from config.json (layer kinds, GDN and
  attention shapes, rotary, recurrent-state dtype);
- `target` / `mtp`: the release's own `Qwen3_5ForConditionalGeneration.load_weights` and
  `Qwen3_5ForCausalLMMTP.load_weights`, fed every checkpoint name, run against stand-in
  parameters (the model is not instantiated: that needs a distributed runtime). Each stand-in
  records the shards its loader receives; names the loader cannot place are the ones it logs
  as "not found".
The parameter names are SGLang's module paths, read from `models/qwen3_5.py` and
`models/qwen3_5_mtp.py` (fused `qkv_proj`, `gate_up_proj`, `in_proj_qkvz`, `in_proj_ba`).
"""

import json
import sys
import types


class Recorder:
    """A parameter stand-in: its weight_loader records the shard ids it was given."""

    def __init__(self):
        self.shards = []

    def weight_loader(self, param, loaded_weight, shard_id=None, *args, **kwargs):
        self.shards.append(repr(shard_id))


def sglang_params(text, *, prefix, layers):
    names = [f"{prefix}embed_tokens.weight", f"{prefix}norm.weight"]
    for i in layers:
        base = f"{prefix}layers.{i}."
        names += [base + n for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                     "mlp.gate_up_proj.weight", "mlp.down_proj.weight")]
        if i in text.full_attention_layer_ids:
            names += [base + n for n in ("qkv_proj.weight", "o_proj.weight",
                                         "q_norm.weight", "k_norm.weight")]
        else:
            names += [base + "linear_attn." + n for n in (
                "in_proj_qkvz.weight", "in_proj_ba.weight", "conv1d.weight", "dt_bias", "A_log",
                "norm.weight", "out_proj.weight")]
    return names


def run_loader(load_weights, owner, names, params, module_logger):
    import torch

    recorders = {n: Recorder() for n in params}
    for name, rec in recorders.items():
        rec_param = types.SimpleNamespace(weight_loader=rec.weight_loader)
        params[name] = rec_param
    owner.named_parameters = lambda remove_duplicate=True: list(params.items())
    missing = []
    original = module_logger.warning, getattr(module_logger, "warning_once", None)
    module_logger.warning = lambda msg, *a, **k: missing.append(str(msg))
    module_logger.warning_once = module_logger.warning
    try:
        load_weights(owner, ((n, torch.empty(0)) for n in names))
    finally:
        module_logger.warning, module_logger.warning_once = original
    return {"not_found": missing, "shards": {n: r.shards for n, r in recorders.items()}}


def torchvision_shim():
    """The matrix checks': a CUDA torchvision imports against CPU torch (sglang imports it)."""
    import importlib.util
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, os.pardir, os.pardir, "ddtree_overlay", "in_target", "matrix_checks.py")
    spec = importlib.util.spec_from_file_location("matrix_checks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.torchvision_shim()


def main():
    with open(sys.argv[1]) as f:
        config_json = json.load(f)
    with open(sys.argv[2]) as f:
        names = json.load(f)
    torchvision_shim()
    from sglang.srt.configs.mamba_utils import mamba2_state_dtype
    from sglang.srt.configs.qwen3_5 import Qwen3_5Config

    cfg = Qwen3_5Config(**config_json)
    text = cfg.text_config
    report = {"config": {
        "text_model_type": text.model_type,
        "layers_block_type": text.layers_block_type,
        "linear_layer_ids": text.linear_layer_ids,
        "full_attention_layer_ids": text.full_attention_layer_ids,
        "linear_heads": [text.linear_num_key_heads, text.linear_num_value_heads,
                         text.linear_key_head_dim, text.linear_value_head_dim,
                         text.linear_conv_kernel_dim],
        "attention": [text.num_attention_heads, text.num_key_value_heads, text.head_dim,
                      getattr(text, "attn_output_gate", None)],
        "partial_rotary_factor": text.partial_rotary_factor,
        "rope": text.rope_parameters,
        "ssm_state_dtype": str(mamba2_state_dtype(text)),
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "vision_depth": cfg.vision_config.depth,
    }}

    import sglang.srt.models.qwen3_5 as qwen3_5
    import sglang.srt.models.qwen3_5_mtp as qwen3_5_mtp

    n_layers = text.num_hidden_layers
    owner = types.SimpleNamespace(
        config=text, pp_group=types.SimpleNamespace(is_last_rank=True, is_first_rank=True),
        start_layer=0, end_layer=n_layers,
        pooler=None,  # 0.5.23+: a joint-schema pooler only for checkpoints that ship one
    )
    params = dict.fromkeys([*sglang_params(text, prefix="model.", layers=range(n_layers)),
                            "lm_head.weight"])
    report["target"] = run_loader(qwen3_5.Qwen3_5ForConditionalGeneration.load_weights, owner,
                                  names, params, qwen3_5.logger)

    mtp_params = dict.fromkeys([
        "fc.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight",
        *(n for n in sglang_params(_as_mtp(text), prefix="model.", layers=[0])
          if n != "model.embed_tokens.weight"),
    ])
    mtp_owner = types.SimpleNamespace(config=text)
    report["mtp"] = run_loader(qwen3_5_mtp.Qwen3_5ForCausalLMMTP.load_weights, mtp_owner, names,
                               mtp_params, qwen3_5_mtp.logger)
    print(json.dumps(report, default=str))


def _as_mtp(text):
    """The MTP model's one layer is full attention (its config sets full_attention_interval 1)."""
    return types.SimpleNamespace(full_attention_layer_ids=[0])


if __name__ == "__main__":
    main()
