#!/usr/bin/env bash
# The kernels a device machine compiles on its first engine start (Triton's cache, SGLang's
# tvm-ffi JIT modules, flashinfer's JIT modules), kept from one call for the next: a fresh
# machine spends 95-160 s of its first engine compiling them (docs/BENCHMARKS.md, "How noisy are
# these numbers?"), the same binaries every time for one bundle and GPU architecture.
#   bash scripts/gpu/compile_cache.sh save ARCHIVE [SITE]     after the jobs ($OUT/compile-cache.tar.xz)
#   bash scripts/gpu/compile_cache.sh restore ARCHIVE [SITE]  before the first engine
# SITE is the unpacked bundle (/tmp/site). Saved, in this order while the archive stays under
# COMPILE_CACHE_MAX_MIB (default 8: what a call can carry beside a 39-46 MB bundle; check with
# scripts/gpu/transfer_size.sh): flashinfer's built modules, restored as the bundle's AOT
# modules (SITE/flashinfer/data/aot/NAME/NAME.so, which flashinfer loads without ninja) only
# where the archive's flashinfer version and GPU architecture are the bundle's and the GPU's;
# the built module of each ~/.cache/tvm-ffi build dir, which SGLang loads without a build when
# present; then ~/.triton/cache whole (content-addressed by source, options and target; Triton
# writes each file aside and renames it in). A module is kept only where its ninja log records
# its link, so a build cut off mid-link is not carried. Autotuning still runs in every
# process: only compiles are skipped.
set -euo pipefail
usage="usage: bash scripts/gpu/compile_cache.sh save|restore ARCHIVE [SITE]"
mode=${1:?$usage}
archive=${2:?$usage}
site=${3:-/tmp/site}
max_mib=${COMPILE_CACHE_MAX_MIB:-8}
limit_bytes=$((max_mib * 1024 * 1024))
stage=$(mktemp -d)
trap 'rm -rf "$stage" "$archive.part"' EXIT
trap 'exit 143' TERM INT

flashinfer_version() {
  local info
  info=$(compgen -G "$site/flashinfer_python-*.dist-info" | head -n 1) || return 0
  info=${info##*/flashinfer_python-}
  echo "${info%.dist-info}"
}

gpu_arch() {  # "9.0" -> 90
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .'
}

linked() {  # a ninja build dir's NAME.so, where its .ninja_log records building it
  local so=$1
  grep -qsF "$(basename "$so")" "$(dirname "$so")/.ninja_log"
}

keep() {  # copy $1 to $stage/$2
  mkdir -p "$stage/$(dirname "$2")" && cp "$1" "$stage/$2"
}

unpacked() {  # each path's size on disk, for the log
  du -sh "$@" | sed 's|\t.*/|  |; s|^|compile cache, unpacked: |'
}

pack() {  # the stage into $archive (written aside, moved in whole); 1 where it would be too large
  # (called under `||` and `if`, where set -e does not hold: each step checked)
  mkdir -p "$(dirname "$archive")" || return 2
  tar -C "$stage" -cf - . | xz -T0 -6 > "$archive.part" || return 2
  if [ "$(stat -c %s "$archive.part")" -gt "$limit_bytes" ]; then
    rm -f "$archive.part"
    return 1
  fi
  mv "$archive.part" "$archive"
}

save() {
  local so rel version arch
  if [ -d "$HOME/.cache/flashinfer" ]; then
    # ~/.cache/flashinfer/VERSION/ARCH/cached_ops/NAME/NAME.so -> flashinfer/VERSION/ARCH/NAME/NAME.so
    while IFS= read -r so; do
      rel=${so#"$HOME/.cache/flashinfer/"}
      linked "$so" && keep "$so" "flashinfer/${rel/\/cached_ops\///}"
    done < <(find "$HOME/.cache/flashinfer" -path '*/cached_ops/*' -name '*.so')
  fi
  # what this machine restored: kept again, or the next archive would lack it
  version=$(flashinfer_version)
  arch=$(gpu_arch)
  if [ -n "$version" ] && [ -n "$arch" ] && [ -d "$site/flashinfer/data/aot" ]; then
    while IFS= read -r so; do
      rel=${so#"$site/flashinfer/data/aot/"}
      [ -e "$stage/flashinfer/$version/${arch}a/$rel" ] || keep "$so" "flashinfer/$version/$arch/$rel"
    done < <(find "$site/flashinfer/data/aot" -mindepth 2 -maxdepth 2 -name '*.so')
  fi
  if [ -d "$HOME/.cache/tvm-ffi" ]; then
    while IFS= read -r so; do
      rel=${so#"$HOME/.cache/tvm-ffi/"}
      linked "$so" && keep "$so" "tvm-ffi/$rel"
    done < <(find "$HOME/.cache/tvm-ffi" -mindepth 2 -maxdepth 2 -name '*.so')
  fi
  local modules=no
  if [ -n "$(ls -A "$stage")" ]; then
    unpacked "$stage"/*
    pack || { echo "compile cache: the modules alone not packed under $max_mib MiB; not kept"; return 0; }
    modules=yes
  fi
  if [ -d "$HOME/.triton/cache" ]; then
    mkdir -p "$stage/triton" && cp -r "$HOME/.triton/cache/." "$stage/triton/"
    unpacked "$stage/triton"
    if ! pack; then
      echo "compile cache: Triton's cache not packed under $max_mib MiB; kept without it"
    fi
  fi
  if [ ! -f "$archive" ]; then
    echo "compile cache: none kept"
    return 0
  fi
  echo "compile cache: kept $(basename "$archive") ($(( $(stat -c %s "$archive") / 1024 )) KiB; modules: $modules)"
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
      restored=$((restored + $(find "$dir" -name '*.so' | wc -l)))
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
