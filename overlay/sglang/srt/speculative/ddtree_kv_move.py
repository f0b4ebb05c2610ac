"""DDTREE's commit: the accepted nodes' target KV moved to their committed positions, skipping the
slots that stay where they are.

Each round moves, for request b and depth r < W (the accept width), the KV of the node accepted
at depth r from the slot it was verified in to the slot of position prefix + r. The launch keeps
a fixed size (bs x W, no host sync), so past a request's accepted path, and wherever the accepted
node already sits at its own depth, a slot moves onto itself. SGLang's mover
(``MHATokenToKVPool.move_kv_cache``) copies those rows too, and specialises its kernel on
next_power_of_2(bs x W): on an H200 (sglang 0.5.14, 2026-12-03) it was DDTREE's largest kernel of
its own, 0.80 ms per round at the Qwen3-8B shape at bs 16 (random weights: nearly every row onto
itself) and 0.28 ms at the dense fixture's bs 64, and its compiles for new batch-size classes made
the hybrid fixture's first adaptive rounds take up to 1.5 s.

``TiledKVMover`` reads the tables SGLang's tiled copy reads (``data_ptrs``: every layer's K and V
buffer; ``data_strides``: each buffer's slot stride in bytes) with one program per (request,
buffer, byte tile) that loads the request's moved rows before storing any (a barrier between
the two, for every thread of the program): a row can be both a source and a target within a
request's verify block, and requests never share slots. Rows whose
source is their target are masked out. Its constexprs are fixed per engine (the accept width's
power of two, and a byte tile that keeps a program's rows at 4 KiB), so the startup warm-up
compiles it once. Pools whose moves SGLang makes another way (paged or head-major layouts, the
native mover, FP4 scales, MLA) keep SGLang's mover.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

# (kv_target, kv_source, width): [bs * W] int64 slots each, W moves per request.
MoveAcceptedKV = Callable[[torch.Tensor, torch.Tensor, int], None]


@triton.jit
def _move_accepted_kv_kernel(
    data_ptrs,  # [buffers] uint64: each layer's K and V buffer
    data_strides,  # [buffers] bytes per slot
    kv_target_ptr,  # [bs, W] int64
    kv_source_ptr,  # [bs, W] int64
    width,
    WIDTH_BLOCK: tl.constexpr,
    BYTES_PER_TILE: tl.constexpr,
):
    req = tl.program_id(0)
    buffer = tl.program_id(1)
    tile = tl.program_id(2)
    stride = tl.load(data_strides + buffer)
    base = tl.load(data_ptrs + buffer).to(tl.pointer_type(tl.uint8))
    byte = tile * BYTES_PER_TILE + tl.arange(0, BYTES_PER_TILE)
    r = tl.arange(0, WIDTH_BLOCK)
    in_width = r < width
    source = tl.load(kv_source_ptr + req * width + r, mask=in_width, other=0)
    target = tl.load(kv_target_ptr + req * width + r, mask=in_width, other=0)
    moved = (in_width & (source != target))[:, None] & (byte < stride)[None, :]
    rows = tl.load(base + source[:, None] * stride + byte[None, :], mask=moved)
    # A row may be another row's target: every thread's loads land before any thread stores
    # (from a 64-wide accept block Triton spreads the rows over warps).
    tl.debug_barrier()
    tl.store(base + target[:, None] * stride + byte[None, :], rows, mask=moved)


# Bytes a program holds at once (its request's rows x its byte tile): at 4 KiB no build for
# sm_86 / 90 / 120 spills registers, at any accept width.
_PROGRAM_BYTES = 4096
_NUM_WARPS = 4


class TiledKVMover:
    """Moves the accepted rows of a pool that SGLang moves with its tiled copy. The pool's tables
    are read at each move: SGLang may rebuild its buffers after startup."""

    def __init__(self, pool):
        self.pool = pool
        self.widest_row = int(pool.data_strides.max())  # once, at startup

    def __call__(self, kv_target: torch.Tensor, kv_source: torch.Tensor, width: int) -> None:
        bs = kv_target.numel() // width
        if bs == 0:
            return
        width_block = triton.next_power_of_2(width)
        tile = max(16, _PROGRAM_BYTES // width_block)
        data_ptrs = self.pool.data_ptrs
        grid = (bs, int(data_ptrs.numel()), triton.cdiv(self.widest_row, tile))
        _move_accepted_kv_kernel[grid](
            data_ptrs,
            self.pool.data_strides,
            kv_target,
            kv_source,
            width,
            WIDTH_BLOCK=width_block,
            BYTES_PER_TILE=tile,
            num_warps=_NUM_WARPS,
        )


def tiled_move_pool(kvcache):
    """The MHA pool behind ``kvcache`` when SGLang moves its slots with the tiled copy over
    ``data_ptrs`` (a plain ``MHATokenToKVPool``, alone or as a hybrid target's full-attention
    pool), else None."""
    # Imported here: the payload's CPU tests load this module without sglang.
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, MHATokenToKVPool

    pool = kvcache.full_kv_pool if type(kvcache) is HybridLinearKVPool else kvcache
    if type(pool) is not MHATokenToKVPool or getattr(pool, "layer_num", 0) == 0:
        return None
    if getattr(pool, "_kv_copy_config", None) is None:
        return None
    native = getattr(pool, "use_native_move_kv_cache", None)  # 0.5.17 on; 0.5.14 reads the env per move
    if native is None:
        native = envs.SGLANG_NATIVE_MOVE_KV_CACHE.get()
    if native or getattr(pool, "use_hnd", False) or getattr(pool, "native_k_scale_buffer", None) is not None:
        return None
    return pool


def accepted_kv_mover(kvcache) -> MoveAcceptedKV:
    """The commit's KV mover for this target's pool: ``TiledKVMover`` where it copies what SGLang's
    own mover would, SGLang's ``move_kv_cache`` elsewhere."""
    pool = tiled_move_pool(kvcache)
    if pool is None:
        return lambda kv_target, kv_source, width: kvcache.move_kv_cache(kv_target, kv_source)
    return TiledKVMover(pool)
