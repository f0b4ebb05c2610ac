"""The commit's target-KV mover (overlay/.../ddtree_kv_move.py): what it copies, which pools get it,
and that it builds for the users' GPUs. The kernel runs in Triton's CPU interpreter over real
buffers addressed by ``data_ptrs``, as SGLang's tiled copy addresses them."""

from __future__ import annotations

import sys
import types

import pytest
from payload_modules import load_payload_module, skip_unless_interpreted, triton_interpreter

torch = pytest.importorskip("torch")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    kernels = load_payload_module("sglang.srt.speculative.ddtree_kernels")
    kv_move = load_payload_module("sglang.srt.speculative.ddtree_kv_move")

skip_unless_interpreted(triton)

SLOTS = 64


class FakeMHAPool:
    """The tables SGLang's ``MHATokenToKVPool`` keeps for its tiled copy, over real CPU buffers:
    per layer a K and a V buffer (V narrower here, so the strides differ), each slot a row."""

    def __init__(self, layers=3, heads=2, k_dim=8, v_dim=4, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.k_buffer = [torch.randn(SLOTS, heads, k_dim, generator=gen).bfloat16() for _ in range(layers)]
        self.v_buffer = [torch.randn(SLOTS, heads, v_dim, generator=gen).bfloat16() for _ in range(layers)]
        buffers = [*self.k_buffer, *self.v_buffer]
        self.data_ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
        self.data_strides = torch.tensor([b.stride(0) * b.element_size() for b in buffers])
        self._kv_copy_config = {"bytes_per_tile": 128, "num_warps": 4}
        self.layer_num = layers

    def buffers(self):
        return [*self.k_buffer, *self.v_buffer]


def verify_blocks(bs, n, seed):
    """Each request's verify block: n distinct slots, no slot shared between requests."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(SLOTS, generator=gen)[: bs * n].view(bs, n).long()


def random_accepts(bs, n, width, seed):
    """eagle_sample's accept_index / accept_lens for random root-first paths, nodes in any order
    (a node can sit at a lower index than its depth, so a slot is both a source and a target)."""
    gen = torch.Generator().manual_seed(seed)
    accept_lens = torch.randint(1, width + 1, (bs,), generator=gen, dtype=torch.int32)
    accept_index = torch.full((bs, width), -1, dtype=torch.int32)
    for b in range(bs):
        nodes = torch.randperm(n - 1, generator=gen)[: int(accept_lens[b]) - 1] + 1
        accept_index[b, : int(accept_lens[b])] = b * n + torch.cat([torch.tensor([0]), nodes]).int()
    return accept_index, accept_lens


@pytest.mark.parametrize(("bs", "n", "width", "seed"), [(1, 9, 8, 0), (5, 12, 8, 1), (3, 17, 16, 2), (4, 9, 5, 3)])
def test_committed_positions_get_their_accepted_nodes_kv_and_every_other_slot_stays(bs, n, width, seed):
    pool = FakeMHAPool(seed=seed)
    cache_loc = verify_blocks(bs, n, seed)
    accept_index, accept_lens = random_accepts(bs, n, width, seed)
    predict = torch.zeros(bs * n, dtype=torch.int32)
    before = [b.clone() for b in pool.buffers()]
    with triton_interpreter():
        accepted = kernels.accepted_paths(predict, accept_index, accept_lens, torch.zeros(bs, dtype=torch.long), cache_loc)
        kv_move.TiledKVMover(pool)(accepted.kv_target, accepted.kv_source, width)
    want = [b.clone() for b in before]
    for b in range(bs):
        for r in range(int(accept_lens[b])):
            node = int(accept_index[b, r]) - b * n
            for got_buffer, old in zip(want, before, strict=True):
                got_buffer[cache_loc[b, r]] = old[cache_loc[b, node]]
    assert all(torch.equal(got, w) for got, w in zip(pool.buffers(), want, strict=True))


def test_rows_wider_than_a_tile_permuted_within_a_request_move_whole():
    # W = 40: a 64-row block, 64-byte tiles; K rows of 96 bytes span two tiles, V rows one.
    width = 40
    pool = FakeMHAPool(k_dim=24, v_dim=8)
    gen = torch.Generator().manual_seed(5)
    target = torch.arange(width)
    source = torch.randperm(width, generator=gen)  # every row a source and a target
    before = [b.clone() for b in pool.buffers()]
    with triton_interpreter():
        kv_move.TiledKVMover(pool)(target, source, width)
    for got, old in zip(pool.buffers(), before, strict=True):
        want = old.clone()
        want[target] = old[source]
        assert torch.equal(got, want)


def test_an_empty_batch_launches_nothing():
    pool = FakeMHAPool()
    mover = kv_move.TiledKVMover(pool)
    pool.data_ptrs = None  # a launch would fail on it
    mover(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), 8)


# --- which pools get it -------------------------------------------------------------------------


@pytest.fixture
def sglang_pools(monkeypatch):
    """Stand-ins for the two pool classes and SGLang's environment switch that
    ``tiled_move_pool`` reads."""
    memory_pool = types.ModuleType("sglang.srt.mem_cache.memory_pool")

    class MHATokenToKVPool(FakeMHAPool):
        def __init__(self, **overrides):
            super().__init__()
            self.moves = []
            for name, value in overrides.items():
                setattr(self, name, value)

        def move_kv_cache(self, tgt_loc, src_loc):
            self.moves.append((tgt_loc, src_loc))

    class HybridLinearKVPool:
        def __init__(self, full_kv_pool):
            self.full_kv_pool = full_kv_pool

        def move_kv_cache(self, tgt_loc, src_loc):
            self.full_kv_pool.move_kv_cache(tgt_loc, src_loc)

    class PagedPool(MHATokenToKVPool):
        pass

    memory_pool.MHATokenToKVPool = MHATokenToKVPool
    memory_pool.HybridLinearKVPool = HybridLinearKVPool
    native = {"on": False}
    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = types.SimpleNamespace(SGLANG_NATIVE_MOVE_KV_CACHE=types.SimpleNamespace(get=lambda: native["on"]))
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.memory_pool", memory_pool)
    monkeypatch.setitem(sys.modules, "sglang.srt.environ", environ)
    return types.SimpleNamespace(MHA=MHATokenToKVPool, Hybrid=HybridLinearKVPool, Paged=PagedPool, native=native)


def test_a_plain_mha_pool_and_a_hybrid_targets_full_attention_pool_get_the_tiled_mover(sglang_pools):
    plain = sglang_pools.MHA()
    assert isinstance(kv_move.accepted_kv_mover(plain), kv_move.TiledKVMover)
    hybrid = sglang_pools.Hybrid(sglang_pools.MHA())
    mover = kv_move.accepted_kv_mover(hybrid)
    assert isinstance(mover, kv_move.TiledKVMover) and mover.pool is hybrid.full_kv_pool


@pytest.mark.parametrize(
    "pool",
    [
        pytest.param(lambda p: p.Paged(), id="another pool class"),
        pytest.param(lambda p: p.MHA(use_hnd=True), id="head-major layout"),
        pytest.param(lambda p: p.MHA(use_native_move_kv_cache=True), id="native mover"),
        pytest.param(lambda p: p.MHA(native_k_scale_buffer=[torch.zeros(1)]), id="fp4 scales"),
        pytest.param(lambda p: p.MHA(_kv_copy_config=None), id="no tiled copy"),
        pytest.param(lambda p: p.MHA(layer_num=0), id="no layers"),
        pytest.param(lambda p: p.Hybrid(p.Paged()), id="hybrid over another pool class"),
    ],
)
def test_pools_that_sglang_moves_another_way_keep_sglangs_mover(sglang_pools, pool):
    kvcache = pool(sglang_pools)
    mover = kv_move.accepted_kv_mover(kvcache)
    assert not isinstance(mover, kv_move.TiledKVMover)
    target, source = torch.tensor([1, 2]), torch.tensor([3, 2])
    mover(target, source, 2)
    moves = (kvcache.full_kv_pool if isinstance(kvcache, sglang_pools.Hybrid) else kvcache).moves
    assert moves == [(target, source)]


def test_sglangs_native_move_switch_keeps_sglangs_mover_on_0_5_14(sglang_pools):
    sglang_pools.native["on"] = True  # 0.5.14's pool has no use_native_move_kv_cache: the env decides
    assert not isinstance(kv_move.accepted_kv_mover(sglang_pools.MHA()), kv_move.TiledKVMover)


AOT_SCRIPT = """
import json
from aot_build import CAPABILITIES, compile_for
import triton
from payload_modules import load_payload_module
kv_move = load_payload_module("sglang.srt.speculative.ddtree_kv_move")
sig = {"data_ptrs": "*u64", "data_strides": "*i64", "kv_target_ptr": "*i64", "kv_source_ptr": "*i64",
       "width": "i32", "WIDTH_BLOCK": "constexpr", "BYTES_PER_TILE": "constexpr"}
built = []
for capability in CAPABILITIES:
    for width in (5, 16, 33):  # a small budget's accept width, a 16-block's, a 32-block's
        width_block = triton.next_power_of_2(width)
        consts = {"WIDTH_BLOCK": width_block, "BYTES_PER_TILE": kv_move._PROGRAM_BYTES // width_block}
        built.append(compile_for(kv_move._move_accepted_kv_kernel, sig, consts, capability, num_warps=kv_move._NUM_WARPS))
# From a 64-wide block the rows spread over warps: a barrier must sit between loads and stores.
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
consts = {"WIDTH_BLOCK": 64, "BYTES_PER_TILE": kv_move._PROGRAM_BYTES // 64}
ptx = triton.compile(ASTSource(kv_move._move_accepted_kv_kernel, sig, consts), target=GPUTarget("cuda", 90, 32),
                     options={"num_warps": kv_move._NUM_WARPS}).asm["ptx"].splitlines()
lines = lambda word: [i for i, line in enumerate(ptx) if word in line]
last_load, first_store = max(lines("ld.global")), min(lines("st.global"))
built.append(any(last_load < i < first_store for i in lines("bar.sync")))
print(json.dumps(built))
"""


@pytest.mark.slow
def test_the_mover_compiles_ahead_of_time_for_sm86_sm90_and_sm120():
    """For the RTX A6000, the H200 and the RTX PRO 6000, without a GPU; no build spills."""
    from aot_build import run_aot_script

    *built, barrier_between = run_aot_script(AOT_SCRIPT, timeout=600)
    assert len(built) == 9 and all(size > 0 and stack == 0 for size, stack in built), built
    assert barrier_between, "every row is loaded before any is stored"
