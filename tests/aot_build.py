"""Triton kernels compiled ahead of time for the GPUs the payload serves on (sm86: RTX A6000,
sm90: H100/H200, sm120: RTX PRO 6000), without a GPU or a driver: ptxas and cuobjdump ship
inside the triton wheel, and the interpreter accepts code the compiler would not. A test runs a
script in a fresh interpreter without TRITON_INTERPRET (`run_aot_script`); the script compiles
with `compile_for` and prints what it built as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def stack_bytes(cubin: bytes) -> int:
    """The stack frame of a cubin's kernel: > 0 where registers spill to local memory."""
    import triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run(
            [triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", f.name],
            capture_output=True, text=True, check=True,
        ).stdout
    return int(re.search(r"STACK:(\d+)", usage).group(1))


# The most shared memory a block may use (opt-in), bytes: CUDA's compute-capability tables.
SHARED_MEMORY_PER_BLOCK = {86: 99 * 1024, 90: 227 * 1024, 120: 99 * 1024}
CAPABILITIES = tuple(SHARED_MEMORY_PER_BLOCK)  # every build the tests make


def compile_for(
    kernel, signature: dict, constants: dict, capability: int, *, divisible: tuple = (), **options
) -> tuple[int, int]:
    """(cubin bytes, stack bytes) of ``kernel`` compiled for sm_<capability> (86: RTX A6000,
    90: H100/H200, 120: RTX PRO 6000); ptxas of the triton wheel takes all three.

    Built as Triton's launcher specializes it on a GPU: every pointer 16-byte aligned (torch's
    allocations are) and the integer arguments named in ``divisible`` multiples of 16 (strides
    of the model shapes). Without those hints the compiler cannot vectorize the loads, so no
    loop is software-pipelined and the build is not the one that runs."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    aligned = [name for name, kind in signature.items() if kind.startswith("*") or name in divisible]
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in aligned}
    target = GPUTarget("cuda", capability, 32)
    k = triton.compile(ASTSource(kernel, signature, constants, attrs=attrs), target=target, options=options)
    assert re.search(rf"\.target sm_{capability}a?\b", k.asm["ptx"]), k.asm["ptx"][:300]
    # Triton's launcher would refuse it on the card ("out of resources"), not the build.
    assert k.metadata.shared <= SHARED_MEMORY_PER_BLOCK[capability], (kernel.fn.__name__, capability, k.metadata.shared)
    return len(k.asm["cubin"]), stack_bytes(k.asm["cubin"])


def run_aot_script(body: str, timeout: int, triton_dir: Path | None = None) -> list:
    """``body`` run with this directory on its path (for `payload_modules` and this module), in
    a fresh interpreter without TRITON_INTERPRET (with ``triton_dir``'s triton first on its
    path, where given); its last line of output, read as JSON."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if triton_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(triton_dir), env.get("PYTHONPATH"))))
    script = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n{body}"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
