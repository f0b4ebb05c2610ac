#!/usr/bin/env bash
# A device bundle of a release whose pinned sglang-kernel cannot load on the GPU host's torch
# 2.11 (0.5.18 - 0.5.21: its builds link torch symbols 2.11 does not export), with another
# sglang-kernel build swapped in, trimmed as ../shared/device/build-site.sh trims it:
#   bash ../shared/device/build-site.sh 0.5.18 /tmp/site-0.5.18-pinned.tar.xz
#   bash scripts/gpu/kernel_swap.sh /tmp/site-0.5.18-pinned.tar.xz 0.4.5 .devsite18/site-0.5.18.tar.xz
# 0.4.5 (0.5.17's pin) loads with torch 2.11 and exports every op these releases' triton and
# flashinfer engine path calls (read from their sources, 2026-12-05); sglang refuses another
# kernel version at start unless SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1. What runs is then the
# release's Python over 0.4.5's kernels, not the release as shipped: say so beside any result.
set -euo pipefail
usage="usage: bash scripts/gpu/kernel_swap.sh BUNDLE KERNEL_VERSION OUT.tar.xz"
bundle=${1:?$usage}; kernel=${2:?$usage}; out=${3:?$usage}
[ -f "$bundle" ] || { echo "kernel_swap: no bundle at $bundle" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/site" "$work/whl"
tar -xJf "$bundle" -C "$work/site"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$work/whl" "sglang-kernel==$kernel"
rm -rf "$work/site/sgl_kernel" "$work"/site/sglang_kernel-*.dist-info
unzip -q -o "$work"/whl/sglang_kernel-*.whl -d "$work/site" \
  -x 'sgl_kernel/flash_ops*.so' 'sgl_kernel/flashmla_ops*.so' 'sgl_kernel/sm100/*' 'sgl_kernel/infllm_ops*.so'
mkdir -p "$(dirname "$out")"
tar -C "$work/site" -I 'xz -T2 -6' -cf "$out" .
echo "wrote $out ($(du -h "$out" | cut -f1)): $(basename "$bundle") with sglang-kernel $kernel"
