"""Helpers for the payload's CPU tests: overlay modules load through the product's loader (one
loader for the tests and the GPU micro-benchmarks), and the Triton interpreter for a block."""

from __future__ import annotations

import contextlib
import os

from ddtree_overlay.bench.payload_modules import OVERLAY, load_payload_module

__all__ = ["OVERLAY", "load_payload_module", "triton_interpreter"]


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
