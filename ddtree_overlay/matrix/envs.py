"""The matrix's environments: the cached sglang wheels, the base env, a pins env per set of a
release's pins, and the scratch venv that layers them under one release's wheel.

SGLang's import closure (torch, triton, transformers, ...) is not installed per release. Two
cached layers sit under the scratch venv, reached through one `.pth` file:

* the base env: CPU torch (`MATRIX_TORCH`), the triton that torch release pins, the matching
  torchvision without its dependencies, and the pure-Python packages the closure imports
  (`CLOSURE_REQUIREMENTS`, unpinned);
* a pins env per distinct set of `==` pins: the release's own pins for the closure packages
  (transformers, openai, tokenizers, ...), resolved by pip on top of the base.

So each release imports against its own pinned versions of everything except the torch family
(`TORCH_FAMILY`), whose mismatch against the release's pin is reported in every row.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.progress import QUIET, Progress
from ddtree_overlay.engine.target import TargetRun, run_script
from ddtree_overlay.engine.venvs import make_venv, pip

CACHE_DIR_ENV = "DDTREE_OVERLAY_CACHE_DIR"
MATRIX_TORCH = "2.13.0"  # the CPU build CI machines carry on disk
MATRIX_TRITON = "3.7.1"  # what torch 2.13.0 pins on PyPI
MATRIX_TORCHVISION = "0.28.0"  # the release paired with torch 2.13
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "triton"})
# What `import sglang.srt.speculative.ddtree_worker_v2` (and the patched modules) pulls in on a
# CPU machine, measured release by release; nothing else of sglang's requirements is needed.
CLOSURE_REQUIREMENTS = (
    "aiohttp", "compressed-tensors", "dill", "einops", "fastapi", "gguf", "ipython", "msgspec",
    "numpy", "openai", "orjson", "packaging", "partial-json-parser", "pillow", "psutil",
    "pybase64", "pydantic", "pyzmq", "requests", "sentencepiece", "setproctitle", "starlette",
    "tqdm", "transformers", "uvicorn", "xgrammar",
)
# Bounds on the base's own copies: every release pins its transformers in its pins layer, but
# from 5.25 the base's would bring Hugging Face's `kernels`, which the releases' older
# transformers import as an optional integration and fail on at import.
BASE_BOUNDS = ("transformers<5.25",)
TORCH_PINS = (f"torch=={MATRIX_TORCH}", f"triton=={MATRIX_TRITON}")  # every layer's constraints
WHEEL_PLATFORM = "manylinux_2_34_x86_64"
STEP_TIMEOUT_S = 1800


def cache_root() -> Path:
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override) if override else Path.home() / ".cache" / "ddtree-overlay" / "matrix"



def ensure_wheel(release: str, wheels: Path, progress: Progress = QUIET) -> Path:
    """The release's wheel for this interpreter's Python, from PyPI once, then from the cache."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pattern = f"sglang-{release}-*.whl"
    found = [w for w in sorted(wheels.glob(pattern)) if tag in w.name or "py3-none" in w.name]
    if found:
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    pip(
        ["download", "--no-deps", "--only-binary=:all:", "--python-version",
         f"{sys.version_info.major}.{sys.version_info.minor}", "--platform", WHEEL_PLATFORM,
         "-d", str(wheels), f"sglang=={release}"],
        what=f"download sglang=={release}",
        progress=progress,
    )
    found = [w for w in sorted(wheels.glob(pattern)) if tag in w.name or "py3-none" in w.name]
    if not found:
        raise errors.wheel_missing(release, tag, wheels)
    return found[-1]


