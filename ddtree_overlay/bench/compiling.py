"""A timed window during which the engine was compiling, found in the host record of the window
(`in_target/engine_runner.host_during`: each engine process's CPU seconds per wall second).

A kernel compiled on first use inside the window (flashinfer's JIT runs ninja and nvcc as
children of SGLang's scheduler) takes the host and the GPU from the decode, and the window then
times the compile, not the arm: on an H200 (2026-12-04) DFLASH at c=1 measured 1 tok/s on an
engine whose window held ten cudafe++ processes at 1.00 CPU s/s each, and 103 tok/s on its next
engine. Such a repeat stays in the report, marked, and out of its cell's median and of every
ratio and worst case built from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddtree_overlay.bench.table_cells import DASH

# What a compile runs, by the name /proc gives a process: CUDA's compiler driver and its
# stages, the host C and C++ compilers (and their drivers), and the build tool that runs them.
COMPILER_PROCESSES = (
    "nvcc", "cudafe++", "cicc", "ptxas", "fatbinary", "nvlink",
    "cc1plus", "cc1", "gcc", "g++", "c++", "cc",
    "ninja",
)
# CPU s per wall s from which a compiler process counts as busy in the window: a build tool
# waiting on its children, or a compile that ended as the window opened, stays below it.
COMPILING_CPU_PER_WALL = 0.1


def window_compiler(host: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The busiest compiler process among the engine's processes in a window: its name, its CPU
    s/s and how many compiler processes were busy; None when none was (or the record has no
    host)."""
    busy = [
        p
        for p in (host or {}).get("processes") or ()
        if p.get("comm") in COMPILER_PROCESSES and (p.get("cpu_per_wall") or 0) >= COMPILING_CPU_PER_WALL
    ]
    if not busy:
        return None
    top = max(busy, key=lambda p: p["cpu_per_wall"])
    return {"comm": top["comm"], "cpu_per_wall": top["cpu_per_wall"], "processes": len(busy)}


def compiling_note(label: str, entry: Mapping[str, Any]) -> str:
    """The report's note on a repeat (``entry``: its tok/s and `window_compiler`) left out for
    compiling; ``label`` names the cell and the repeat."""
    compiler = entry["compiling"]
    others = compiler["processes"] - 1
    also = f", {others} more compiler process{'es' if others > 1 else ''} busy" if others else ""
    rate = entry.get("tok_per_s")
    measured = f"its {rate:.0f} tok/s" if rate is not None else "it"
    return (
        f"{label}: the engine was compiling during the timed window ({compiler['comm']} at "
        f"{compiler['cpu_per_wall']:.2f} CPU s/s{also}): {measured} is left out of the cell's median "
        "and of every ratio"
    )


def rate_text(entry: Mapping[str, Any]) -> str:
    """A repeat's (or an engine's) tok/s as the per-repeat columns show it: marked where the
    engine was compiling, "failed", or a dash where it did not measure the cell."""
    if entry["status"] == "failed":
        return "failed"
    if entry["status"] != "ok" or entry.get("tok_per_s") is None:
        return DASH
    return f"{entry['tok_per_s']:.0f}" + (" (compiling)" if entry.get("compiling") else "")
