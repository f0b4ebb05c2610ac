"""Where the draft top-K's GPU time goes: torch's ``compute_draft_topk`` against the Triton stage's
``draft_topk``.

    python scripts/gpu/topk_parts.py [--out DIR] [--vocab 151936] [--depth 15] [--hidden 4096]

Random bf16 logits [bs, depth, vocab] (a Qwen3-8B-shaped drafter's 15 draft positions) for
batch sizes 1, 4, 8, 16, 32, 64 and K = 16, 32, 256: GPU ms per call (CUDA events, median of 20 after
3 warm-ups) of the lm_head product over the block's draft slots (a strided slice; as
``torch.matmul`` and as ``ddtree_utils.draft_logits``), of ``compute_draft_topk`` and of its parts
(fp32 copy, log-sum-exp, ``torch.topk`` over fp32 rows), and of ``ddtree_kernels.draft_topk``
(``torch.topk`` over the bf16 rows, the normaliser from one Triton pass; bf16 -> fp32 is exact,
so the same values come out and the ids agree except where values tie), with how far its
log-probs are from torch's. Needs torch, triton and a GPU; no sglang (the payload modules load
from overlay/ under stand-in packages).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ddtree_overlay.bench.cuda_timing import gpu_ms  # noqa: E402
from ddtree_overlay.bench.payload_modules import load_payload_module  # noqa: E402

BATCH_SIZES = (1, 4, 8, 16, 32, 64)
KS = (16, 32, 256)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--depth", type=int, default=15)
    ap.add_argument("--hidden", type=int, default=4096)
    args = ap.parse_args()

    import torch

    du = load_payload_module("sglang.srt.speculative.ddtree_utils")
    dk = load_payload_module("sglang.srt.speculative.ddtree_kernels")
    weight = torch.randn(args.vocab, args.hidden, device="cuda", dtype=torch.bfloat16) / 64
    rows = []
    print("| bs | K | lm_head, matmul on the slots | lm_head, draft_logits | compute_draft_topk | fp32 copy | logsumexp | topk fp32 | draft_topk (Triton) | max log-prob diff | same ids |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for bs in BATCH_SIZES:
        g = torch.Generator(device="cuda").manual_seed(bs)
        block = torch.randn(bs, args.depth + 1, args.hidden, device="cuda", generator=g).to(torch.bfloat16)
        slots = block[:, 1:, :]  # the draft slots, as the worker passes them: a strided slice
        logits = (torch.randn(bs, args.depth, args.vocab, device="cuda", generator=g) * 4).to(torch.bfloat16)
        wide = logits.float()
        for k in KS:
            want = du.compute_draft_topk(logits, k)
            got = dk.draft_topk(logits, k)
            row = {
                "bs": bs, "k": k, "vocab": args.vocab, "depth": args.depth,
                "lm_head_matmul_ms": gpu_ms(lambda h=slots: torch.matmul(h, weight.T)),
                "lm_head_ms": gpu_ms(lambda h=slots: du.draft_logits(h, weight)),
                "compute_draft_topk_ms": gpu_ms(lambda x=logits, k=k: du.compute_draft_topk(x, k)),
                "fp32_copy_ms": gpu_ms(lambda x=logits: x.float()),
                "logsumexp_ms": gpu_ms(lambda x=wide: torch.logsumexp(x, dim=-1, keepdim=True)),
                "topk_fp32_ms": gpu_ms(lambda x=wide, k=k: torch.topk(x, k, dim=-1, sorted=True)),
                "draft_topk_ms": gpu_ms(lambda x=logits, k=k: dk.draft_topk(x, k)),
                "max_log_prob_diff": (want.log_probs - got.log_probs).abs().max().item(),
                "same_ids": (want.token_ids == got.token_ids).float().mean().item(),
            }
            rows.append(row)
            print(
                f"| {bs} | {k} | {row['lm_head_matmul_ms']:.3f} | {row['lm_head_ms']:.3f} | {row['compute_draft_topk_ms']:.3f} | "
                f"{row['fp32_copy_ms']:.3f} | {row['logsumexp_ms']:.3f} | {row['topk_fp32_ms']:.3f} | "
                f"{row['draft_topk_ms']:.3f} | {row['max_log_prob_diff']:.1e} | {row['same_ids']:.4f} |",
                flush=True,
            )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "topk_parts.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
