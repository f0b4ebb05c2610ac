#!/usr/bin/env bash
# A digest of the tool's and the payload's sources in the tree this script sits in: the same on
# the device as in the checkout that sent it, whatever git HEAD the device's copy reports (it
# can be older than the tree), and left alone by what a device call leaves out or adds (the
# fixture weights, docs, bundles, caches). `bash scripts/gpu/source_digest.sh` in a clean
# checkout of a commit names the commit a device log's digest came from.
set -euo pipefail
cd "$(dirname "$0")/../.."
find ddtree_overlay overlay scripts manifests pyproject.toml -type f \
    ! -path 'ddtree_overlay/fixtures/*' ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12
