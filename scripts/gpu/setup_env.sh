#!/usr/bin/env bash
# On the H200: make the interpreter that holds torch see an sglang bundle, install the tool,
# and apply the DDTree patch set with `ddtree-overlay apply`. Source it:
#   source scripts/gpu/setup_env.sh .devsite/site-0.5.14.tar.xz
# Afterwards: $ENV_PY is the target interpreter, `overlay` runs the tool.
bundle=$1
# A warm machine may hold an earlier command's site and overlay state: start from the bundle.
rm -rf /tmp/site /tmp/overlay-state && mkdir -p /tmp/site && tar -xJf "$bundle" -C /tmp/site
ENV_PY=$(command -v python3)
SITE=$("$ENV_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The bundle must shadow the image's own transformers/tokenizers, as PYTHONPATH would; a .pth
# line does it for every interpreter start, `python -I` included (the tool probes with -I).
echo 'import sys; sys.path.insert(0, "/tmp/site")' > "$SITE/000-devsite.pth"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/tool .whl/*.whl
export PYTHONPATH=/tmp/tool:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export DDTREE_OVERLAY_STATE_DIR=/tmp/overlay-state
overlay() { python3 -m ddtree_overlay "$@"; }
export ENV_PY
