"""DDTREE's split-KV tree-verify attention (overlay/.../ddtree_verify_attention.py) and the call
a patched triton backend makes (ddtree_attention_choice).

Two oracles on the same inputs: a plain-torch attention in fp64 (every tree node attends to its
request's whole prefix and to its ancestors and itself), and SGLang 0.5.14's own
``extend_attention_fwd`` (read from the wheel) with the FULL-layout mask DDTREE gives it today.
The drafter's block (every tail key visible, no mask) against the same two: the fp64 attention
with every node seeing every node, and ``extend_attention_fwd`` as the drafter's non-causal
layers call it (no mask, ``is_causal`` False).
Random trees with unreachable padding nodes, batches of several requests whose prefixes run from
0 keys to more than one split, prefix slots shuffled through the pool, GQA groups of 2 to 4
heads, head dims 128 and 256. The kernels run in Triton's CPU interpreter (see
test_payload_ddtree_kernels for why the variable is set only around the import).

The 16-bit case runs in fp16: the interpreter cannot take a bf16 ``tl.dot`` (it multiplies the
raw bits; triton-lang/triton#11584), so bf16 is checked by the sm_90 build here and by
scripts/gpu/verify_attention.py on a GPU, against both of these oracles. The kernel has one
code path for every 16-bit dtype (probabilities rounded to the value dtype before their product
with V, as SGLang's kernel rounds them).

Tolerances: fp32, 1e-5 absolute and relative (sums in another order); fp16, 5e-3 absolute and
relative against the fp64 oracle and 2e-3 against SGLang's kernel, which rounds the same way.
"""

from __future__ import annotations

import importlib.util
import sys
import types
import zipfile

import pytest
from payload_modules import load_payload_module, skip_unless_interpreted, triton_interpreter

torch = pytest.importorskip("torch")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    va = load_payload_module("sglang.srt.speculative.ddtree_verify_attention")
    ac = load_payload_module("sglang.srt.speculative.ddtree_attention_choice")
    du = load_payload_module("sglang.srt.speculative.ddtree_utils")
skip_unless_interpreted(triton)

SPLIT = va.MIN_SPLIT_TOKENS
# (q heads, kv heads, head dim, N, prefix lengths): a row block and a tail tile short of one,
# several of each, a GQA group that is not a power of two.
SHAPES = [
    (4, 2, 128, 9, [0, 1, SPLIT + 37]),
    (8, 2, 128, 17, [3 * SPLIT + 5, 40]),
    (6, 2, 256, 33, [1, 2 * SPLIT + 1]),
]


def random_parents(n: int, gen: torch.Generator) -> list:
    """A tree of n nodes in pop order (parent < node), the last ones unreachable padding (-1)."""
    padding = int(torch.randint(0, 3, (1,), generator=gen))
    parents = [-1]
    for node in range(1, n):
        parents.append(-1 if node >= n - padding else int(torch.randint(0, node, (1,), generator=gen)))
    return parents


def ancestors_or_self(parents: list) -> torch.Tensor:
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for node in range(n):
        hop = node
        while hop >= 0:
            mask[node, hop] = True
            hop = parents[hop]
    return mask


