#!/usr/bin/env bash
# Offline reference results for `ddtree-overlay bench --reference-dir DIR` on the fixture pair:
# DFlash and DDTree at each budget, T=0, fp32 on the CPU, the sweep's prompts (the first N
# held-out fixture prompts) and length. Made here, they spare the GPU host's cores during a sweep.
#   bash scripts/bench_references.sh DIR [BUDGETS [N_PROMPTS [MAX_NEW_TOKENS]]]
# Defaults: 4,8,16,32,64,128,256, 32 prompts, 256 tokens. A sweep of fewer prompts uses the first
# ones (the fixture sweep's cells decode 16 by default; --prompts-per-cell 32 at bs 16 decodes two waves).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash scripts/bench_references.sh DIR [BUDGETS [N_PROMPTS [MAX_NEW_TOKENS]]]}
budgets=${2:-4,8,16,32,64,128,256}
n_prompts=${3:-32}
max_new=${4:-256}
py=${PYTHON:-.venv/bin/python}
F=ddtree_overlay/fixtures
mkdir -p "$out"
jobs=("dflash:--algo dflash")
for b in ${budgets//,/ }; do jobs+=("ddtree-b$b:--algo ddtree --budget $b"); done
run_one() {
  local key=${1%%:*} args=${1#*:}
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "$py" -m ddtree_overlay.reference --target "$F/target" --draft "$F/draft" \
    --prompts "$F/heldout_prompts.json" --limit "$n_prompts" --max-new-tokens "$max_new" \
    --temperature 0 --device cpu --dtype float32 --no-baseline $args --json "$out/$key.json" \
    > "$out/$key.log" 2>&1 && echo "done $key" || echo "FAILED $key (see $out/$key.log)"
}
export -f run_one
export py F n_prompts max_new out
printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ {}
