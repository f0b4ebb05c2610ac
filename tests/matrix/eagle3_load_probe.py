"""Run by a release env's interpreter: what stock SGLang makes of the EAGLE-3 fixture drafter.

`SGLANG_USE_CPU_ENGINE=1 python -I eagle3_load_probe.py DRAFT_DIR TARGET_DIR` prints one JSON
object. Both models are the release's own classes, instantiated on the CPU in a one-rank gloo
group:
- `draft`: the class SGLang resolves for the drafter's config.json (read by its own
  `ModelConfig` as a draft model), its parameters (names and shapes), and its own
  `load_weights` run on the checkpoint as SGLang's safetensors iterator yields it. Every
  parameter starts as NaN; each weight loader is wrapped to record which checkpoint tensor
  reached it, with which shard id. Reported: that placement, the checkpoint names no loader
  received, and per parameter the NaN left in its real rows, whether they equal its checkpoint
  tensors (fused ones in shard order) and its padding rows (a vocabulary-parallel parameter
  pads its rows to a multiple of 64); then `hot_token_id` and `load_lm_head_from_target`.
- `target`: the release's `Qwen3ForCausalLM` for the fixture target, the layers its
  `set_eagle3_layers_to_capture` captures before (SGLang's capture is "before layer i") for the
  drafter's `eagle_aux_hidden_state_layer_ids`, and for none (its default).
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's dir out

from hybrid_load_probe import torchvision_shim

SHARD_ORDER = {"'q'": 0, "'k'": 1, "'v'": 2, "0": 0, "1": 1}


def cpu_kernel_shim():
    """0.5.2x imports sgl_kernel's CPU ops at import time on a CPU engine, and the matrix envs
    carry no sgl_kernel: a stand-in whose every name is None (nothing here runs a kernel)."""
    import importlib.util
    import types

    if importlib.util.find_spec("sgl_kernel") is None:
        stand_in = types.ModuleType("sgl_kernel")
        stand_in.__getattr__ = lambda name: None
        sys.modules["sgl_kernel"] = stand_in


def start_runtime(model_dir):
    """The process state SGLang's layers read: server args, a one-rank model-parallel group, and
    no attention data parallelism."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path=model_dir, device="cpu")
    try:
        from sglang.srt.runtime_context import SpawnRanks, publish
    except ImportError:  # before 0.5.2x: module-global server args, widths passed explicitly
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
        published = False
    else:  # the groups take the widths the context publishes
        publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        published = True
    init_distributed_environment(
        world_size=1, rank=0, local_rank=0, backend="gloo",
        distributed_init_method=f"file://{tempfile.mkdtemp()}/init",
    )
    if published:
        initialize_model_parallel()
        initialize_dp_attention(server_args)
    else:
        initialize_model_parallel(1)
        initialize_dp_attention(server_args, ModelConfig.from_server_args(server_args))
    return server_args


def model_class(server_args, model_dir, *, draft):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.utils import get_model_architecture

    config = ModelConfig.from_server_args(server_args, model_path=model_dir, is_draft_model=draft)
    return get_model_architecture(config)[0], config.hf_config


def load_recorded(model, checkpoint):
    """Run the model's own load_weights on the checkpoint, recording where each tensor went."""
    import torch
    from sglang.srt.model_loader.weight_utils import (
        default_weight_loader,
        safetensors_weights_iterator,
    )

    current = {}
    received = {}  # param name -> [(shard id, tensor)]
    placed = {}  # checkpoint name -> [param name, shard id]

    def wrap(name, param):
        original = getattr(param, "weight_loader", default_weight_loader)

        def loader(p, loaded, *shard):
            placed[current["name"]] = [name, repr(shard[0]) if shard else None]
            received.setdefault(name, []).append((repr(shard[0]) if shard else None, loaded.clone()))
            return original(p, loaded, *shard)

        param.weight_loader = loader

    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(float("nan"))
            wrap(name, param)

    def weights():
        for name, tensor in safetensors_weights_iterator([checkpoint]):
            current["name"] = name
            yield name, tensor

    model.load_weights(weights())
    return placed, received


def real_rows(model):
    """Parameter name -> its rows that hold the vocabulary, for vocabulary-parallel ones (which
    pad their rows to a multiple of 64); every other parameter's rows are all real."""
    from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding

    return {
        f"{prefix}.weight" if prefix else "weight": module.org_vocab_size
        for prefix, module in model.named_modules()
        if isinstance(module, VocabParallelEmbedding)
    }


def compare(model, received):
    """Per parameter: the NaN left in its real rows, whether those rows equal its checkpoint
    tensors (fused ones in shard order), and its padding rows."""
    import torch

    vocab_rows = real_rows(model)
    unwritten, equal, padding = {}, {}, {}
    for name, param in model.named_parameters():
        rows = param.data[: vocab_rows.get(name, param.shape[0])]
        unwritten[name] = int(torch.isnan(rows).sum())
        padding[name] = param.shape[0] - rows.shape[0]
        if name in received:
            parts = sorted(received[name], key=lambda part: SHARD_ORDER.get(part[0], 0))
            expected = torch.cat([t.to(param.dtype) for _, t in parts], dim=0)
            equal[name] = rows.shape == expected.shape and bool(torch.equal(rows, expected))
    return unwritten, equal, padding


def probe_draft(server_args, draft_dir):
    cls, hf_config = model_class(server_args, draft_dir, draft=True)
    model = cls(hf_config)
    placed, received = load_recorded(model, os.path.join(draft_dir, "model.safetensors"))
    from safetensors import safe_open

    with safe_open(os.path.join(draft_dir, "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
    unwritten, equal, padding = compare(model, received)
    hot = model.get_hot_token_id()
    return {
        "class": cls.__name__,
        "eagle_config": getattr(hf_config, "eagle_config", None),
        "params": {n: list(p.shape) for n, p in model.named_parameters()},
        "placed": placed,
        "not_placed": [n for n in names if n not in placed],
        "unwritten": unwritten,
        "equal": equal,
        "padding_rows": padding,
        "hot_token_id": None if hot is None else hot.tolist(),
        "load_lm_head_from_target": model.load_lm_head_from_target,
    }


def probe_target(server_args, target_dir, layer_ids):
    cls, hf_config = model_class(server_args, target_dir, draft=False)
    model = cls(hf_config)
    model.set_eagle3_layers_to_capture(layer_ids)
    named = list(model.model.layers_to_capture)
    model.set_eagle3_layers_to_capture(None)
    return {
        "class": cls.__name__,
        "num_hidden_layers": hf_config.num_hidden_layers,
        "capture_before": named,
        "default_capture_before": list(model.model.layers_to_capture),
    }


def main():
    draft_dir, target_dir = sys.argv[1], sys.argv[2]
    torchvision_shim()
    cpu_kernel_shim()
    server_args = start_runtime(draft_dir)
    draft = probe_draft(server_args, draft_dir)
    layer_ids = draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    report = {"draft": draft, "target": probe_target(server_args, target_dir, layer_ids)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
