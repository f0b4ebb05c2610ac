#!/usr/bin/env bash
# On the H200: unpack the sglang bundle, lay the DDTREE payload over it, run payload_check.py.
#   bash scripts/gpu/payload_check.sh BUNDLE PATCH_DIR [payload_check.py args...]
set -uo pipefail
bundle=$1; patch_dir=$2; shift 2
mkdir -p /tmp/site && tar -xJf "$bundle" -C /tmp/site
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
cp overlay/sglang/srt/speculative/ddtree_{utils,info,spec,worker_v2}.py /tmp/site/sglang/srt/speculative/
for p in "$patch_dir"/*.patch; do (cd /tmp/site && patch -p1 -F0 --no-backup-if-mismatch < "$OLDPWD/$p") || exit 3; done
python3 -c "import sglang.srt.speculative.ddtree_worker_v2, sglang.srt.speculative.spec_info as s; print('DDTREE registered:', s.SpeculativeAlgorithm.from_string('DDTREE'))" || exit 4
python3 scripts/gpu/payload_check.py "$@"
