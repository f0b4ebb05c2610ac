"""The attention backend of each bench arm: the one its engine is asked for, and the one it ran.

DDTREE arms run ``--attention-backend``, one of `DDTREE_BACKENDS` (DDTREE refuses the others,
FA3 among them). Every other arm (target-only, DFLASH in both scheduling modes, NEXTN, EAGLE-3)
runs ``--baseline-attention-backend`` (the first, where it lists several), by default `AUTO`: the engine is given none and SGLang
picks its own default for the GPU, as a DFLASH service does. In 0.5.14
(`ServerArgs._get_default_attn_backend`) that is fa3 on Hopper for these targets (none drafts
with a top-k above 1), trtllm_mha on Blackwell for most, else flashinfer where it is installed,
else triton. The parent process's `ServerArgs.__post_init__` resolves it before the engine
starts, so the runner records what each engine ran (`engine.server_args.attention_backend`,
`in_target/engine_runner`). Where the env's sgl_kernel has no FA3, `bench.fa3_check` resolves
it the same way before any engine starts, and refuses a sweep that would run fa3.

``--baseline-attention-backend flashinfer,triton`` also runs DFLASH (both scheduling modes),
NEXTN and EAGLE-3 on each further backend listed, as arms named `<arm>@<backend>` (target-only,
the correctness reference, stays on the first): every DDTREE ratio is then against the fastest
DFLASH engine of the column, whichever backend it ran. That is the baseline on GPUs where
SGLang's default is not DFLASH's fastest or cannot run (sm86 and sm120 have no FA3, and which of
flashinfer and triton serves DFLASH faster there depends on the model and batch).

A report names the backend per arm where its arms ran more than one (`arm_backends`); where they
ran one, the report's Engines line names it for every arm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.arms import AUTO, DDTREE, DFLASH

AUTO_TEXT = "SGLang's default for the GPU"
DDTREE_BACKENDS = ("triton", "flashinfer")  # the backends DDTREE's tree mask is wired for
BASELINE_BACKENDS = (AUTO, "triton", "flashinfer", "fa3", "fa4", "trtllm_mha", "torch_native")
# Backends whose kernels compile at an engine's first use of them, after the first engine's
# compiles: flashinfer's JIT (a DFLASH engine's warm-up after a triton primer took 124 s at the
# Qwen3.6-27B shape, H200, 2026-12-04; a triton DDTREE engine after it, 14 s).
COMPILED_AT_FIRST_USE = ("flashinfer",)


def baseline_backends(text: str) -> tuple[str, ...]:
    """``--baseline-attention-backend``'s backends, in order (one, or several comma-separated);
    ValueError names what is wrong."""
    backends = tuple(b.strip() for b in text.split(","))
    unknown = [b for b in backends if b not in BASELINE_BACKENDS]
    if unknown:
        raise ValueError(f"expected backends among {', '.join(BASELINE_BACKENDS)}, got {', '.join(map(repr, unknown))}")
    if len(set(backends)) < len(backends):
        raise ValueError(f"a backend listed twice: {text!r}")
    return backends


def planned_backend(engine: Mapping[str, Any]) -> str:
    """The backend an engine's keywords ask for: `AUTO` without one."""
    return engine.get("attention_backend", AUTO)


def ran_backend(planned: str, records: Iterable[Mapping[str, Any] | None]) -> str:
    """What an engine ran: the first of its ``records`` that names it, else the planned backend
    (records from before the runner wrote it, and engines that did not start, name none)."""
    return next((r["attention_backend"] for r in records if r and r.get("attention_backend")), planned)


def arm_backends(groups: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """A report's group name -> the backend its engines ran; None when every group ran the same."""
    backends = {g["name"]: g["attention_backend"] for g in groups}
    return backends if len(set(backends.values())) > 1 else None


def algorithms_on(groups: Sequence[Mapping[str, Any]], algorithms: Sequence[str] | None = None) -> dict[str, list[str]]:
    """A report's backends -> the algorithms (of ``algorithms``, or all) whose engines ran each,
    each once, in the groups' order."""
    on: dict[str, list[str]] = {}
    for group in groups:
        algorithm = group["algorithm"]
        if algorithms is None or algorithm in algorithms:
            names = on.setdefault(group["attention_backend"], [])
            names += [] if algorithm in names else [algorithm]
    return on


def versus_backends(groups: Sequence[Mapping[str, Any]]) -> str | None:
    """DDTREE's and DFLASH's backends where they differ ("DDTREE on triton, DFLASH on fa3"), for
    the tables and plots that set one against the other; None where they ran one."""
    on = algorithms_on(groups, (DDTREE, DFLASH))
    if len(on) < 2:
        return None
    return ", ".join(f"{' and '.join(algorithms)} on {backend_text(backend)}" for backend, algorithms in on.items())


def backend_cells(backends: Mapping[str, str] | None, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """A table row's attention cell for the arm of ``rows`` (report rows naming their group), from
    ``backends`` (`arm_backends`); no cell where the arms ran one backend."""
    return [backend_text(backends[next(iter(rows))["group"]])] if backends else []


def backend_text(backend: str, quote: str = "") -> str:
    """``backend`` in prose, its name between ``quote``s: `AUTO` as SGLang's default."""
    return AUTO_TEXT if backend == AUTO else f"{quote}{backend}{quote}"


def on_backend(row: Mapping[str, Any]) -> str:
    """`` on <backend>`` for a baseline row run on another than the first baseline backend
    (`Arm.backend`); empty otherwise."""
    return f" on {row['backend']}" if row.get("backend") else ""
