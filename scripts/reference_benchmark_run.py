"""Run the DDTree reference repository's own generation code on the bundled fixture pair, on a
CPU in fp32, and save the result the way its `benchmark.py --save-path` does.

    python scripts/reference_benchmark_run.py --ddtree-src DDTREE_CHECKOUT --out RUN.pt

`benchmark.py` itself cannot run here: it needs CUDA, flash-attn (it refuses to start without
it and loads the drafter with FlashAttention 2), a tokenizer with a chat template and a hub
dataset; the fixture pair has a byte-level vocabulary and no tokenizer. So this script does
what `benchmark.py`'s loop does, with the checkout's `dflash_generate` and `ddtree_generate`
unchanged: a warm-up, then per prompt target-only (`block_size=1`), DFlash and DDTree at each
budget, stopping at the target's EOS, and `torch.save` of the same `run_data` keys. What
differs, and why, is in docs/compare.md. It runs in an interpreter with the checkout's
requirements (transformers 4.57.1, datasets, loguru), not the tool's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

FIXTURES = Path("ddtree_overlay/fixtures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ddtree-src", type=Path, required=True, help="checkout of the DDTree reference code")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target", default=str(FIXTURES / "target"))
    parser.add_argument("--draft", default=str(FIXTURES / "draft"))
    parser.add_argument("--prompts", type=Path, default=FIXTURES / "heldout_prompts.json")
    parser.add_argument("--max-samples", type=int, default=8)
    parser.add_argument("--tree-budget", default="16,64")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()

    sys.path.insert(0, str(args.ddtree_src))
    torch.cuda.synchronize = lambda *_, **__: None  # the checkout's stage timer syncs CUDA first
    from ddtree import ddtree_generate
    from dflash import dflash_generate
    from model import DFlashDraftModel
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    target = AutoModelForCausalLM.from_pretrained(args.target, attn_implementation="sdpa", dtype=torch.float32).eval()
    draft = DFlashDraftModel.from_pretrained(args.draft, attn_implementation="sdpa", dtype=torch.float32).eval()
    block_size = draft.block_size
    budgets = [int(b) for b in args.tree_budget.split(",")]
    common = {
        "model": draft,
        "target": target,
        "mask_token_id": draft.mask_token_id,
        "stop_token_ids": [target.config.eos_token_id],
        "temperature": args.temperature,
    }

    def generate(method: str, input_ids: torch.Tensor, max_new_tokens: int):
        if method == "baseline":
            return dflash_generate(input_ids=input_ids, max_new_tokens=max_new_tokens, block_size=1, **common)
        if method == "dflash":
            return dflash_generate(input_ids=input_ids, max_new_tokens=max_new_tokens, block_size=block_size, **common)
        budget = int(method.removeprefix("ddtree_tb"))
        return ddtree_generate(
            input_ids=input_ids, max_new_tokens=max_new_tokens, block_size=block_size, tree_budget=budget, **common
        )

    methods = ["baseline", "dflash", *(f"ddtree_tb{b}" for b in budgets)]
    prompts = json.loads(args.prompts.read_text())[: args.max_samples]
    warmup = torch.tensor([prompts[0]])
    for method in methods:
        generate(method, warmup, min(args.max_new_tokens, 16))
    responses = []
    for i, prompt in enumerate(prompts):
        input_ids = torch.tensor([prompt])
        responses.append({method: generate(method, input_ids, args.max_new_tokens) for method in methods})
        print(f"prompt {i + 1}/{len(prompts)}", flush=True)

    run_data = {
        "responses": responses,
        "block_size": block_size,
        "draft_attn_implementation": "sdpa",
        "target_attn_implementation": "sdpa",
        "args": {
            "model_name_or_path": args.target,
            "draft_name_or_path": args.draft,
            "block_size": None,
            "tree_budget": args.tree_budget,
            "dataset": str(args.prompts),
            "max_samples": args.max_samples,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "flash_attn": False,
            "disable_cpp_compact_cache": True,
            "save_path": str(args.out),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(run_data, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