class Verify:
    """One verify forward's inputs in the triton backend's layouts."""

    def __init__(self, q_heads, kv_heads, dim, n, prefix_lens, dtype, seed):
        gen = torch.Generator().manual_seed(seed)
        bs = len(prefix_lens)
        self.n, self.bs, self.dim = n, bs, dim
        self.prefix_lens = prefix_lens
        tokens = bs * n
        slots = sum(prefix_lens) + tokens + 7

        def rand(*shape):
            return torch.randn(*shape, generator=gen).to(dtype)

        self.q = rand(tokens, q_heads, dim)
        self.k = rand(tokens, kv_heads, dim)
        self.v = rand(tokens, kv_heads, dim)
        self.k_buffer = rand(slots, kv_heads, dim)
        self.v_buffer = rand(slots, kv_heads, dim)
        perm = torch.randperm(slots, generator=gen)
        # The tree's own slots hold its keys, as after the backend's set_kv_buffer.
        self.out_cache_loc = perm[:tokens]
        self.k_buffer[self.out_cache_loc] = self.k
        self.v_buffer[self.out_cache_loc] = self.v
        self.kv_indptr = torch.tensor([0, *torch.tensor(prefix_lens).cumsum(0).tolist()], dtype=torch.int32)
        self.kv_indices = perm[tokens : tokens + sum(prefix_lens)].to(torch.int64)
        self.ancestors = torch.stack([ancestors_or_self(random_parents(n, gen)) for _ in range(bs)])
        self.sm_scale = dim**-0.5

    def prefix_slots(self, b):
        return self.kv_indices[int(self.kv_indptr[b]) : int(self.kv_indptr[b + 1])]

    def sglang_extend(self, sglang_extend, *, block=False) -> torch.Tensor:
        """SGLang's extend_attention_fwd on DDTREE's FULL-layout mask (per request [N, prefix + N],
        prefix columns True, as the payload's ``build_tree_custom_mask`` makes it); ``block``: as
        the drafter's non-causal layers call it, no mask and not causal."""
        prefix_lens = torch.tensor(self.prefix_lens)
        sizes = self.n * (prefix_lens + self.n)
        full_mask = None if block else du.build_tree_custom_mask(self.ancestors, prefix_lens, int(sizes.sum()))
        mask_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
        qo_indptr = torch.arange(0, (self.bs + 1) * self.n, self.n, dtype=torch.int32)
        out = torch.empty_like(self.q)
        with triton_interpreter():
            sglang_extend.extend_attention_fwd(
                self.q, self.k, self.v, out, self.k_buffer, self.v_buffer,
                qo_indptr, self.kv_indptr, self.kv_indices, full_mask, not block, mask_indptr,
                self.n, 1.0, 1.0, self.sm_scale,
            )
        return out

    def reference(self, k_scale=1.0, v_scale=1.0) -> torch.Tensor:
        """fp64: node i of request b attends to its prefix and its ancestors-or-self."""
        out = torch.empty(self.q.shape, dtype=torch.float64)
        group = self.q.shape[1] // self.k.shape[1]
        for b in range(self.bs):
            slots = self.prefix_slots(b)
            rows = slice(b * self.n, (b + 1) * self.n)
            for h in range(self.q.shape[1]):
                kvh = h // group
                q = self.q[rows, h].double()
                keys = torch.cat([self.k_buffer[slots, kvh].double() * k_scale, self.k[rows, kvh].double()])
                values = torch.cat([self.v_buffer[slots, kvh].double() * v_scale, self.v[rows, kvh].double()])
                visible = torch.cat([torch.ones(self.n, len(slots), dtype=torch.bool), self.ancestors[b]], dim=1)
                scores = (q @ keys.T * self.sm_scale).masked_fill(~visible, float("-inf"))
                out[rows, h] = torch.softmax(scores, dim=-1) @ values
        return out

    def run(self, num_splits, k_scale=1.0, v_scale=1.0, tail_mask=None, block=False) -> torch.Tensor:
        """The kernel under this tree's mask, ``tail_mask`` instead, or (``block``) none."""
        o = torch.empty_like(self.q)
        mask = self.ancestors.reshape(-1) if tail_mask is None else tail_mask
        with triton_interpreter():
            va.tree_verify_attention(
                self.q, self.k, self.v, o, self.k_buffer, self.v_buffer, self.kv_indptr, self.kv_indices,
                None if block else mask,
                num_verify_tokens=self.n, num_splits=num_splits, sm_scale=self.sm_scale,
                k_scale=k_scale, v_scale=v_scale,
            )
        return o


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"h{s[0]}/{s[1]}-d{s[2]}-n{s[3]}")
def test_fp32_matches_the_plain_attention(shape):
    verify = Verify(*shape, dtype=torch.float32, seed=shape[3])
    torch.testing.assert_close(verify.run(num_splits=3).double(), verify.reference(), atol=1e-5, rtol=1e-5)


