"""Load whole-file payload modules from overlay/ by path, under their sglang names.

The modules tested this way import only torch and each other, so stand-in parent packages are
enough: no sglang install is involved.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from pathlib import Path

OVERLAY = Path(__file__).resolve().parents[1] / "overlay"


def load_payload_module(dotted: str) -> types.ModuleType:
    if dotted in sys.modules:
        return sys.modules[dotted]
    parts = dotted.split(".")
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        if package not in sys.modules:
            stand_in = types.ModuleType(package)
            stand_in.__path__ = []
            sys.modules[package] = stand_in
    spec = importlib.util.spec_from_file_location(dotted, OVERLAY.joinpath(*parts).with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[dotted] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def triton_interpreter():
    """TRITON_INTERPRET=1 for the block only.

    Triton reads it when a function is decorated (its own library functions at its first
    import, ours when the module loads) and again while a kernel runs.
    """
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
