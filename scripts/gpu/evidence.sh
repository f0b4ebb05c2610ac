#!/usr/bin/env bash
# On the H200, in one device command: the payload's evidence for one sglang bundle.
#   bash scripts/gpu/evidence.sh BUNDLE [PRESET [ARMS]]
# apply (CLI) -> verify --import-only -> verify --smoke on 32 held-out prompts x 256 tokens
# (target-only, DFLASH, DDTREE at the default budget) -> payload_check.py arms of PRESET
# (default: lossless minus what the smoke covered) with the DDTREE profiler on -> rollback ->
# status. Device call: carry [".devsite", ".whl"], timeout_s 600. $OUT receives log.txt,
# verify.json, payload/{arms.jsonl,summary.json}, profile.jsonl.
set -uo pipefail
bundle=${1:?usage: bash scripts/gpu/evidence.sh BUNDLE [PRESET [ARMS]]}
preset=${2:-lossless}
arms=${3:-plain,ddtree-b32,ddtree-b32-page16,plain-t1,ddtree-b32-t1}
OUT=${OUT:-/tmp/evidence}
mkdir -p "$OUT"
F=ddtree_overlay/fixtures

main() {
  local start=$SECONDS
  source scripts/gpu/setup_env.sh "$bundle"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  overlay status --env "$ENV_PY"
  overlay apply --env "$ENV_PY" || return 3
  if overlay verify --env "$ENV_PY" --import-only; then
  echo "== verify --smoke ($((SECONDS - start)) s)"
  overlay verify --env "$ENV_PY" --smoke --prompts 32 --max-new-tokens 256 --json > "$OUT/verify.json"
  echo "verify --smoke exit code $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d.get(k) for k in ("status","issues")}), json.dumps(d.get("data",{}).get("arms"))[:6000])' "$OUT/verify.json"
  if [ -n "$arms" ]; then
    echo "== payload_check $preset: $arms ($((SECONDS - start)) s)"
    SGLANG_DDTREE_PROFILE="$OUT/profile.jsonl" python3 scripts/gpu/payload_check.py \
      --target "$PWD/$F/target" --draft "$PWD/$F/draft" --prompts "$F/heldout_prompts.json" \
      --n-prompts 32 --max-new-tokens 256 --preset "$preset" --only "$arms" --out "$OUT/payload"
  fi
  fi
  echo "== rollback ($((SECONDS - start)) s)"
  overlay rollback --env "$ENV_PY"
  overlay status --env "$ENV_PY"
  echo "done after $((SECONDS - start)) s"
}

main 2>&1 | tee "$OUT/log.txt"