def wheel_requirements(wheel: Path) -> dict[str, Any]:
    """Requires-Python and the unconditional `==` pins from the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    pins: dict[str, str] = {}
    python = None
    for line in text.splitlines():
        if line.startswith("Requires-Python:"):
            python = line.split(":", 1)[1].strip()
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return {"python": python, "pins": pins}


def python_fits(spec: str | None) -> bool:
    if not spec:
        return True
    from packaging.specifiers import SpecifierSet

    current = ".".join(map(str, sys.version_info[:3]))
    return SpecifierSet(spec).contains(current)


def closure_names() -> frozenset[str]:
    return frozenset(canonicalize_name(r) for r in CLOSURE_REQUIREMENTS)


class BaseEnv:
    """CPU torch + triton + torchvision (no deps) + the closure's pure-Python packages."""

    def __init__(self, cache: Path) -> None:
        key = f"py{sys.version_info.major}{sys.version_info.minor}-torch{MATRIX_TORCH}-v1"
        self.root = cache / "base" / key
        self._ready: Path | None = None

    def ensure(self, progress: Progress = QUIET) -> Path:
        if self._ready is not None:
            return self._ready
        marker = self.root / ".ddtree-matrix-complete"
        wanted = "\n".join([*_base_requirements(), *BASE_BOUNDS]) + "\n"
        if not (marker.exists() and marker.read_text() == wanted):
            shutil.rmtree(self.root, ignore_errors=True)
            make_venv(self.root)
            python = self.root / "bin" / "python"
            constraints = self.root / "constraints.txt"
            constraints.write_text("".join(f"{c}\n" for c in (*TORCH_PINS, *BASE_BOUNDS)))
            pip(["--python", str(python), "install", "-c", str(constraints), *_base_requirements()],
                what="install the matrix base env", progress=progress, timeout=STEP_TIMEOUT_S)
            pip(["--python", str(python), "install", "--no-deps", f"torchvision=={MATRIX_TORCHVISION}"],
                what="install torchvision into the matrix base env", progress=progress)
            marker.write_text(wanted)
        self._ready = site_packages(self.root)
        return self._ready

    def describe(self) -> dict[str, Any]:
        return {
            "torch": MATRIX_TORCH, "triton": MATRIX_TRITON, "torchvision": MATRIX_TORCHVISION,
            "python": ".".join(map(str, sys.version_info[:3])),
            "closure_requirements": list(CLOSURE_REQUIREMENTS),
            "bounds": list(BASE_BOUNDS),
        }


def _base_requirements() -> list[str]:
    return [*TORCH_PINS, *CLOSURE_REQUIREMENTS]


def ensure_pins_env(pins: dict[str, str], base: BaseEnv, cache: Path, progress: Progress = QUIET) -> Path:
    """A venv over the base holding exactly the release's `==` pins of closure packages."""
    key = "-".join(f"{n}{v}" for n, v in sorted(pins.items())) or "none"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    root = cache / "pins" / f"py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    marker = root / ".ddtree-matrix-complete"
    if not (marker.exists() and marker.read_text() == key):
        shutil.rmtree(root, ignore_errors=True)
        make_venv(root)
        _link_layers(root, [base.ensure()])
        if pins:
            constraints = root / "constraints.txt"
            constraints.write_text("".join(f"{c}\n" for c in TORCH_PINS))
            pip(["--python", str(root / "bin" / "python"), "install", "-c", str(constraints),
                 *(f"{n}=={v}" for n, v in sorted(pins.items()))],
                what=f"install the release pins {key}", progress=progress, timeout=STEP_TIMEOUT_S)
        marker.write_text(key)
    return site_packages(root)


def scratch_venv(
    release: str, wheel: Path, layers: list[Path], scratch: Path, progress: Progress = QUIET
) -> Path:
    env = scratch / f"sglang-{release}"
    make_venv(env)
    pip(["--python", str(env / "bin" / "python"), "install", "--no-deps", "--no-compile", str(wheel)],
        what=f"install {wheel.name}", progress=progress)
    _link_layers(env, list(reversed(layers)))
    return env


def _link_layers(env: Path, layers: list[Path]) -> None:
    """One `.pth` line per layer, first wins: the env's own packages, then these, in order."""
    (site_packages(env) / "ddtree_matrix_layers.pth").write_text("".join(f"{p}\n" for p in layers))


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def run_in_venv(
    env: Path, name: str, args: Sequence[str | Path], extra_env: Mapping[str, str] | None = None
) -> TargetRun:
    """An in-target script in the scratch venv, isolated, on the CPU."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    environ |= {"CUDA_VISIBLE_DEVICES": ""} | dict(extra_env or {})
    return run_script(env / "bin" / "python", name, args, timeout=STEP_TIMEOUT_S, env=environ)
