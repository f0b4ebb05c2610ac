#!/usr/bin/env bash
# On the H200, inside one 10-minute device command: bundle + `ddtree-overlay apply`, then
# `ddtree-overlay bench` time-boxed to what the command has left, results into $OUT.
#   bash scripts/gpu/bench.sh BUNDLE SETTING [bench args...]
# Device call: carry [".devsite", ".whl"] (the sglang bundle; the unidiff and platformdirs
# wheels, as for payload_check.sh), timeout_s 600. Compare arms inside one command only.
#   bash scripts/gpu/bench.sh .devsite/site-0.5.14.tar.xz fixture
#   bash scripts/gpu/bench.sh .devsite/site-0.5.14.tar.xz fixture --budgets 8,128,256 --temperatures 0
#   bash scripts/gpu/bench.sh .devsite/site-0.5.14.tar.xz qwen3-8b-random --temperatures 0
# With the offline reference made beforehand (scripts/bench_references.sh .benchrefs; carry
# ".benchrefs" too), the GPU host's cores serve the sweep alone:
#   bash scripts/gpu/bench.sh .devsite/site-0.5.14.tar.xz fixture --budgets 8,16,32 --reference-dir .benchrefs
# $OUT receives at most 8 files: bench.md bench.json speedup.png acceptance.png round_time.png
# records.jsonl.gz runner.log.gz bench.log. bench.json and bench.md are refreshed after every
# engine, so a command killed at its limit still brings back the engines that finished.
set -uo pipefail
start=$SECONDS
limit_s=${BENCH_LIMIT_S:-600}     # the device command's limit
reserve_s=${BENCH_RESERVE_S:-75}  # after the bench's deadline: runner grace (45 s), report, plots, copies
usage="usage: bash scripts/gpu/bench.sh BUNDLE SETTING [bench args...]"
bundle=${1:?$usage}
setting=${2:?$usage}
shift 2
OUT=${OUT:-/tmp/bench-results}
mkdir -p "$OUT"
work=/tmp/bench-$setting

collect() {
  for f in bench.json bench.md speedup.png acceptance.png round_time.png; do
    if [ -f "$work/$f" ]; then cp -f "$work/$f" "$OUT/"; fi
  done
  for f in records.jsonl runner.log; do
    if [ -f "$work/$f" ]; then gzip -c "$work/$f" > "$OUT/$f.gz"; fi
  done
}

main() {
  source scripts/gpu/setup_env.sh "$bundle"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); setup took $((SECONDS - start)) s"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  overlay apply --env "$ENV_PY" || return 3
  local left=$((limit_s - (SECONDS - start) - reserve_s))
  local minutes
  minutes=$(python3 -c "print(f'{max($left, 60) / 60:.2f}')")
  echo "bench time box: $minutes min"
  # off the log pipe, so a sleeping copier does not hold `tee` open at the end
  (while sleep 20; do cp -f "$work/bench.json" "$work/bench.md" "$OUT/"; done) >/dev/null 2>&1 &
  local copier=$!
  overlay bench --env "$ENV_PY" --setting "$setting" --out "$work" --max-minutes "$minutes" "$@"
  local rc=$?
  kill "$copier" 2>/dev/null
  collect
  echo "bench exit code $rc after $((SECONDS - start)) s; results in $OUT"
  return $rc
}

main "$@" 2>&1 | tee "$OUT/bench.log"
exit "${PIPESTATUS[0]}"
