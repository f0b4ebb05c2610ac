"""Helpers for the payload's CPU tests: overlay modules load through the product's loader (one
loader for the tests and the GPU micro-benchmarks), a family's ddtree_compat shim as it loads
under a release, and the Triton interpreter for a block."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import types
from pathlib import Path

from ddtree_overlay.bench.payload_modules import OVERLAY, load_payload_module

__all__ = ["OVERLAY", "load_compat_shim", "load_payload_module", "skip_unless_interpreted", "triton_interpreter"]


def load_compat_shim(monkeypatch, release: tuple[int, ...], shim: Path) -> types.ModuleType:
    """A family's ddtree_compat shim (overlay/shims/<family>/ddtree_compat.py) as it loads under
    ``release``."""
    contract = load_payload_module("sglang.srt.speculative.ddtree_contract")
    monkeypatch.setattr(contract, "installed_release", lambda: release)
    load_payload_module("sglang.srt.speculative.ddtree_utils")  # the shims' replaced_attribute
    spec = importlib.util.spec_from_file_location(f"ddtree_compat_{'_'.join(map(str, release))}", shim)
    module = importlib.util.module_from_spec(spec)
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


def skip_unless_interpreted(triton: types.ModuleType) -> None:
    """Skip the calling test module when Triton was imported before its interpreter was turned on
    (Triton reads TRITON_INTERPRET at its first import): its kernels would then need a GPU."""
    import pytest
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.zeros, InterpretedFunction):
        pytest.skip(
            "triton was imported before this module could turn its interpreter on; "
            "run this file in a process of its own",
            allow_module_level=True,
        )
