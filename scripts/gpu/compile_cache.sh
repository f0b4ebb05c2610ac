#!/usr/bin/env bash
# The kernels a device machine compiles on its first engine start (Triton's cache, SGLang's
# tvm-ffi JIT modules, flashinfer's JIT modules), kept from one call for the next: a fresh
# machine spends 95-160 s of its first engine compiling them (docs/BENCHMARKS.md, "How noisy are
# these numbers?"), the same binaries every time for one bundle and GPU architecture.
#   bash scripts/gpu/compile_cache.sh save ARCHIVE [SITE]     after the jobs ($OUT/compile-cache.tar.xz)
#   bash scripts/gpu/compile_cache.sh restore ARCHIVE [SITE]  before the first engine
# SITE is the unpacked bundle (/tmp/site). Saved: ~/.triton/cache whole (a content-addressed
# store keyed by source, options and target); the built .so of each ~/.cache/tvm-ffi module,
# which SGLang loads without a build when present; flashinfer's built .so per module, restored
# as the bundle's AOT modules (SITE/flashinfer/data/aot/NAME/NAME.so, which flashinfer loads
# without ninja), and only where the archive's flashinfer version and GPU architecture are the
# bundle's and the GPU's. Autotuning still runs in every process: only compiles are skipped.
set -euo pipefail
usage="usage: bash scripts/gpu/compile_cache.sh save|restore ARCHIVE [SITE]"
mode=${1:?$usage}
archive=${2:?$usage}
site=${3:-/tmp/site}
limit_bytes=$((15 * 1024 * 1024))  # a file back from a device call is at most 16 MiB
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

flashinfer_version() {
  local info
  info=$(compgen -G "$site/flashinfer_python-*.dist-info" | head -n 1) || return 0
  info=${info##*/flashinfer_python-}
  echo "${info%.dist-info}"
}

gpu_arch() {  # "9.0" -> 90
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .'
}

save() {
  [ -d "$HOME/.triton/cache" ] && mkdir -p "$stage/triton" && cp -r "$HOME/.triton/cache/." "$stage/triton/"
  local so rel
  if [ -d "$HOME/.cache/tvm-ffi" ]; then
    while IFS= read -r so; do
      rel=${so#"$HOME/.cache/tvm-ffi/"}
      mkdir -p "$stage/tvm-ffi/$(dirname "$rel")" && cp "$so" "$stage/tvm-ffi/$rel"
    done < <(find "$HOME/.cache/tvm-ffi" -mindepth 2 -maxdepth 2 -name '*.so')
  fi
  if [ -d "$HOME/.cache/flashinfer" ]; then
    # ~/.cache/flashinfer/VERSION/ARCH/cached_ops/NAME/NAME.so -> flashinfer/VERSION/ARCH/NAME/NAME.so
    while IFS= read -r so; do
      rel=${so#"$HOME/.cache/flashinfer/"}
      rel=${rel/\/cached_ops\///}
      mkdir -p "$stage/flashinfer/$(dirname "$rel")" && cp "$so" "$stage/flashinfer/$rel"
    done < <(find "$HOME/.cache/flashinfer" -path '*/cached_ops/*' -name '*.so')
  fi
  if [ -z "$(ls -A "$stage")" ]; then
    echo "compile cache: nothing compiled to keep"
    return 0
  fi
  du -sh "$stage"/* | sed 's|\t.*/|  |; s|^|compile cache, unpacked: |'
  mkdir -p "$(dirname "$archive")"
  # written aside and moved in whole: a save cut off leaves no archive the next call would trust
  tar -C "$stage" -cf - . | xz -T0 -6 > "$archive.part"
  mv "$archive.part" "$archive"
  local size
  size=$(stat -c %s "$archive")
  if [ "$size" -gt "$limit_bytes" ]; then
    rm -f "$archive"
    echo "compile cache: $((size / 1024 / 1024)) MiB packed, over the 15 MiB a call brings back; not kept"
    return 0
  fi
  echo "compile cache: kept $(basename "$archive") ($((size / 1024)) KiB)"
}

restore() {
  if [ ! -f "$archive" ]; then
    echo "compile cache: none carried ($archive); every kernel compiles"
    return 0
  fi
  xz -dc "$archive" | tar -C "$stage" -xf -
  if [ -d "$stage/triton" ]; then
    mkdir -p "$HOME/.triton/cache" && cp -r "$stage/triton/." "$HOME/.triton/cache/"
  fi
  if [ -d "$stage/tvm-ffi" ]; then
    mkdir -p "$HOME/.cache/tvm-ffi" && cp -r "$stage/tvm-ffi/." "$HOME/.cache/tvm-ffi/"
  fi
  local restored=0 version arch dir
  version=$(flashinfer_version)
  arch=$(gpu_arch)
  if [ -n "$version" ] && [ -n "$arch" ]; then
    for dir in "$stage/flashinfer/$version/$arch" "$stage/flashinfer/$version/${arch}a"; do
      [ -d "$dir" ] || continue
      mkdir -p "$site/flashinfer/data/aot" && cp -r "$dir/." "$site/flashinfer/data/aot/"
      restored=$(find "$dir" -name '*.so' | wc -l)
    done
  fi
  echo "compile cache: restored $(basename "$archive"): triton $(find "$stage/triton" -type f 2>/dev/null | wc -l) files," \
    "tvm-ffi $(find "$stage/tvm-ffi" -name '*.so' 2>/dev/null | wc -l) modules," \
    "flashinfer $restored modules (bundle's flashinfer ${version:-absent}, GPU sm${arch:-?})"
}

case $mode in
  save) save ;;
  restore) restore ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
