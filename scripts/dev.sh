#!/usr/bin/env bash
# One entry point for a fresh machine: makes (or reuses) .venv, installs the tool with its
# test and reference extras, then runs the requested job.
#   bash scripts/dev.sh demo   # status -> apply -> diff --stat -> rollback on a scratch sglang 0.5.14
#   bash scripts/dev.sh test   # the test suite (CPU only)
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:?usage: scripts/dev.sh demo|test [args...]}; shift
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
py=.venv/bin/python
# CPU torch for the offline reference decoder; pinned to the build CI machines carry on disk.
"$py" -m pip install -q --disable-pip-version-check "torch==${DDTREE_TORCH_VERSION:-2.13.0}"
"$py" -m pip install -q --disable-pip-version-check -e '.[reference,test]'
case "$job" in
  demo) exec .venv/bin/ddtree-overlay demo "$@" ;;
  test) exec "$py" -m pytest -q "$@" ;;
  *) echo "unknown job: $job (demo|test)" >&2; exit 2 ;;
esac