# Tile candidates ``scripts/gpu/verify_attention.py --tiles`` times: at head dim 128 (where
# ``block_config`` runs 64 x 64) the former 64 x 32 and 128 x 16 and the 4-warp 32 x 64; at 256
# (the 27B shape's group of 6 x 33 nodes, here 3 x 13), the tiles that build with little or no spill.
TILE_CANDIDATES = [
    ((64, 32, 8), (8, 2, 128, 17)),
    ((128, 16, 8), (8, 2, 128, 9)),
    ((32, 64, 4), (8, 2, 128, 17)),
    ((32, 32, 8), (6, 2, 256, 13)),
    ((16, 32, 4), (6, 2, 256, 13)),
    ((32, 64, 8), (6, 2, 256, 13)),
    ((64, 32, 8), (6, 2, 256, 13)),
]


@pytest.mark.parametrize("tile, heads", TILE_CANDIDATES, ids=lambda v: "x".join(map(str, v)))
def test_candidate_tiles_compute_the_same_attention(monkeypatch, tile, heads):
    monkeypatch.setattr(va, "block_config", lambda head_dim: tile)
    verify = Verify(*heads, [3 * SPLIT + 5, 40], dtype=torch.float32, seed=heads[3])
    torch.testing.assert_close(verify.run(num_splits=3).double(), verify.reference(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("setting", [{"NUM_STAGES": 3}, {"MAX_REGISTERS": 128}], ids=str)
def test_the_launch_settings_the_timing_script_varies_compute_the_same_attention(monkeypatch, setting):
    """``scripts/gpu/verify_attention.py --stages / --max-registers`` (the interpreter runs the
    kernel whatever they are; the launch must take them)."""
    for attr, value in setting.items():
        monkeypatch.setattr(va, attr, value)
    verify = Verify(8, 2, 128, 17, [3 * SPLIT + 5, 40], dtype=torch.float32, seed=10)
    torch.testing.assert_close(verify.run(num_splits=3).double(), verify.reference(), atol=1e-5, rtol=1e-5)


def test_a_smaller_min_split_computes_the_same_attention(monkeypatch):
    """``scripts/gpu/verify_attention.py --min-splits``: more, shorter prefix splits."""
    monkeypatch.setattr(va, "MIN_SPLIT_TOKENS", 64)
    verify = Verify(8, 2, 128, 17, [3 * 64 + 5, 40], dtype=torch.float32, seed=9)
    torch.testing.assert_close(verify.run(num_splits=5).double(), verify.reference(), atol=1e-5, rtol=1e-5)


def test_the_split_count_does_not_change_the_result():
    """One split or many: the same partial sums merged, to fp32 rounding."""
    verify = Verify(4, 2, 128, 9, [0, 1, 2 * SPLIT + 37], dtype=torch.float32, seed=5)
    torch.testing.assert_close(verify.run(num_splits=1), verify.run(num_splits=5), atol=1e-5, rtol=1e-5)


def test_pool_dequant_scales_apply_to_the_prefix_only():
    verify = Verify(4, 2, 128, 9, [SPLIT + 3, 5], dtype=torch.float32, seed=6)
    torch.testing.assert_close(
        verify.run(num_splits=2, k_scale=0.5, v_scale=2.0).double(),
        verify.reference(k_scale=0.5, v_scale=2.0),
        atol=1e-5, rtol=1e-5,
    )


def test_a_uint8_mask_buffer_longer_than_the_batch_reads_its_head():
    """Under a CUDA graph the backend copies the mask into the head of its uint8 buffer."""
    verify = Verify(4, 2, 128, 9, [7, SPLIT + 1], dtype=torch.float32, seed=7)
    buffer = torch.zeros(verify.ancestors.numel() + 100, dtype=torch.uint8)
    buffer[: verify.ancestors.numel()] = verify.ancestors.reshape(-1)
    torch.testing.assert_close(verify.run(2, tail_mask=buffer), verify.run(2), atol=0, rtol=0)


def test_splits_past_a_short_prefix_leave_their_partials_unwritten_and_unread(monkeypatch):
    """The partial buffers come from ``torch.empty`` (the graph's pool: stale memory): a split
    that saw no key writes only its lse, and the merge never reads its o, whatever is there."""
    verify = Verify(4, 2, 128, 9, [0, 3, SPLIT + 5], dtype=torch.float32, seed=14)
    monkeypatch.setattr(va.torch, "empty", lambda *shape, **kw: torch.full(*shape, float("nan"), **kw))
    out = verify.run(num_splits=6)  # at most two splits of any prefix here hold keys
    torch.testing.assert_close(out.double(), verify.reference(), atol=1e-5, rtol=1e-5)


def test_a_node_whose_mask_row_is_empty_still_sees_itself():
    """A padded request of a graph batch may read a stale or zero mask: its rows stay finite."""
    verify = Verify(4, 2, 128, 9, [0, 4], dtype=torch.float32, seed=8)
    out = verify.run(1, tail_mask=torch.zeros(verify.ancestors.numel(), dtype=torch.bool))
    assert torch.isfinite(out).all()
    verify.ancestors = torch.eye(verify.n, dtype=torch.bool).expand(verify.bs, -1, -1)
    torch.testing.assert_close(out.double(), verify.reference(), atol=1e-5, rtol=1e-5)


def backend_call(verify: Verify, call=ac.TreeVerifyAttention, **layer) -> torch.Tensor:
    """The call a patched triton backend's forward_extend makes (TreeVerifyAttention, or
    DraftBlockAttention with the drafter's mask: none)."""
    o = torch.empty_like(verify.q)
    mask = None if call is ac.DraftBlockAttention else verify.ancestors.reshape(-1)
    with triton_interpreter():
        call(max_prefix_len=4 * SPLIT, sm_count=8)(
            verify.q, verify.k, verify.v, o, layer.pop("k_buffer", verify.k_buffer),
            layer.pop("v_buffer", verify.v_buffer), verify.kv_indptr, verify.kv_indices,
            mask, num_verify_tokens=verify.n, sm_scale=verify.sm_scale,
            k_scale=1.0, v_scale=1.0, **layer,
        )
    return o


def test_the_backend_call_computes_a_plain_causal_layer():
    verify = Verify(4, 2, 128, 9, [SPLIT + 3, 5], dtype=torch.float32, seed=9)
    torch.testing.assert_close(backend_call(verify).double(), verify.reference(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("layer", "named"),
    [
        ({"causal": False}, "a non-causal layer"),
        ({"logit_cap": 30.0}, "a logit cap"),
        ({"sliding_window_size": 128}, "a sliding window"),
        ({"sinks": torch.zeros(4)}, "attention sinks"),
        ({"score_mod": lambda score, *index: score}, "a score_mod"),
        # --enable-unified-memory's page-major view, [pages, page size 1, kv heads, dim]: a
        # slot * stride(0) address with stride(1) taken for the head would read other heads.
        ("page_major", "a page-major KV pool"),
    ],
    ids=lambda case: case if isinstance(case, str) else None,
)
def test_the_backend_call_refuses_what_the_kernel_does_not_compute(layer, named):
    verify = Verify(4, 2, 128, 9, [SPLIT + 3], dtype=torch.float32, seed=10)
    if layer == "page_major":
        layer = {"k_buffer": verify.k_buffer.unsqueeze(1), "v_buffer": verify.v_buffer.unsqueeze(1)}
    with pytest.raises(ValueError, match=f"does not compute {named}: set SGLANG_DDTREE_VERIFY_ATTENTION=extend"):
        backend_call(verify, **layer)


def test_the_drafter_block_call_computes_a_non_causal_layer_over_prefix_and_block():
    verify = Verify(8, 2, 128, 16, [SPLIT + 3, 0, 5], dtype=torch.float32, seed=11)
    out = backend_call(verify, call=ac.DraftBlockAttention, causal=False)
    verify.ancestors = torch.ones(verify.bs, verify.n, verify.n, dtype=torch.bool)
    torch.testing.assert_close(out.double(), verify.reference(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("layer", "named"),
    [({"causal": True}, "a causal layer"), ({"sliding_window_size": 128}, "a sliding window")],
    ids=["causal", "sliding-window"],
)
def test_the_drafter_block_call_refuses_what_the_kernel_does_not_compute(layer, named):
    verify = Verify(4, 2, 128, 16, [SPLIT + 3], dtype=torch.float32, seed=12)
    with pytest.raises(ValueError, match=f"does not compute {named}: set SGLANG_DDTREE_DRAFT_ATTENTION=extend"):
        backend_call(verify, call=ac.DraftBlockAttention, **{"causal": False, **layer})


# SGLang's kernel divides its padded query rows (BLOCK_M past N) by zero; they are never stored.
SGLANG_PADDED_ROWS = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")


@SGLANG_PADDED_ROWS
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"h{s[0]}/{s[1]}-d{s[2]}-n{s[3]}")
def test_fp16_matches_the_plain_attention_and_sglangs_extend_kernel(shape, sglang_extend):
    verify = Verify(*shape, dtype=torch.float16, seed=shape[3] + 1)
    out = verify.run(num_splits=3)
    torch.testing.assert_close(out.double(), verify.reference(), atol=5e-3, rtol=5e-3)
    torch.testing.assert_close(out, verify.sglang_extend(sglang_extend), atol=2e-3, rtol=2e-3)


@SGLANG_PADDED_ROWS
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)], ids=["fp32", "fp16"])
def test_the_drafter_block_matches_sglangs_extend_kernel_as_the_drafter_calls_it(sglang_extend, dtype, tol):
    """The DFlash drafter's block: 16 tokens, non-causal, no mask, prefixes of 0 to several splits."""
    verify = Verify(8, 2, 128, 16, [2 * SPLIT + 9, 0, 33], dtype=dtype, seed=13)
    out = verify.run(num_splits=3, block=True)
    torch.testing.assert_close(out, verify.sglang_extend(sglang_extend, block=True), atol=tol, rtol=tol)


