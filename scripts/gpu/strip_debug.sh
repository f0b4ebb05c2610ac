#!/usr/bin/env bash
# A device bundle with the debug sections taken out of its shared objects. The real xgrammar's
# bindings ship with debug info (xgrammar 0.2.1: 53.4 MB unpacked, 2.96 MB without it), which
# puts an XGRAMMAR=real bundle and the dense fixture weights past the 64 MiB transfer:
#   XGRAMMAR=real bash ../shared/device/build-site.sh 0.5.17 /tmp/site-0.5.17-xgrammar.tar.xz
#   bash scripts/gpu/strip_debug.sh /tmp/site-0.5.17-xgrammar.tar.xz .devsite17g/site-0.5.17.tar.xz
# `strip --strip-debug` keeps every symbol the loader and Python's imports resolve.
set -euo pipefail
usage="usage: bash scripts/gpu/strip_debug.sh BUNDLE OUT.tar.xz"
bundle=${1:?$usage}; out=${2:?$usage}
[ -f "$bundle" ] || { echo "strip_debug: no bundle at $bundle" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar -xJf "$bundle" -C "$work"
stripped=0
while IFS= read -r -d '' object; do
  # read the whole listing first: `readelf | grep -q` under pipefail fails whenever grep's
  # early exit cuts readelf off mid-write
  sections=$(readelf -S "$object" 2>/dev/null || true)
  if [[ $sections == *.debug_info* ]]; then
    strip --strip-debug "$object"
    stripped=$((stripped + 1))
  fi
done < <(find "$work" -type f -name '*.so*' -print0)
mkdir -p "$(dirname "$out")"
tar -C "$work" -I 'xz -T2 -6' -cf "$out" .
echo "wrote $out ($(du -h "$out" | cut -f1)): $(basename "$bundle") with $stripped shared objects' debug sections taken out"
