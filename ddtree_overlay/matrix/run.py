"""`matrix`: every release's patch set, applied to a real install, imported on CPU, rolled back.

For each release: `pip download --no-deps` its wheel, `pip install --no-deps` it into a scratch
venv, `apply`, byte-compile the touched files, import the patched and new modules in that
venv's interpreter (CPU), `diff`, `rollback`, and check every file against RECORD again.

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
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.commands.diff import diff
from ddtree_overlay.commands.rollback import rollback
from ddtree_overlay.engine import errors
from ddtree_overlay.engine.datadir import bundled_releases
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import (
    HunkDoesNotApply,
    OverlayError,
    PreImageMismatch,
    ScratchEnvFailed,
    UnsupportedRelease,
    VerifyFailed,
)
from ddtree_overlay.engine.fingerprint import select_patch_set
from ddtree_overlay.engine.ledger import STATE_DIR_ENV
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.engine.target import TargetRun, run_script

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
WHEEL_PLATFORM = "manylinux_2_34_x86_64"
FAILING = frozenset({"conflict", "obsolete", "import-failed", "rollback-failed"})
STATUS_MEANINGS = {
    "clean": "applies at the recorded lines, compiles, imports, rolls back to RECORD",
    "offset": "as clean, but a hunk applied at an offset from its header line",
    "conflict": "a hunk or pre-image does not match the release's files",
    "obsolete": "the release already ships what the patch set adds",
    "import-failed": "applied, but a touched module does not compile or import, or a check fails",
    "rollback-failed": "rollback failed, or files differ from RECORD afterwards",
    "unsupported": "no patch set: `apply` refuses the release (exit 4), as it should",
    "skipped": "not run here (the release needs a newer Python than the matrix interpreter)",
}
_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # config.json of the bundled target/drafter pair
_STEP_TIMEOUT_S = 1800


class MatrixProgress(Protocol):
    def begin(self, releases: Sequence[str]) -> None: ...
    def step(self, release: str, what: str) -> None: ...
    def done(self, cell: Cell) -> None: ...


@dataclass
class Cell:
    release: str
    status: str = "clean"
    patch_set: str | None = None
    steps: dict[str, str] = field(default_factory=dict)
    hunks: dict[str, list[int]] = field(default_factory=dict)
    imports: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)
    torch_pin: str | None = None
    seconds: float = 0.0

    def fail(self, status: str, step: str, *details: str) -> Cell:
        self.status, self.steps[step] = status, "failed"
        self.details += [d for d in details if d]
        return self


def cache_root() -> Path:
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override) if override else Path.home() / ".cache" / "ddtree-overlay" / "matrix"


def run_matrix(
    versions: Sequence[str] | None, *, out_dir: Path, progress: MatrixProgress
) -> Result:
    supported = bundled_releases()
    releases = tuple(versions) if versions else supported
    progress.begin(releases)
    cache = cache_root()
    started = time.monotonic()
    with _scratch_state() as scratch:
        base = _BaseEnv(cache)
        cells = [_run_release(r, base=base, cache=cache, scratch=scratch, progress=progress) for r in releases]
    report = _report(cells, supported, base.describe(), round(time.monotonic() - started, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "matrix.json").write_text(json.dumps(report, sort_keys=True, indent=2) + "\n")
    (out_dir / "matrix.md").write_text(render_markdown(report))
    failed = [c for c in cells if c.status in FAILING and c.release in supported]
    data = report | {"out": str(out_dir)}
    if failed:
        issues = tuple(
            Issue("matrix_cell_failed", f"sglang {c.release}: {c.status}: {'; '.join(c.details[:2])}")
            for c in failed
        )
        return Result(("matrix",), "error", data, issues, exit_code=int(VerifyFailed.exit_code))
    return Result(("matrix",), "ok", data)


@contextmanager
def _scratch_state() -> Iterator[Path]:
    """Scratch venvs and a private overlay state dir, removed afterwards."""
    scratch = Path(tempfile.mkdtemp(prefix="ddtree-matrix-"))
    previous = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(scratch / "state")
    try:
        yield scratch
    finally:
        if previous is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = previous
        shutil.rmtree(scratch, ignore_errors=True)


def _run_release(
    release: str, *, base: _BaseEnv, cache: Path, scratch: Path, progress: MatrixProgress
) -> Cell:
    cell, started = Cell(release), time.monotonic()
    try:
        _run_steps(cell, base=base, cache=cache, scratch=scratch, progress=progress,
                   supported=release in bundled_releases())
    except ScratchEnvFailed as error:
        cell.fail("import-failed", "setup", error.message, *error.details)
    cell.seconds = round(time.monotonic() - started, 1)
    progress.done(cell)
    return cell


def _run_steps(
    cell: Cell, *, base: _BaseEnv, cache: Path, scratch: Path, progress: MatrixProgress, supported: bool
) -> None:
    progress.step(cell.release, "download wheel")
    wheel = ensure_wheel(cell.release, cache / "wheels")
    requires = _wheel_requirements(wheel)
    if not _python_fits(requires.get("python")):
        cell.status, cell.steps["setup"] = "skipped", f"needs Python {requires['python']}"
        return
    cell.torch_pin = requires["pins"].get("torch")
    progress.step(cell.release, "prepare envs")
    layers = [base.ensure()]
    if supported:  # a release `apply` will refuse needs no import closure
        cell.pins = {n: v for n, v in requires["pins"].items() if n in _closure_names()}
        layers.append(_ensure_pins_env(cell.pins, base, cache))
    env = _scratch_venv(cell.release, wheel, layers, scratch)
    cell.steps["install"] = "ok"
    progress.step(cell.release, "apply")
    patch_set = _apply_step(cell, env)
    if patch_set is None:
        return
    progress.step(cell.release, "compile + import (CPU)")
    if _compile_and_import(cell, env, patch_set):
        progress.step(cell.release, "diff")
        _diff_step(cell, env)
    progress.step(cell.release, "rollback")
    _rollback_step(cell, env, patch_set)


def _apply_step(cell: Cell, env: Path) -> PatchSet | None:
    try:
        result = apply(probe_env(env))
    except UnsupportedRelease as error:
        cell.status, cell.steps["apply"] = "unsupported", "refused (exit 4)"
        cell.details += [error.message, *error.details]
        return None
    except (HunkDoesNotApply, PreImageMismatch) as error:
        status = "obsolete" if _already_shipped(env) else "conflict"
        cell.fail(status, "apply", error.message, *error.details)
        return None
    except OverlayError as error:
        cell.fail("conflict", "apply", error.message, *error.details)
        return None
    cell.patch_set = result.data["patch_set"]
    cell.steps["apply"] = "ok"
    cell.hunks = {f["path"]: [h["offset"] for h in f["hunks"]] for f in result.data["files"]}
    if any(offset for offsets in cell.hunks.values() for offset in offsets):
        cell.status = "offset"
    return select_patch_set(probe_env(env), None)


def _already_shipped(env: Path) -> bool:
    site = _site_packages(env)
    return any((site / "sglang/srt/speculative" / name).exists() for name in ("ddtree_spec.py", "ddtree_worker_v2.py"))


def _compile_and_import(cell: Cell, env: Path, patch_set: PatchSet) -> bool:
    site = _site_packages(env)
    sources = [site / p for p in patch_set.touched_paths() if p.endswith(".py")]
    compiled = _run_script(env, "byte_compile", sources)
    if compiled.problem is not None:
        cell.fail("import-failed", "compile", *compiled.tail())
        return False
    cell.steps["compile"] = "ok"
    modules = [_module_name(p) for p in patch_set.touched_paths() if p.endswith(".py")]
    done = _run_script(
        env,
        "matrix_checks",
        modules,
        extra_env={"PYTHONDONTWRITEBYTECODE": "1", "DDTREE_MATRIX_FIXTURES": str(_FIXTURES)},
    )
    if done.problem is not None:
        cell.fail("import-failed", "import", *done.tail())
        return False
    report = done.result
    cell.imports = report["modules"]
    cell.checks = {
        k: report.get(k)
        for k in (
            "registry", "server_args", "compat", "resolution", "worker_width", "verify_width",
            "shims", "torch",
        )
    }
    problems = _import_problems(report)
    if problems:
        cell.fail("import-failed", "import", *problems)
        return False
    cell.steps["import"] = "ok"
    return True


def _import_problems(report: dict[str, Any]) -> list[str]:
    problems = [
        f"import {name}: {entry['error']} ({entry['where']})"
        for name, entry in report["modules"].items()
        if not entry["ok"]
    ]
    registry = report.get("registry") or {}
    checks = ("registry", "server_args", "compat", "resolution", "worker_width", "verify_width")
    for key in checks:
        value = report.get(key)
        if isinstance(value, dict) and "error" in value:
            problems.append(f"{key} check: {value['error']}")
    problems += [f"registry: {p}" for p in registry.get("problems", [])]
    problems += [f"server args: {p}" for p in report.get("server_args") or [] if isinstance(p, str)]
    compat = report.get("compat")
    if isinstance(compat, list):
        problems += [f"compat contract: {p}" for p in compat]
    for key, label in (
        ("resolution", "server-args resolution"),
        ("worker_width", "worker widths"),
        ("verify_width", "verify width scope"),
    ):
        value = report.get(key)
        if isinstance(value, list):
            problems += [f"{label}: {p}" for p in value]
    return problems


def _diff_step(cell: Cell, env: Path) -> None:
    result = diff(probe_env(env), stat=True)
    if result.data.get("mode") != "applied" or not result.data.get("files"):
        cell.fail("rollback-failed", "diff", "diff after apply shows no applied files")
        return
    cell.steps["diff"] = f"{len(result.data['files'])} file(s)"


def _rollback_step(cell: Cell, env: Path, patch_set: PatchSet) -> None:
    try:
        rollback(probe_env(env))
    except OverlayError as error:
        cell.fail("rollback-failed", "rollback", error.message, *error.details)
        return
    after = probe_env(env).sglang
    site = _site_packages(env)
    leftovers = [t.target for t in patch_set.new_files if (site / t.target).exists()]
    if after is None or after.record.modified or after.record.missing or leftovers:
        modified = after.record.modified + after.record.missing if after else ("sglang vanished",)
        cell.fail("rollback-failed", "record", *(f"differs from RECORD: {p}" for p in modified),
                  *(f"left behind: {p}" for p in leftovers))
        return
    cell.steps["rollback"] = "ok"
    cell.steps["record"] = "matches"


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _tail(text: str, lines: int = 6) -> list[str]:
    return [line for line in text.strip().splitlines()[-lines:] if line.strip()] or ["no output"]


# --- environments -----------------------------------------------------------------------------


def ensure_wheel(release: str, wheels: Path) -> Path:
    """The release's wheel for this interpreter's Python, from PyPI once, then from the cache."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pattern = f"sglang-{release}-*.whl"
    found = [w for w in sorted(wheels.glob(pattern)) if tag in w.name or "py3-none" in w.name]
    if found:
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    _pip(
        ["download", "--no-deps", "--only-binary=:all:", "--python-version",
         f"{sys.version_info.major}.{sys.version_info.minor}", "--platform", WHEEL_PLATFORM,
         "-d", str(wheels), f"sglang=={release}"],
        what=f"download sglang=={release}",
    )
    found = [w for w in sorted(wheels.glob(pattern)) if tag in w.name or "py3-none" in w.name]
    if not found:
        raise errors.wheel_missing(release, tag, wheels)
    return found[-1]


