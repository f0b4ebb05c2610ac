#!/usr/bin/env bash
# Kept for its old command line: `python -m ddtree_overlay.reference.batch` does the work.
#   bash scripts/bench_references.sh DIR [BUDGETS [N_PROMPTS [MAX_NEW_TOKENS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("${1:?usage: bash scripts/bench_references.sh DIR [BUDGETS [N_PROMPTS [MAX_NEW_TOKENS]]]}")
if [ -n "${2:-}" ]; then args+=(--budgets "$2"); fi
if [ -n "${3:-}" ]; then args+=(--prompts "$3"); fi
if [ -n "${4:-}" ]; then args+=(--max-new-tokens "$4"); fi
exec "${PYTHON:-.venv/bin/python}" -m ddtree_overlay.reference.batch "${args[@]}"
