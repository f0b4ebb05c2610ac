"""The draft top-K on the GPU: ``compute_draft_topk`` (torch) against ``draft_topk`` (Triton).

    python scripts/gpu/topk_bench.py [--out DIR] [--vocab 151936] [--depth 15]

Random bf16 logits [bs, depth, vocab] (a Qwen3-8B-shaped drafter's 15 draft positions), for
batch sizes 1, 4, 16, 32 and K = 8, 32, 256: GPU ms per call (CUDA events, median of 20 after
3 warm-ups) and whether both give the same log-probabilities (max difference) and token ids
(bf16 logits tie, and the two break ties differently: ids are compared where the values differ
from their neighbours). Needs torch, triton and a GPU; no sglang (the payload modules load from
overlay/ under stand-in packages).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from payload_modules import load_payload_module  # noqa: E402

BATCH_SIZES = (1, 4, 16, 32)
KS = (8, 32, 256)


def gpu_ms(fn, *, warmup: int = 3, iters: int = 20) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def agreement(want, got) -> dict:
    import torch

    diff = (want.log_probs - got.log_probs).abs().max().item()
    values = want.log_probs
    distinct = torch.ones_like(values, dtype=torch.bool)  # ids compare only where no tie is near
    distinct[..., 1:] &= values[..., 1:] != values[..., :-1]
    distinct[..., :-1] &= values[..., :-1] != values[..., 1:]
    same_ids = (want.token_ids == got.token_ids)[distinct].float().mean().item() if distinct.any() else 1.0
    return {"max_log_prob_diff": diff, "same_ids_where_untied": same_ids}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--depth", type=int, default=15)
    args = ap.parse_args()

    import torch

    du = load_payload_module("sglang.srt.speculative.ddtree_utils")
    dk = load_payload_module("sglang.srt.speculative.ddtree_kernels")
    rows = []
    print("| bs | K | torch ms | triton ms | speedup | max log-prob diff | same ids (untied) |")
    print("|---|---|---|---|---|---|---|")
    for bs in BATCH_SIZES:
        g = torch.Generator(device="cuda").manual_seed(bs)
        logits = (torch.randn(bs, args.depth, args.vocab, device="cuda", generator=g) * 4).to(torch.bfloat16)
        for k in KS:
            row = {"bs": bs, "k": k, "vocab": args.vocab, "depth": args.depth}
            row["torch_ms"] = gpu_ms(lambda x=logits, k=k: du.compute_draft_topk(x, k))
            row["triton_ms"] = gpu_ms(lambda x=logits, k=k: dk.draft_topk(x, k))
            row |= agreement(du.compute_draft_topk(logits, k), dk.draft_topk(logits, k))
            rows.append(row)
            print(
                f"| {bs} | {k} | {row['torch_ms']:.3f} | {row['triton_ms']:.3f} | "
                f"{row['torch_ms'] / row['triton_ms']:.2f}x | {row['max_log_prob_diff']:.2e} | "
                f"{row['same_ids_where_untied']:.4f} |",
                flush=True,
            )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "topk_bench.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