def _wheel_requirements(wheel: Path) -> dict[str, Any]:
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


def _python_fits(spec: str | None) -> bool:
    if not spec:
        return True
    from packaging.specifiers import SpecifierSet

    current = ".".join(map(str, sys.version_info[:3]))
    return SpecifierSet(spec).contains(current)


def _closure_names() -> frozenset[str]:
    return frozenset(canonicalize_name(r) for r in CLOSURE_REQUIREMENTS)


class _BaseEnv:
    """CPU torch + triton + torchvision (no deps) + the closure's pure-Python packages."""

    def __init__(self, cache: Path) -> None:
        key = f"py{sys.version_info.major}{sys.version_info.minor}-torch{MATRIX_TORCH}-v1"
        self.root = cache / "base" / key
        self._ready: Path | None = None

    def ensure(self) -> Path:
        if self._ready is not None:
            return self._ready
        marker = self.root / ".ddtree-matrix-complete"
        wanted = "\n".join(_base_requirements()) + "\n"
        if not (marker.exists() and marker.read_text() == wanted):
            shutil.rmtree(self.root, ignore_errors=True)
            _make_venv(self.root)
            python = self.root / "bin" / "python"
            constraints = self.root / "constraints.txt"
            constraints.write_text(f"torch=={MATRIX_TORCH}\ntriton=={MATRIX_TRITON}\n")
            _pip(["--python", str(python), "install", "-c", str(constraints), *_base_requirements()],
                 what="install the matrix base env", timeout=_STEP_TIMEOUT_S)
            _pip(["--python", str(python), "install", "--no-deps", f"torchvision=={MATRIX_TORCHVISION}"],
                 what="install torchvision into the matrix base env")
            marker.write_text(wanted)
        self._ready = _site_packages(self.root)
        return self._ready

    def describe(self) -> dict[str, Any]:
        return {
            "torch": MATRIX_TORCH, "triton": MATRIX_TRITON, "torchvision": MATRIX_TORCHVISION,
            "python": ".".join(map(str, sys.version_info[:3])),
            "closure_requirements": list(CLOSURE_REQUIREMENTS),
        }


