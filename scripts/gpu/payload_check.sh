#!/usr/bin/env bash
# On the H200: bundle + `ddtree-overlay apply`, import check, then payload_check.py.
#   bash scripts/gpu/payload_check.sh BUNDLE [payload_check.py args...]
set -uo pipefail
bundle=$1; shift
source scripts/gpu/setup_env.sh "$bundle"
overlay status --env "$ENV_PY"
overlay apply --env "$ENV_PY" || exit 3
overlay diff --env "$ENV_PY" --stat
python3 -c "import sglang.srt.speculative.ddtree_worker_v2, sglang.srt.speculative.spec_info as s; print('DDTREE registered:', s.SpeculativeAlgorithm.from_string('DDTREE'))" || exit 4
python3 scripts/gpu/payload_check.py "$@"
