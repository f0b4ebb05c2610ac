"""DDTREE's target-verify and drafter-block attention on the triton backend, timed against SGLang's kernel.

    python3 scripts/gpu/verify_attention.py [--out DIR] [--batch-sizes 1,4,16] [--prefixes 1024,8192]
        [--widths 16,17,33] [--shapes qwen3-8b,qwen3.6-27b] [--tiles 64x32,32x32x4] [--min-splits 64,128]
        [--stages 3,4] [--max-registers 128] [--graph]
    python3 scripts/gpu/verify_attention.py --plot DIR   # redraw DIR/verify_attention.png from its JSON

For each attention shape (Qwen3-8B: 32 q / 8 kv heads, dim 128; Qwen3.6-27B's attention layers:
24 q / 4 kv heads, dim 256), batch size, prefix length and verify width N, random bf16 queries,
keys and values, each request's prefix in shuffled pool slots and a random tree of N nodes:
GPU ms per call (CUDA events, median of 20 after 3 warm-ups; with ``--graph``, per call of a
CUDA graph of 20 calls back to back, median of 10 replays: no host launch in between, as in an
engine, where a short call otherwise times its own launch) of
- ``splitkv``: ``ddtree_verify_attention.tree_verify_attention`` with the tail-only mask and the
  split count the backend would pick on this GPU;
- ``extend``: SGLang's ``extend_attention_fwd`` with DDTREE's FULL-layout mask (today's path);
- ``chain16``: ``extend_attention_fwd`` causal at 16 tokens, no mask (DFLASH's chain verify) at
  the same batch and prefix;
- ``draft16``: the drafter's block at the shape's heads, 16 tokens that each see the prefix and
  all 16, no mask: ``extend_attention_fwd`` not causal (SGLang's path for DFlash's drafter) and
  ``tree_verify_attention`` without a tail mask (``SGLANG_DDTREE_DRAFT_ATTENTION=splitkv``);
- with ``--tiles MxN[xW],...``, ``splitkv`` again with each candidate's BLOCK_M x BLOCK_N tiles
  and W warps (8 unless given) instead of ``block_config``'s (64 x 64 at head dim 128, 32 x 32 at
  256: both build without spills for sm_86 / 90 / 120 within their shared memory, as the
  launcher builds them, 2026-12-06);
- with ``--min-splits S,...``, ``splitkv`` again with ``MIN_SPLIT_TOKENS`` (the fewest prefix keys
  a split walks) at each S: at bs 1 a 1 K prefix gives 256-key splits 4 programs per (kv head,
  row block), and a smaller S more programs of fewer key tiles each;
- with ``--stages K,...``, ``splitkv`` again with the partial kernel software-pipelined K deep
  (``NUM_STAGES``, 2 by default): the prefix loop's key loads depend on the slot indices it loads
  in the same iteration;
- with ``--max-registers R,...``, ``splitkv`` again with the partial kernel held to R registers
  per thread (``MAX_REGISTERS``): at the 8B shape the 64 x 32 tile takes 143 on sm_90, so one
  8-warp program fits an SM; at 128, two (it then spills 0-8 bytes by an aligned build).
Each variant's ms, launched split count and difference from ``extend`` go in its row's ``variants``.
Agreement: the largest |splitkv - extend| over the outputs (bf16; both round the probabilities
to bf16 before the value product), and the same with the tree a chain against ``chain16``'s
causal kernel. A row whose difference passes 2e-2 is marked and the exit code is 1. Needs torch,
triton, an installed sglang (for its kernel) and a GPU; the payload module loads from overlay/.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ddtree_overlay.bench.cuda_timing import gpu_ms, graph_ms  # noqa: E402

SHAPES = {"qwen3-8b": (32, 8, 128), "qwen3.6-27b": (24, 4, 256)}
TOLERANCE = 2e-2


def ints(text: str) -> list:
    return [int(x) for x in text.split(",") if x]


def tile_list(text: str) -> list:
    """``MxN[xW],...`` as (BLOCK_M, BLOCK_N, warps) candidates, 8 warps where W is not given."""
    tiles = []
    for word in text.split(","):
        parts = [int(x) for x in word.split("x")]
        if len(parts) not in (2, 3):
            raise argparse.ArgumentTypeError(f"tile {word!r} is not MxN or MxNxW")
        tiles.append((*parts, 8) if len(parts) == 2 else tuple(parts))
    return tiles


def tile_name(tile: tuple) -> str:
    return "x".join(map(str, tile))


def min_split_list(text: str) -> list:
    """``S,...``: prefix keys per split, each a multiple of 64 (every BLOCK_N divides it)."""
    sizes = ints(text)
    if not sizes or any(size < 64 or size % 64 for size in sizes):
        raise argparse.ArgumentTypeError(f"min splits {text!r} must be multiples of 64")
    return sizes


def variants(tiles: list, min_splits: list, stages: list, max_registers: list) -> dict:
    """name -> the payload module attributes a timed variant sets (read by num_splits and the launch)."""
    out = {tile_name(tile): {"block_config": lambda head_dim, tile=tile: tile} for tile in tiles}
    out |= {f"min-split {size}": {"MIN_SPLIT_TOKENS": size} for size in min_splits}
    out |= {f"stages {depth}": {"NUM_STAGES": depth} for depth in stages}
    return out | {f"maxnreg {cap}": {"MAX_REGISTERS": cap} for cap in max_registers}


class Case:
    """One verify's inputs in the triton backend's layouts, on the GPU."""

    def __init__(self, du, q_heads, kv_heads, dim, bs, prefix, n, *, chain=False, seed=0):
        import torch

        gen = torch.Generator(device="cuda").manual_seed(seed)
        dev = "cuda"
        tokens, slots = bs * n, bs * (prefix + n) + 64
        self.n, self.bs = n, bs

        def rand(*shape):
            return torch.randn(*shape, generator=gen, device=dev).to(torch.bfloat16)

        self.q, self.k, self.v = rand(tokens, q_heads, dim), rand(tokens, kv_heads, dim), rand(tokens, kv_heads, dim)
        self.k_buffer, self.v_buffer = rand(slots, kv_heads, dim), rand(slots, kv_heads, dim)
        perm = torch.randperm(slots, generator=gen, device=dev)
        self.kv_indices = perm[: bs * prefix].to(torch.int64)
        steps = torch.arange(bs + 1, device=dev, dtype=torch.int32)
        self.kv_indptr, self.qo_indptr = steps * prefix, steps * n
        self.ancestors = torch.stack([self._ancestors(n, chain, gen) for _ in range(bs)]).to(dev)
        # the FULL-layout mask as DDTREE's default path builds it (du: the payload's ddtree_utils)
        seq_lens = torch.full((bs,), prefix, device=dev)
        self.full_mask = du.build_tree_custom_mask(self.ancestors, seq_lens, bs * n * (prefix + n))
        self.mask_indptr = steps.to(torch.int64) * n * (prefix + n)
        self.sm_scale = dim**-0.5

    @staticmethod
    def _ancestors(n, chain, gen):
        import torch

        parents = [-1] + [i - 1 if chain else int(torch.randint(0, i, (1,), generator=gen, device="cuda")) for i in range(1, n)]
        mask = torch.zeros(n, n, dtype=torch.bool)
        for node in range(n):
            hop = node
            while hop >= 0:
                mask[node, hop] = True
                hop = parents[hop]
        return mask


def write_plot(out: Path) -> Path | None:
    """verify_attention.png beside the JSON: ms per call of each kernel per (shape, batch size,
    prefix), one panel per shape; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = json.loads((out / "verify_attention.json").read_text())["rows"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    fig, axes = plt.subplots(1, len(shapes), figsize=(7 * len(shapes), 4.5), squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        mine = [r for r in rows if r["shape"] == shape]
        cases = list(dict.fromkeys((r["bs"], r["prefix"]) for r in mine))
        bars = {"chain 16 (DFLASH)": {(r["bs"], r["prefix"]): r["chain16_ms"] for r in mine}}
        for n in sorted({r["n"] for r in mine}):
            of_n = [r for r in mine if r["n"] == n]
            bars[f"extend, tree N={n}"] = {(r["bs"], r["prefix"]): r["extend_ms"] for r in of_n}
            bars[f"split-KV, tree N={n}"] = {(r["bs"], r["prefix"]): r["splitkv_ms"] for r in of_n}
        step = 0.8 / len(bars)
        for i, (label, ms) in enumerate(bars.items()):
            ax.bar([x + i * step for x in range(len(cases))], [ms[c] for c in cases], step, label=label)
        ax.set_xticks([x + 0.4 - step / 2 for x in range(len(cases))], [f"bs {bs}\n{prefix} ctx" for bs, prefix in cases])
        ax.set_ylabel("GPU ms per layer call")
        ax.set_title(shape)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "verify_attention.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plot", type=Path, help="redraw DIR/verify_attention.png from DIR/verify_attention.json")
    ap.add_argument("--batch-sizes", type=ints, default=[1, 4, 16])
    ap.add_argument("--prefixes", type=ints, default=[1024, 8192])
    ap.add_argument("--widths", type=ints, default=[16, 17, 33])
    ap.add_argument("--shapes", default="qwen3-8b,qwen3.6-27b")
    ap.add_argument("--tiles", type=tile_list, default=[], help="BLOCK_MxBLOCK_N[xWARPS],... to time too")
    ap.add_argument("--min-splits", type=min_split_list, default=[], help="MIN_SPLIT_TOKENS values to time too")
    ap.add_argument("--stages", type=ints, default=[], help="NUM_STAGES values (pipelining depth) to time too")
    ap.add_argument("--max-registers", type=ints, default=[], help="MAX_REGISTERS values (per thread) to time too")
    ap.add_argument("--graph", action="store_true", help="time each call inside a CUDA graph (no host launches)")
    args = ap.parse_args()
    if args.plot:
        return 0 if write_plot(args.plot) else 1

    import torch
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd

    from ddtree_overlay.bench.payload_modules import load_payload_module

    va = load_payload_module("sglang.srt.speculative.ddtree_verify_attention")
    ac = load_payload_module("sglang.srt.speculative.ddtree_attention_choice")
    du = load_payload_module("sglang.srt.speculative.ddtree_utils")
    props = torch.cuda.get_device_properties(0)
    context = 40960  # the Qwen3 models' context: the backend's cap on the split count
    policy = ac.TreeVerifyAttention(context, props.multi_processor_count)
    print(f"GPU: {props.name}, {props.multi_processor_count} SMs; triton {__import__('triton').__version__}")

    def splitkv(case, o, mask):
        q_heads, kv_heads, dim = case.q.shape[1], case.k.shape[1], case.q.shape[2]
        splits = policy.num_splits(case.bs, q_heads, kv_heads, dim, case.n)
        va.tree_verify_attention(
            case.q, case.k, case.v, o, case.k_buffer, case.v_buffer, case.kv_indptr, case.kv_indices, mask,
            num_verify_tokens=case.n, num_splits=splits, sm_scale=case.sm_scale,
        )
        return splits

    timed_variants = variants(args.tiles, args.min_splits, args.stages, args.max_registers)
    timed = graph_ms if args.graph else gpu_ms

    def variant(name, case, o, mask):
        defaults = {attr: getattr(va, attr) for attr in timed_variants[name]}
        for attr, value in timed_variants[name].items():
            setattr(va, attr, value)
        try:
            return splitkv(case, o, mask)
        finally:
            for attr, value in defaults.items():
                setattr(va, attr, value)

    def extend(case, o, mask, causal=True):
        extend_attention_fwd(
            case.q, case.k, case.v, o, case.k_buffer, case.v_buffer, case.qo_indptr, case.kv_indptr,
            case.kv_indices, mask, causal, None if mask is None else case.mask_indptr, case.n, 1.0, 1.0,
            case.sm_scale,
        )

    rows, failed = [], False
    header = f"{'shape':<12} {'bs':>3} {'prefix':>6} {'N':>3} {'S':>3} {'splitkv ms':>10} {'extend ms':>9} {'speedup':>7} {'chain16 ms':>10} {'|diff|':>8} {'chain |diff|':>12} {'draft16 ext':>11} {'draft16 ms':>10} {'|diff|':>8}"
    for name in timed_variants:
        header += f" {name + ' ms':>10} {'|diff|':>8}"
    print(header)
    for shape in args.shapes.split(","):
        q_heads, kv_heads, dim = SHAPES[shape]
        for bs in args.batch_sizes:
            for prefix in args.prefixes:
                chain = Case(du, q_heads, kv_heads, dim, bs, prefix, 16, chain=True, seed=1)
                o_chain, o_ours = torch.empty_like(chain.q), torch.empty_like(chain.q)
                chain_ms = timed(partial(extend, chain, o_chain, None))
                splitkv(chain, o_ours, chain.ancestors.reshape(-1))
                chain_diff = float((o_ours.float() - o_chain.float()).abs().max())
                del chain
                block = Case(du, q_heads, kv_heads, dim, bs, prefix, 16, chain=True, seed=2)
                o_block_ext, o_block = torch.empty_like(block.q), torch.empty_like(block.q)
                draft = dict(
                    draft16_extend_ms=timed(partial(extend, block, o_block_ext, None, causal=False)),
                    draft16_splitkv_ms=timed(partial(splitkv, block, o_block, None)),
                )
                draft["draft16_max_abs_diff"] = float((o_block.float() - o_block_ext.float()).abs().max())
                del block
                for n in args.widths:
                    case = Case(du, q_heads, kv_heads, dim, bs, prefix, n, seed=n)
                    o_ours, o_ext = torch.empty_like(case.q), torch.empty_like(case.q)
                    tail = case.ancestors.reshape(-1)
                    splits = splitkv(case, o_ours, tail)
                    ours_ms = timed(partial(splitkv, case, o_ours, tail))
                    ext_ms = timed(partial(extend, case, o_ext, case.full_mask))
                    diff = float((o_ours.float() - o_ext.float()).abs().max())
                    row = dict(shape=shape, bs=bs, prefix=prefix, n=n, splits=splits, splitkv_ms=ours_ms,
                               extend_ms=ext_ms, chain16_ms=chain_ms, max_abs_diff=diff, chain_max_abs_diff=chain_diff, **draft)
                    line = (f"{shape:<12} {bs:>3} {prefix:>6} {n:>3} {splits:>3} {ours_ms:>10.3f} {ext_ms:>9.3f} "
                            f"{ext_ms / ours_ms:>6.2f}x {chain_ms:>10.3f} {diff:>8.1e} {chain_diff:>12.1e} "
                            f"{draft['draft16_extend_ms']:>11.3f} {draft['draft16_splitkv_ms']:>10.3f} {draft['draft16_max_abs_diff']:>8.1e}")
                    row["variants"] = {}
                    for name in timed_variants:
                        o_variant = torch.empty_like(case.q)
                        result = row["variants"][name] = dict(
                            # launched; a min-split variant leaves more or fewer of them keyless
                            launched_splits=variant(name, case, o_variant, tail),
                            ms=timed(partial(variant, name, case, o_variant, tail)),
                            max_abs_diff=float((o_variant.float() - o_ext.float()).abs().max()),
                        )
                        line += f" {result['ms']:>10.3f} {result['max_abs_diff']:>8.1e}"
                    variant_diffs = [result["max_abs_diff"] for result in row["variants"].values()]
                    bad = max(diff, chain_diff, draft["draft16_max_abs_diff"], *variant_diffs) > TOLERANCE
                    failed |= bad
                    rows.append(row)
                    print(line + ("  DISAGREE" if bad else ""))
                    del case
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        timing = "cuda graph" if args.graph else "events"
        (args.out / "verify_attention.json").write_text(json.dumps({"gpu": props.name, "timing": timing, "rows": rows}, indent=1))
        write_plot(args.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