def _base_requirements() -> list[str]:
    return [f"torch=={MATRIX_TORCH}", f"triton=={MATRIX_TRITON}", *CLOSURE_REQUIREMENTS]


def _ensure_pins_env(pins: dict[str, str], base: _BaseEnv, cache: Path) -> Path:
    """A venv over the base holding exactly the release's `==` pins of closure packages."""
    key = "-".join(f"{n}{v}" for n, v in sorted(pins.items())) or "none"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    root = cache / "pins" / f"py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    marker = root / ".ddtree-matrix-complete"
    if not (marker.exists() and marker.read_text() == key):
        shutil.rmtree(root, ignore_errors=True)
        _make_venv(root)
        _link_layers(root, [base.ensure()])
        if pins:
            constraints = root / "constraints.txt"
            constraints.write_text(f"torch=={MATRIX_TORCH}\ntriton=={MATRIX_TRITON}\n")
            _pip(["--python", str(root / "bin" / "python"), "install", "-c", str(constraints),
                  *(f"{n}=={v}" for n, v in sorted(pins.items()))],
                 what=f"install the release pins {key}", timeout=_STEP_TIMEOUT_S)
        marker.write_text(key)
    return _site_packages(root)


def _scratch_venv(release: str, wheel: Path, layers: list[Path], scratch: Path) -> Path:
    env = scratch / f"sglang-{release}"
    _make_venv(env)
    _pip(["--python", str(env / "bin" / "python"), "install", "--no-deps", "--no-compile", str(wheel)],
         what=f"install {wheel.name}")
    _link_layers(env, list(reversed(layers)))
    return env


