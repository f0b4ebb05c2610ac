"""On a GPU: the commit's target-KV move, DDTREE's mover (ddtree_kv_move) against SGLang's tiled
copy (``MHATokenToKVPool.move_kv_cache``'s kernel), on one pool of the Qwen3-8B shape (36 layers,
8 KV heads of 128, bf16) or the Qwen3.6-27B shape (16 attention layers, 4 KV heads of 256).

Per batch size, the moves a round makes (bs x W slots, W = 16) for accepted paths of random
lengths (--accept 1: the root alone, every slot onto itself, as with random weights), nodes at
random places in each request's 33-slot verify block. Checks that both leave the pool identical,
then times each (CUDA events, median of 50) and prints a table.
  python scripts/gpu/kv_move.py [--shape 8b|27b] [--bs 1 16 64] [--accept random|1]
Needs an env with sglang 0.5.14 or later (its kernel); the mover loads from overlay/.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

# SGLang's own modules first: the payload loader stands in for packages not yet imported.
from sglang.srt.mem_cache.triton_ops.cache_move import copy_all_layer_kv_cache_tiled  # isort: skip
from sglang.srt.utils import next_power_of_2  # isort: skip

from ddtree_overlay.bench.payload_modules import load_payload_module

SHAPES = {"8b": (36, 8, 128), "27b": (16, 4, 256)}
WIDTH, VERIFY = 16, 33


class Pool:
    """The tables SGLang's tiled copy reads, over real buffers (slot 0 is SGLang's padding slot)."""

    def __init__(self, layers, heads, dim, slots):
        self.buffers = [torch.randn(slots, heads, dim, device="cuda").bfloat16() for _ in range(2 * layers)]
        self.data_ptrs = torch.tensor([b.data_ptr() for b in self.buffers], dtype=torch.uint64, device="cuda")
        self.data_strides = torch.tensor([b.stride(0) * b.element_size() for b in self.buffers], device="cuda")
        stride = int(self.data_strides[0])
        tile = 512 if stride >= 8192 else 256 if stride >= 4096 else 128  # SGLang's heuristics
        self.config = {"bytes_per_tile": tile, "num_warps": 8 if tile == 512 else 4,
                       "byte_tiles": -(-stride // tile), "num_locs_upper": 128 if tile == 512 else 256}


def round_moves(bs, accept, gen):
    """(kv_target, kv_source) [bs * W] as accepted_paths writes them."""
    slots = torch.randperm(bs * VERIFY, generator=gen).view(bs, VERIFY) + 1
    target, source = slots[:, :WIDTH].clone(), slots[:, :WIDTH].clone()
    for b in range(bs):
        length = 1 if accept == "1" else int(torch.randint(1, WIDTH + 1, (1,), generator=gen))
        nodes = torch.randperm(VERIFY - 1, generator=gen)[: length - 1] + 1
        source[b, 1:length] = slots[b, nodes]
    return target.reshape(-1).cuda(), source.reshape(-1).cuda()


def sglang_move(pool, target, source):
    cfg, n = pool.config, target.numel()
    for start in range(0, n, cfg["num_locs_upper"]):
        end = min(start + cfg["num_locs_upper"], n)
        copy_all_layer_kv_cache_tiled[(pool.data_ptrs.numel(), cfg["byte_tiles"])](
            pool.data_ptrs, pool.data_strides, target[start:end], source[start:end], end - start,
            next_power_of_2(end - start), BYTES_PER_TILE=cfg["bytes_per_tile"], num_warps=cfg["num_warps"],
            num_stages=2,
        )


def median_ms(fn, repeats=50):
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(kv_move, shape: str, bs: int, accept: str, gen) -> tuple[float, float, bool]:
    """(SGLang ms, DDTREE ms, whether both left the pool the same) for one batch size."""
    pool = Pool(*SHAPES[shape], slots=bs * VERIFY + 1)
    target, source = round_moves(bs, accept, gen)
    before = [b.clone() for b in pool.buffers]
    sglang_move(pool, target, source)
    want = [b.clone() for b in pool.buffers]
    for b, old in zip(pool.buffers, before, strict=True):
        b.copy_(old)
    mover = kv_move.TiledKVMover(pool)
    mover(target, source, WIDTH)
    same = all(torch.equal(b, w) for b, w in zip(pool.buffers, want, strict=True))
    theirs = median_ms(lambda: sglang_move(pool, target, source))
    ours = median_ms(lambda: mover(target, source, WIDTH))
    return theirs, ours, same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=SHAPES, default="8b")
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--accept", choices=("random", "1"), default="random")
    args = ap.parse_args()
    kv_move = load_payload_module("sglang.srt.speculative.ddtree_kv_move")
    gen = torch.Generator().manual_seed(0)
    print("| shape | bs | accept | SGLang ms | DDTREE ms | x |\n|---|---|---|---|---|---|")
    failed = False
    for bs in args.bs:
        theirs, ours, same = measure(kv_move, args.shape, bs, args.accept, gen)
        failed |= not same
        print(f"| {args.shape} | {bs} | {args.accept} | {theirs:.4f} | {ours:.4f} | {theirs / ours:.2f} |"
              + ("" if same else " DIFFERENT POOLS"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
