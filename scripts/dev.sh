#!/usr/bin/env bash
# A developer's shortcut: makes (or reuses) .venv, installs the tool as the README's Quickstart
# does for the tests (editable, test and reference extras, CPU torch), then runs the job.
#   bash scripts/dev.sh demo   # status -> apply -> diff --stat -> rollback on a scratch sglang 0.5.14
#   bash scripts/dev.sh test   # the test suite (CPU; the release matrix: test -m matrix)
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:?usage: scripts/dev.sh demo|test [args...]}; shift
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
py=.venv/bin/python
# A host without the PyTorch CPU index (its CPU build on disk) would retry it for minutes.
PIP_RETRIES=${PIP_RETRIES:-1} "$py" -m pip install -q --disable-pip-version-check -e '.[test,reference]' \
  "torch==${DDTREE_TORCH_VERSION:-2.13.0}" --extra-index-url https://download.pytorch.org/whl/cpu
case "$job" in
  demo) exec .venv/bin/ddtree-overlay demo "$@" ;;
  test) exec "$py" -m pytest -q "$@" ;;
  *) echo "unknown job: $job (demo|test)" >&2; exit 2 ;;
esac