def _link_layers(env: Path, layers: list[Path]) -> None:
    """One `.pth` line per layer, first wins: the env's own packages, then these, in order."""
    (_site_packages(env) / "ddtree_matrix_layers.pth").write_text("".join(f"{p}\n" for p in layers))


def _make_venv(root: Path) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [_base_python(), "-m", "venv", "--without-pip", str(root)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise errors.venv_failed(root, _tail(done.stderr))


def _base_python() -> str:
    """The interpreter venvs are made from (a venv's `python -m venv` works too)."""
    return sys.executable


def _site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def _pip(args: list[str], *, what: str, timeout: int = 600) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as error:
        raise errors.pip_failed(f"{what}: pip ran past {timeout} s") from error
    if done.returncode != 0:
        problems = [line for line in done.stderr.splitlines() if not line.startswith("WARNING")]
        raise errors.pip_failed(what, _tail("\n".join(problems)))


def _run_script(
    env: Path, name: str, args: Sequence[str | Path], extra_env: Mapping[str, str] | None = None
) -> TargetRun:
    """An in-target script in the scratch venv, isolated, on the CPU."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    environ |= {"CUDA_VISIBLE_DEVICES": ""} | dict(extra_env or {})
    return run_script(env / "bin" / "python", name, args, timeout=_STEP_TIMEOUT_S, env=environ)


# --- report -----------------------------------------------------------------------------------


def _report(cells: list[Cell], supported: tuple[str, ...], base: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {
        "matrix_version": 1,
        "supported": list(supported),
        "base_env": base,
        "seconds": seconds,
        "statuses": STATUS_MEANINGS,
        "cells": [asdict(c) for c in cells],
    }


def render_markdown(report: dict[str, Any]) -> str:
    base = report["base_env"]
    lines = [
        "# DDTree patch-compat matrix",
        "",
        "Generated by `ddtree-overlay matrix`; do not edit by hand. One row per SGLang release: its",
        "wheel installed with `pip install --no-deps` into a scratch venv, `apply`, byte-compile, import",
        f"of every touched module on CPU (Python {base['python']}, torch {base['torch']} CPU), `diff`,",
        "`rollback`, and every file checked against the wheel's RECORD again.",
        "",
        "| release | status | patch set | hunk offsets | apply | import (CPU) | rollback + RECORD | torch pin (used: "
        f"{base['torch']}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in report["cells"]:
        lines.append(_markdown_row(cell))
    lines += ["", "Statuses:", ""]
    lines += [f"- `{name}`: {text}" for name, text in report["statuses"].items()]
    lines += _markdown_notes(report)
    return "\n".join(lines) + "\n"


def _markdown_row(cell: dict[str, Any]) -> str:
    steps = cell["steps"]
    offsets = sorted({o for values in cell["hunks"].values() for o in values if o})
    imported = steps.get("import") or steps.get("compile") or "-"
    rolled = "ok" if steps.get("record") == "matches" else steps.get("rollback") or steps.get("record") or "-"
    return (
        f"| {cell['release']} | **{cell['status']}** | {cell['patch_set'] or '-'} | "
        f"{', '.join(f'{o:+d}' for o in offsets) or 'none'} | {steps.get('apply', steps.get('setup', '-'))} | "
        f"{imported} | {rolled} | {cell['torch_pin'] or '-'} |"
    )


def _markdown_notes(report: dict[str, Any]) -> list[str]:
    base = report["base_env"]
    lines = [
        "",
        "## How the CPU import is done, and its limits",
        "",
        f"- One cached base env: CPU torch {base['torch']}, triton {base['triton']} (torch's own pin),",
        f"  torchvision {base['torchvision']} installed without dependencies, and the unpinned packages",
        f"  the import closure needs: {', '.join(base['closure_requirements'])}.",
        "- Per release, a cached env with that release's own `==` pins of those packages (resolved by",
        "  pip over the base), and the scratch venv holding the release's wheel itself.",
        "- Not the release's torch: every row names the torch it pins; the import ran on "
        f"{base['torch']} CPU.",
        "- torchvision's `_C` (a CUDA build) cannot load with CPU torch; the import probe defines the",
        "  two op schemas torchvision registers fakes for (`nms`, `qnms`) so its Python package",
        "  imports. Nothing else is stubbed: no sglang module, no sgl_kernel, no flashinfer.",
        "- Checked beyond the imports, in the release's interpreter: `DDTREE` resolves through the",
        "  registry and answers every predicate of the builtin enum; `--speculative-ddtree-budget`",
        "  reaches the CLI parser; the compat shim's contract (the DFlash internals the worker uses);",
        "  the server-args hook on a real `ServerArgs` (verify width, block size, budget, refusals);",
        "  the widths the worker reads once the args are published, and its draft block-size scope;",
        "  where the shim builds narrower verify widths (budget schedule, adaptive budgets), the",
        "  width and the release's own capture batch sizes inside and after that scope.",
        "- Not covered on CPU: CUDA kernels (sgl_kernel, flashinfer, JIT), CUDA-graph capture and",
        "  anything a forward pass does; that is `verify --smoke` on a GPU.",
    ]
    details = [c for c in report["cells"] if c["details"] or c["checks"].get("registry")]
    if details:
        lines += ["", "## Per-release details", ""]
    for cell in details:
        lines.append(f"### {cell['release']} ({cell['status']})")
        lines.append("")
        lines += [f"- {d}" for d in cell["details"][:12]]
        registry = cell["checks"].get("registry") or {}
        differs = registry.get("differs_from_dflash") if isinstance(registry, dict) else None
        if differs:
            names = ", ".join(f"`{k}` ({v['DDTREE']} vs {v['DFLASH']})" for k, v in sorted(differs.items()))
            lines.append(f"- DDTREE answers differently from DFLASH (by design): {names}")
        pins = ", ".join(f"{n}=={v}" for n, v in sorted(cell["pins"].items()))
        if pins:
            lines.append(f"- release pins used for the import: {pins}")
        lines.append("")
    return lines


_ROW = re.compile(r"^\| (?P<release>[0-9][^ ]*) \| \*\*(?P<status>[a-z-]+)\*\* \|", re.MULTILINE)


def statuses_in_markdown(text: str) -> dict[str, str]:
    """release -> status, read back from a rendered matrix.md (for the docs check)."""
    return {m["release"]: m["status"] for m in _ROW.finditer(text)}
