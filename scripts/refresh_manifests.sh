#!/usr/bin/env bash
# Regenerate the [[file]] tables of every manifest (or of the releases given) from a stock
# install of that release: after any change under overlay/, patches/ or manifests/.
#   bash scripts/refresh_manifests.sh               # every manifests/*.toml
#   bash scripts/refresh_manifests.sh 0.5.17 0.5.23 # just these
# Wheels come from the matrix's cache (~/.cache/ddtree-overlay/matrix/wheels), fetched once.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
if [ "$#" -eq 0 ]; then
  set -- $(for m in manifests/*.toml; do basename "$m" .toml; done)
fi
for release in "$@"; do
  scratch=$(mktemp -d)
  wheel=$("$py" -c "import sys; from ddtree_overlay.matrix.envs import cache_root, ensure_wheel; print(ensure_wheel(sys.argv[1], cache_root() / 'wheels'))" "$release")
  "$py" -m venv --without-pip "$scratch/venv"
  "$py" -m pip -q --disable-pip-version-check --python "$scratch/venv/bin/python" install --no-deps --no-compile "$wheel"
  DDTREE_OVERLAY_STATE_DIR="$scratch/state" "$py" -m ddtree_overlay manifest-refresh "manifests/$release.toml" --env "$scratch/venv" | sed -n 1p
  rm -rf "$scratch"
done
