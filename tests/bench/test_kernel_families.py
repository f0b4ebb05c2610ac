"""kernel_families: what a kernel name in a torch-profiler trace does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddtree_overlay.bench.kernel_families import (
    DDTREE_KERNELS,
    FAMILIES,
    kernel_family,
    short_kernel_name,
)

SPECULATIVE = Path(__file__).resolve().parents[2] / "overlay" / "sglang" / "srt" / "speculative"


def test_ddtree_kernels_are_the_payloads_triton_kernels() -> None:
    jitted = set()
    for path in SPECULATIVE.glob("ddtree_*.py"):
        jitted |= set(re.findall(r"@triton\.jit(?:\(.*\))?\s*\ndef (\w+_kernel)\(", path.read_text()))
    assert jitted == DDTREE_KERNELS


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("nvjet_tst_128x8_64x3_1x1_v_bz_TNN", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", "gemm"),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)", "gemm"),
        # SGLang's Triton attention: extend (verify) and decode
        ("_fwd_kernel", "attention"),
        ("_fwd_kernel_unified", "attention"),
        ("_fwd_grouped_kernel_stage1", "attention"),
        ("_fwd_kernel_stage2", "attention"),
        ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)2, 128u>, flashinfer::PagedParams>(flashinfer::PagedParams)", "attention"),
        ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> > > > > >(flash::FlashAttnFwdSm90::Params)", "attention"),
        ("fused_sigmoid_gating_delta_rule_update_kernel", "gdn/recurrent"),
        ("_causal_conv1d_update_kernel", "gdn/recurrent"),
        ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "gdn/recurrent"),
        ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", "norm/act/rope/elementwise"),
        ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(__nv_bfloat16*, __nv_bfloat16 const*, int)", "norm/act/rope/elementwise"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, std::array<char*, 1ul> >(int, at::native::FillFunctor<long>, std::array<char*, 1ul>)", "norm/act/rope/elementwise"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>)", "sampling/top-k"),
        ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int)", "sampling/top-k"),
        ("void at::native::mbtopk::radixFindKthValues<float, unsigned int, unsigned int, 2>(at::cuda::detail::TensorInfo<float const, unsigned int>, unsigned int)", "sampling/top-k"),
        ("_tree_verify_kernel", "ddtree"),
        ("_verify_inputs_kernel", "ddtree"),
        ("_draft_block_kernel", "ddtree"),
        ("assign_req_to_token_pool", "spec/KV bookkeeping"),
        ("_dflash_accept_bonus_contig_kernel", "spec/KV bookkeeping"),
        ("create_flashinfer_kv_indices_triton", "spec/KV bookkeeping"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
        ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 2>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)", "communication"),
        ("mystery_kernel", "other"),
    ],
)
def test_kernel_names_fall_in_their_family(name: str, family: str) -> None:
    assert family in FAMILIES
    assert kernel_family(name) == family


def test_copies_and_memsets_are_one_family_by_category() -> None:
    assert kernel_family("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy") == "memcpy/memset"
    assert kernel_family("Memset (Device)", "gpu_memset") == "memcpy/memset"


def test_short_names_drop_void_and_the_parameter_list() -> None:
    assert short_kernel_name("void f<(bool)1>(int (*)(int), float)") == "f<(bool)1>"
    assert short_kernel_name("_fwd_kernel") == "_fwd_kernel"
    assert short_kernel_name("Memcpy DtoH (Device -> Pinned)") == "Memcpy DtoH (Device -> Pinned)"
    assert short_kernel_name("x" * 80, width=10) == "x" * 9 + "…"
