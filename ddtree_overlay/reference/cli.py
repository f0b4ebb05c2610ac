"""`python -m ddtree_overlay.reference` (or `python path/to/ddtree_overlay/reference ...`).

Runs one algorithm over a JSON list of token-id prompts and writes per-prompt + aggregate JSON.
At T=0 every speculative run is also compared with target-only greedy decoding (first
divergence and the target's top1-top2 logit margin there); `--no-baseline` skips that.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .decode import generate_ar, generate_ddtree, generate_dflash, generate_eagle3
from .eagle3 import load_eagle3_draft
from .hybrid import load_any_target
from .metrics import aggregate, prompt_metrics
from .model import load_draft

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m ddtree_overlay.reference", description=__doc__.splitlines()[2]
    )
    p.add_argument(
        "--target",
        required=True,
        help="dir with config.json + model.safetensors (Qwen3ForCausalLM or Qwen3_5ForConditionalGeneration)",
    )
    p.add_argument(
        "--draft",
        help="dir with config.json + model.safetensors (DFlashDraftModel for dflash/ddtree, "
        "LlamaForCausalLMEagle3 for eagle3)",
    )
    p.add_argument("--prompts", required=True, help="JSON file: list of token-id lists")
    p.add_argument("--algo", choices=("ar", "dflash", "ddtree", "eagle3"), required=True)
    p.add_argument(
        "--budget",
        type=int,
        default=16,
        help="DDTree budget B: drafted nodes per round, root excluded",
    )
    p.add_argument(
        "--num-steps",
        type=int,
        default=3,
        help="EAGLE-3 drafted tokens per round (SGLang's speculative_num_steps, topk 1)",
    )
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default="float32", choices=tuple(DTYPES))
    p.add_argument("--seed", type=int, default=0, help="sampling seed; prompt i uses seed + i")
    p.add_argument("--json", required=True, help="output JSON path")
    p.add_argument(
        "--trees",
        action="store_true",
        help="record every round's tree (tokens, parents, depths, accepted)",
    )
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    p.add_argument(
        "--stop-token",
        type=int,
        default=None,
        help="stop after this token (default: none, like ignore_eos)",
    )
    p.add_argument(
        "--no-baseline", action="store_true", help="skip the target-only greedy comparison at T=0"
    )
    args = p.parse_args(argv)
    if args.num_steps < 1:
        p.error(f"--num-steps must be at least 1, got {args.num_steps}")
    return args


def load_drafter(args: argparse.Namespace, dtype: torch.dtype):
    """The algorithm's drafter (None for ar) and the most tokens one of its rounds commits."""
    if args.algo == "ar":
        return None, 1
    if args.algo == "eagle3":
        return load_eagle3_draft(args.draft, dtype=dtype, device=args.device), args.num_steps + 1
    draft = load_draft(args.draft, dtype=dtype, device=args.device)
    return draft, draft.cfg.block_size


def run(args: argparse.Namespace) -> dict:
    dtype = DTYPES[args.dtype]
    target = load_any_target(args.target, dtype=dtype, device=args.device)
    prompts = json.loads(Path(args.prompts).read_text())[: args.limit]
    draft, block_size = load_drafter(args, dtype)
    want_baseline = args.algo != "ar" and args.temperature < 1e-5 and not args.no_baseline
    results, baselines, rows = [], [], []
    for i, prompt in enumerate(prompts):
        gen = torch.Generator(device=args.device).manual_seed(args.seed + i)
        kw = {
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "generator": gen,
            "stop_token": args.stop_token,
        }
        if args.algo == "ar":
            r = generate_ar(target, prompt, **kw)
        elif args.algo == "dflash":
            r = generate_dflash(target, draft, prompt, record_trees=args.trees, **kw)
        elif args.algo == "eagle3":
            r = generate_eagle3(target, draft, prompt, num_steps=args.num_steps, **kw)
        else:
            r = generate_ddtree(
                target, draft, prompt, budget=args.budget, record_trees=args.trees, **kw
            )
        b = generate_ar(target, prompt, **kw) if want_baseline else None
        results.append(r)
        baselines.append(b)
        rows.append(prompt_metrics(r, block_size=block_size, baseline=b, trees=args.trees))
        tau = rows[-1].get("accept_len_mean")
        sys.stderr.write(
            f"[{i + 1}/{len(prompts)}] {args.algo} new={len(r.tokens)} tau={tau if tau is None else round(tau, 3)}\n"
        )
    agg = aggregate(results, block_size=block_size, baselines=baselines if want_baseline else None)
    config = {k: v for k, v in vars(args).items()}
    config["torch"] = torch.__version__
    return {"config": config, "aggregate": agg, "prompts": rows}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    agg = report["aggregate"]
    keys = (
        "prompts",
        "new_tokens",
        "accept_len_mean",
        "tokens_per_round",
        "tokens_per_s",
        "divergent_prompts",
    )
    sys.stdout.write(json.dumps({k: agg[k] for k in keys if k in agg}, sort_keys=True) + "\n")
    return 0