@SGLANG_PADDED_ROWS
def test_fp32_matches_sglangs_extend_kernel_on_a_long_gqa_batch(sglang_extend):
    verify = Verify(8, 2, 128, 17, [3 * SPLIT + 5, 0, 40], dtype=torch.float32, seed=9)
    torch.testing.assert_close(verify.run(num_splits=4), verify.sglang_extend(sglang_extend), atol=1e-5, rtol=1e-5)


SGLANG_EXTEND = "sglang/srt/layers/attention/triton_ops/extend_attention.py"


@pytest.fixture(scope="module")
def sglang_extend(sglang_wheel, tmp_path_factory):
    """SGLang 0.5.14's extend_attention.py from the wheel, loaded under the interpreter with
    stand-ins for the two imports it makes of sglang (a CPU here: no CUDA, no HIP)."""
    path = tmp_path_factory.mktemp("sglang") / "extend_attention.py"
    with zipfile.ZipFile(sglang_wheel) as wheel:
        path.write_bytes(wheel.read(SGLANG_EXTEND))
    utils = types.ModuleType("sglang.srt.utils")
    utils.is_cuda = utils.is_hip = utils.is_gfx95_supported = lambda: False
    prefill = types.ModuleType("sglang.srt.layers.attention.triton_ops.prefill_attention")
    prefill.context_attention_fwd = None
    stand_ins = {"sglang.srt.utils": utils, prefill.__name__: prefill}
    for package in ("sglang.srt.layers", "sglang.srt.layers.attention", "sglang.srt.layers.attention.triton_ops"):
        stand_ins[package] = types.ModuleType(package)
        stand_ins[package].__path__ = []
    spec = importlib.util.spec_from_file_location("sglang_extend_attention", path)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch, triton_interpreter():
        for name, stand_in in stand_ins.items():
            if name not in sys.modules:
                patch.setitem(sys.modules, name, stand_in)
        spec.loader.exec_module(module)
    return module


