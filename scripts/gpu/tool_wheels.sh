#!/usr/bin/env bash
# The tool's own dependencies that the device image lacks (or carries at another version), as
# wheels for the device's Python 3.12, into DIR (`.whl`, which scripts/gpu/setup_env.sh installs
# and every device call carries):
#   bash scripts/gpu/tool_wheels.sh .whl
# The image has rich, click, filelock, packaging, numpy, scipy and matplotlib
# (/work/.library/device/KINDS.md's package list); it has no unidiff or platformdirs, and its
# typer may be newer than pyproject's cap.
set -euo pipefail
dir=${1:?usage: bash scripts/gpu/tool_wheels.sh DIR}
mkdir -p "$dir"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d "$dir" "unidiff>=0.7.5" "platformdirs>=4" "typer>=0.12,<0.29"
ls "$dir"
