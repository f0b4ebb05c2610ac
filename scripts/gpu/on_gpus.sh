#!/usr/bin/env bash
# On a machine with several GPUs, inside one 10-minute device command: one bundle, one
# `ddtree-overlay apply`, then one job per GPU at the same time, then rollback and status.
#   bash scripts/gpu/on_gpus.sh BUNDLE 'JOB' ['JOB' ...]
# JOB i runs on GPU i (GPUS_PER_JOB=n: on GPUs n*i .. n*i+n-1, e.g. 2 for tensor parallelism);
# a JOB is a shell line of
#   bench SETTING [bench args...]   `ddtree-overlay bench`, time-boxed to the command's limit
#   check PRESETS [ARMS]            scripts/gpu/payload_check.py arms (profiler on), cut off in time
#   compare --baseline RUN.pt [...] `ddtree-overlay compare --env`, its report and records in job-N/
# e.g. (device call: kind nvidia-h200-x2, carry [".devsite", ".whl", ".benchrefs"], timeout_s 600)
#   bash scripts/gpu/on_gpus.sh .devsite/site-0.5.14.tar.xz \
#     'bench fixture --budgets 8,16,32 --reference-dir .benchrefs' 'check kernels,syncs'
# A run of the DDTree reference code replayed through SGLang (docs/compare.md):
#   bash scripts/gpu/on_gpus.sh .devsite/site-0.5.14.tar.xz \
#     'compare --baseline tests/compare/data/ddtree-benchmark-fixture-dense.pt'
# Tensor parallelism, both GPUs in one job, one step after the other:
#   GPUS_PER_JOB=2 bash scripts/gpu/on_gpus.sh .devsite/site-0.5.14.tar.xz \
#     'check tp; bench qwen3-8b-random --tp-size 2 --budgets 32 --batch-sizes 1 --temperatures 0'
# $OUT receives log.txt (setup, apply, rollback, status and every job's tail), jobs.tar.gz
# (job-N/: the bench's or the check's results and its full log) and compile-cache.tar.xz (the
# kernels the machine compiled: copied to .devcache/ and carried, a fresh machine's first engine
# skips those compiles; scripts/gpu/compile_cache.sh).
set -uo pipefail
usage="usage: bash scripts/gpu/on_gpus.sh BUNDLE 'JOB' ['JOB' ...]"
bundle=${1:?$usage}
shift
[ "$#" -ge 1 ] || { echo "$usage" >&2; exit 2; }
per_job=${GPUS_PER_JOB:-1}
limit_s=${GPUS_LIMIT_S:-590}  # the device command's limit, less the copy-back
reserve_s=45                   # rollback, status and packing after the jobs' deadline
OUT=${OUT:-/tmp/on-gpus}
JOBS=/tmp/gpu-jobs
mkdir -p "$OUT"
start=$SECONDS

seconds_left() { echo $((limit_s - reserve_s - (SECONDS - start))); }

bench() {
  local setting=$1
  shift
  # the bench cuts its own cells; 60 s of it go to runner grace, report and plots
  local minutes
  minutes=$(python3 -c "print(f'{max($(seconds_left) - 60, 60) / 60:.2f}')")
  overlay bench --env "$ENV_PY" --setting "$setting" --out "$JOB_OUT" --max-minutes "$minutes" "$@"
}

compare() {
  overlay compare --env "$ENV_PY" --out "$JOB_OUT" "$@"
}

check() {
  local presets=$1 only=${2:-}
  SGLANG_DDTREE_PROFILE="$JOB_OUT/profile.jsonl" python3 scripts/gpu/payload_check.py \
    --preset "$presets" --only "$only" --out "$JOB_OUT"
}

run_job() {
  local index=$1 gpus=$2 job=$3
  export CUDA_VISIBLE_DEVICES=$gpus JOB_OUT=$JOBS/job-$index
  mkdir -p "$JOB_OUT"
  echo "job $index on GPU $gpus: $job"
  eval "$job"
  echo "job $index exit code $?"
}

main() {
  source scripts/gpu/setup_env.sh "$bundle"
  rm -rf "$JOBS" && mkdir -p "$JOBS"
  # The device copies the working tree; its git HEAD can be an older commit than the tree
  # (2026-12-05: the checkout's first), so the line also counts the files that differ from it,
  # and the sources' digest is what names the commit the call ran.
  local changed
  changed=$(git status --porcelain 2>/dev/null | wc -l)
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $changed paths differing from it in the tree sent; setup took $((SECONDS - start)) s"
  echo "sources: $(bash scripts/gpu/source_digest.sh) (scripts/gpu/source_digest.sh in a clean checkout names the commit)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  bash scripts/gpu/compile_cache.sh restore .devcache/compile-cache.tar.xz
  overlay apply --env "$ENV_PY" || return 3
  local pids=() index=0 gpus job
  for job in "$@"; do
    gpus=$(seq -s, $((index * per_job)) $((index * per_job + per_job - 1)))
    # Each job in its own session, so a cut-off kills its engines in one go: an orphaned
    # SGLang scheduler signals its parent's group on the way down, and that must not be us.
    setsid bash -c "$(declare -f seconds_left bench compare check run_job overlay); $(declare -p limit_s reserve_s start JOBS ENV_PY); run_job $index $gpus $(printf %q "$job")" \
      > "$JOBS/job-$index.log" 2>&1 &
    pids+=("$!")
    index=$((index + 1))
  done
  local wait_s
  wait_s=$(seconds_left)
  echo "== ${#pids[@]} jobs running, cut off after $wait_s s"
  # off the log pipe: a sleeping cutoff must not hold `tee` open after the jobs finish
  (sleep "$wait_s"; for pid in "${pids[@]}"; do kill -KILL -- "-$pid"; done) >/dev/null 2>&1 &
  local cutoff=$!
  for pid in "${pids[@]}"; do wait "$pid"; done
  pkill -P "$cutoff" 2>/dev/null; kill "$cutoff" 2>/dev/null
  for ((i = 0; i < ${#pids[@]}; i++)); do
    echo "== job $i (last 40 lines of job-$i/log)"
    mv "$JOBS/job-$i.log" "$JOBS/job-$i/log"
    tail -n 40 "$JOBS/job-$i/log"
  done
  echo "== rollback ($((SECONDS - start)) s)"
  overlay rollback --env "$ENV_PY"
  overlay status --env "$ENV_PY"
  tar -czf "$OUT/jobs.tar.gz" -C "$JOBS" .
  # last, and bounded by what the call has left: the results are packed whatever happens to it
  local save_s=$((limit_s - (SECONDS - start) - 5))
  save_s=$((save_s < 30 ? save_s : 30))
  if [ "$save_s" -gt 0 ]; then
    timeout "$save_s" bash scripts/gpu/compile_cache.sh save "$OUT/compile-cache.tar.xz" || echo "compile cache: not kept (save stopped after $save_s s)"
  fi
  echo "done after $((SECONDS - start)) s"
}

main "$@" 2>&1 | tee "$OUT/log.txt"