def test_the_split_count_fills_the_gpu_and_stops_at_the_longest_prefix():
    assert va.choose_num_splits(programs=8 * 2, max_prefix_len=32768, sm_count=132) == 17
    assert va.choose_num_splits(programs=16 * 8 * 2, max_prefix_len=32768, sm_count=132) == 2
    assert va.choose_num_splits(programs=1024, max_prefix_len=32768, sm_count=132) == 1
    assert va.choose_num_splits(programs=1, max_prefix_len=600, sm_count=132) == 3
    assert va.choose_num_splits(programs=1, max_prefix_len=10**6, sm_count=1000) == va.MAX_SPLITS



def test_the_tile_follows_the_head_dim():
    """64 x 64 above head dim 64 up to 128 (the 8B shape), 64 x 32 below, 32 x 32 at 256."""
    assert va.block_config(128) == (64, 64, 8)
    assert va.block_config(64) == (64, 32, 8)
    assert va.block_config(256) == (32, 32, 8)

AOT_SCRIPT = """
import json
from aot_build import CAPABILITIES, compile_for
from payload_modules import load_payload_module
va = load_payload_module("sglang.srt.speculative.ddtree_verify_attention")
strides = ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh",
           "stride_kbuf_s", "stride_kbuf_h", "stride_vbuf_s", "stride_vbuf_h")
partial = {
    "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "k_buffer_ptr": "*bf16", "v_buffer_ptr": "*bf16",
    "kv_indptr_ptr": "*i32", "kv_indices_ptr": "*i64", "tail_mask_ptr": "*u8", "part_o_ptr": "*fp32",
    "part_lse_ptr": "*fp32", "sm_scale": "fp32", "k_scale": "fp32", "v_scale": "fp32",
    **{name: "i32" for name in strides},
}
merge = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "o_ptr": "*bf16", "stride_ot": "i32", "stride_oh": "i32"}
built = []
# Qwen3-8B (32 q / 8 kv heads, dim 128) and Qwen3.6-27B (24 q / 4 kv heads, dim 256) at N = 17 and
# 33, each with block_config's tile; the 8B shape's drafter block too (N = 16, every key visible).
for capability in CAPABILITIES:
    for q_heads, kv_heads, dim in ((32, 8, 128), (24, 4, 256)):
        group = q_heads // kv_heads
        for n in (16, 17, 33) if dim == 128 else (17, 33):  # 16: the drafter's block, no mask
            block_m, block_n, warps = va.block_config(dim)
            splits = 8
            consts = dict(
                N=n, GROUP=group, NUM_Q_HEADS=q_heads, ROW_BLOCKS=va.row_blocks(group, n, block_m),
                NUM_SPLITS=splits, HEAD_DIM=dim, V_DIM=dim, BLOCK_D=dim, BLOCK_DV=dim,
                BLOCK_M=block_m, BLOCK_N=block_n, MIN_SPLIT=va.MIN_SPLIT_TOKENS, TAIL_ALL_VISIBLE=n == 16,
            )
            sig = dict(partial, **{name: "constexpr" for name in consts})
            built.append([capability, dim, *compile_for(va._tree_attention_partial_kernel, sig, consts, capability, divisible=strides, num_warps=warps, num_stages=va.NUM_STAGES, maxnreg=va.MAX_REGISTERS)])
            consts = dict(NUM_Q_HEADS=q_heads, PARTS=splits + 1, V_DIM=dim, BLOCK_PARTS=16, BLOCK_DV=dim)
            sig = dict(merge, **{name: "constexpr" for name in consts})
            built.append([capability, 0, *compile_for(va._tree_attention_merge_kernel, sig, consts, capability, divisible=("stride_ot", "stride_oh"), num_warps=2)])
print(json.dumps(built))
"""


@pytest.mark.slow
def test_the_kernels_compile_ahead_of_time_for_sm86_sm90_and_sm120():
    """bf16 at both model shapes and the 8B drafter's block, for the RTX A6000, the H200 and the RTX PRO 6000, without a
    GPU (ptxas ships in the triton wheel), each with the tile block_config gives that GPU and as
    the launcher specializes it there (aligned pointers and strides: the prefix loop pipelined).
    Each build fits the GPU's shared memory per block (compile_for) and spills no register to
    a stack frame."""
    from aot_build import run_aot_script

    built = run_aot_script(AOT_SCRIPT, timeout=600)
    assert len(built) == 30 and all(size > 0 for _, _, size, _ in built), built
    assert all(stack == 0 for *_, stack in built), built
