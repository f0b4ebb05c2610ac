#!/usr/bin/env bash
# On the H200, in one device command: the payload's evidence for one sglang bundle.
#   bash scripts/gpu/evidence.sh BUNDLE [PRESETS [ARMS]]
# apply (CLI) -> verify --import-only -> verify --smoke (target-only, DFLASH, DDTREE at the
# default budget; $SMOKE holds its options, SMOKE=none skips it) -> payload_check.py arms of
# PRESETS (comma-separated; ARMS picks some, "" none; default: every arm of PRESETS, or for
# lossless what the smoke does not cover) with the DDTREE profiler on, cut off so that the rest
# still runs -> rollback -> status. The Triton tree kernels against the torch ops:
#   SMOKE=none bash scripts/gpu/evidence.sh .devsite/site-0.5.14.tar.xz kernels
# Device call: carry [".devsite", ".whl"], timeout_s 600. $OUT receives log.txt, verify.json,
# payload/{arms.jsonl,summary.json}, profile.jsonl.
set -uo pipefail
bundle=${1:?usage: bash scripts/gpu/evidence.sh BUNDLE [PRESETS [ARMS]]}
presets=${2:-lossless}
if [ "$#" -ge 3 ]; then
  arms=$3  # "" runs no extra arms
elif [ "$presets" = lossless ]; then
  arms=plain,ddtree-b32,ddtree-b32-page16,plain-t1,ddtree-b32-t1  # what the smoke does not cover
else
  arms=all
fi
smoke=${SMOKE:---prompts 32 --max-new-tokens 256}
limit_s=${EVIDENCE_LIMIT_S:-590}  # the device command's limit, less the copy-back
OUT=${OUT:-/tmp/evidence}
mkdir -p "$OUT"

main() {
  local start=$SECONDS
  source scripts/gpu/setup_env.sh "$bundle"
  echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  overlay status --env "$ENV_PY"
  overlay apply --env "$ENV_PY" || return 3
  if overlay verify --env "$ENV_PY" --import-only; then
    if [ "$smoke" != none ]; then
      echo "== verify --smoke $smoke ($((SECONDS - start)) s)"
      # shellcheck disable=SC2086
      overlay verify --env "$ENV_PY" --smoke $smoke --json > "$OUT/verify.json"
      echo "verify --smoke exit code $?"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d.get(k) for k in ("status","issues")}), json.dumps(d.get("data",{}).get("arms"))[:6000])' "$OUT/verify.json"
    fi
    if [ -n "$arms" ]; then
      local left=$((limit_s - (SECONDS - start) - 25))  # 25 s: rollback and status
      local only=$arms
      [ "$arms" = all ] && only=""  # payload_check: no --only filter
      echo "== payload_check $presets: $arms, at most $left s ($((SECONDS - start)) s)"
      # Its own session, so a cut-off kills the engines with it in one go: an orphaned SGLang
      # scheduler signals its parent's group on the way down, and that must not be this shell.
      SGLANG_DDTREE_PROFILE="$OUT/profile.jsonl" setsid python3 scripts/gpu/payload_check.py \
        --preset "$presets" --only "$only" --out "$OUT/payload" &
      local pid=$!
      # off the log pipe: a sleeping cutoff must not hold `tee` open after the arms finish
      (sleep "$left"; kill -KILL -- "-$pid") >/dev/null 2>&1 &
      local cutoff=$!
      wait "$pid"
      echo "payload_check exit code $?"
      pkill -P "$cutoff" 2>/dev/null; kill "$cutoff" 2>/dev/null
    fi
  fi
  echo "== rollback ($((SECONDS - start)) s)"
  overlay rollback --env "$ENV_PY"
  overlay status --env "$ENV_PY"
  echo "done after $((SECONDS - start)) s"
}

main 2>&1 | tee "$OUT/log.txt"
