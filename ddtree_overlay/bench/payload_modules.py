"""Load whole-file payload modules from the bundled `overlay/` by path, under their sglang names.

For the payload's CPU tests and the GPU micro-benchmarks of its kernels (`scripts/gpu/topk_parts.py`):
the modules loaded this way import only torch (and triton) and each other, so stand-in parent
packages over the overlay's folders are enough (a module's import of a sibling finds its file);
no sglang install is involved.
"""

from __future__ import annotations

import importlib.util
import sys
import types

from ddtree_overlay.engine.datadir import data_root

OVERLAY = data_root() / "overlay"


def load_payload_module(dotted: str) -> types.ModuleType:
    if dotted in sys.modules:
        return sys.modules[dotted]
    parts = dotted.split(".")
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        if package not in sys.modules:
            stand_in = types.ModuleType(package)
            stand_in.__path__ = [str(OVERLAY.joinpath(*package.split(".")))]
            sys.modules[package] = stand_in
    spec = importlib.util.spec_from_file_location(dotted, OVERLAY.joinpath(*parts).with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[dotted] = module
    spec.loader.exec_module(module)
    return module
