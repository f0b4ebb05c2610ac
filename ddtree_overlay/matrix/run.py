"""`matrix`: every release's patch set, applied to a real install, imported on CPU, rolled back.

For each release: `pip download --no-deps` its wheel, `pip install --no-deps` it into a scratch
venv (`matrix.envs`: the release's own pins of SGLang's import closure layered under it), `apply`,
byte-compile the touched files, import the patched and new modules in that venv's interpreter
(CPU), `diff`, `rollback`, and check every file against RECORD again. Writes matrix.json and
matrix.md (`matrix.markdown`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.commands.diff import diff
from ddtree_overlay.commands.rollback import rollback
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
from ddtree_overlay.engine.progress import QUIET, Progress
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.fixture_paths import FIXTURES
from ddtree_overlay.matrix.envs import (
    BaseEnv,
    cache_root,
    closure_names,
    ensure_pins_env,
    ensure_wheel,
    python_fits,
    run_in_venv,
    scratch_venv,
    site_packages,
    wheel_requirements,
)
from ddtree_overlay.matrix.markdown import render_markdown

SETUP_FAILED = "setup-failed"  # fails the run for any release: it was asked for and nothing was checked
FAILING = frozenset({"conflict", "obsolete", "import-failed", "rollback-failed", SETUP_FAILED})  # for a supported one
STATUS_MEANINGS = {
    "clean": "applies at the recorded lines, compiles, imports, rolls back to RECORD",
    "offset": "as clean, but a hunk applied at an offset from its header line",
    "conflict": "a hunk or pre-image does not match the release's files",
    "obsolete": "the release already ships what the patch set adds",
    "import-failed": "applied, but a touched module does not compile or import, or a check fails",
    "rollback-failed": "rollback failed, or files differ from RECORD afterwards",
    "unsupported": "no patch set: `apply` refuses the release (exit 4), as it should",
    "skipped": "not run here (the release needs a newer Python than the matrix interpreter)",
    SETUP_FAILED: "nothing checked: the release's wheel could not be downloaded (no such release, or no "
    "network) or its scratch env not built",
}
STEP_TIMEOUT_S = 1800


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
    step_seconds: dict[str, float] = field(default_factory=dict)

    def fail(self, status: str, step: str, *details: str) -> Cell:
        self.status, self.steps[step] = status, "failed"
        self.details += [d for d in details if d]
        return self


def run_matrix(versions: Sequence[str] | None, *, out_dir: Path, progress: Progress = QUIET) -> Result:
    supported = bundled_releases()
    releases = tuple(versions) if versions else supported
    progress.begin(len(releases))
    cache = cache_root()
    started = time.monotonic()
    with _scratch_state() as scratch:
        base = BaseEnv(cache)
        cells = [_run_release(r, base=base, cache=cache, scratch=scratch, progress=progress) for r in releases]
    report = _report(cells, supported, base.describe(), round(time.monotonic() - started, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "matrix.json").write_text(json.dumps(report, sort_keys=True, indent=2) + "\n")
    (out_dir / "matrix.md").write_text(render_markdown(report))
    failed = [c for c in cells if c.status in FAILING and (c.release in supported or c.status == SETUP_FAILED)]
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


class _StepClock:
    """Shows each step of a release as it starts and times it into ``cell.step_seconds``."""

    def __init__(self, cell: Cell, progress: Progress) -> None:
        self._cell, self._progress = cell, progress
        self._current: str | None = None
        self._since = 0.0

    def step(self, name: str) -> None:
        self.stop()
        self._current, self._since = name, time.monotonic()
        self._progress.step(f"sglang {self._cell.release}: {name}")

    def stop(self) -> None:
        if self._current is not None:
            self._cell.step_seconds[self._current] = round(time.monotonic() - self._since, 1)
            self._current = None


def _run_release(release: str, *, base: BaseEnv, cache: Path, scratch: Path, progress: Progress) -> Cell:
    cell, started = Cell(release), time.monotonic()
    clock = _StepClock(cell, progress)
    try:
        _run_steps(cell, base=base, cache=cache, scratch=scratch, clock=clock, progress=progress,
                   supported=release in bundled_releases())
    except ScratchEnvFailed as error:
        cell.fail(SETUP_FAILED, "setup", error.message, *error.details)
    clock.stop()
    cell.seconds = round(time.monotonic() - started, 1)
    steps = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in cell.step_seconds.items())
    progress.done(f"sglang {release}: {cell.status} in {cell.seconds:.0f} s ({steps})")
    return cell


def _run_steps(
    cell: Cell, *, base: BaseEnv, cache: Path, scratch: Path, clock: _StepClock, progress: Progress,
    supported: bool,
) -> None:
    clock.step("download")
    wheel = ensure_wheel(cell.release, cache / "wheels", progress)
    requires = wheel_requirements(wheel)
    if not python_fits(requires.get("python")):
        cell.status, cell.steps["setup"] = "skipped", f"needs Python {requires['python']}"
        return
    cell.torch_pin = requires["pins"].get("torch")
    clock.step("base env")
    layers = [base.ensure(progress)]
    if supported:  # a release `apply` will refuse needs no import closure
        clock.step("pins env")
        cell.pins = {n: v for n, v in requires["pins"].items() if n in closure_names()}
        layers.append(ensure_pins_env(cell.pins, base, cache, progress))
    clock.step("install")
    env = scratch_venv(cell.release, wheel, layers, scratch, progress)
    cell.steps["install"] = "ok"
    clock.step("apply")
    patch_set = _apply_step(cell, env)
    if patch_set is None:
        return
    clock.step("compile + import")
    if _compile_and_import(cell, env, patch_set):
        clock.step("diff")
        _diff_step(cell, env)
    clock.step("rollback")
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
    site = site_packages(env)
    return any((site / "sglang/srt/speculative" / name).exists() for name in ("ddtree_spec.py", "ddtree_worker_v2.py"))


def _compile_and_import(cell: Cell, env: Path, patch_set: PatchSet) -> bool:
    site = site_packages(env)
    sources = [site / p for p in patch_set.touched_paths() if p.endswith(".py")]
    compiled = run_in_venv(env, "byte_compile", sources)
    if compiled.problem is not None:
        cell.fail("import-failed", "compile", *compiled.tail())
        return False
    cell.steps["compile"] = "ok"
    modules = [_module_name(p) for p in patch_set.touched_paths() if p.endswith(".py")]
    done = run_in_venv(
        env,
        "matrix_checks",
        modules,
        extra_env={"PYTHONDONTWRITEBYTECODE": "1", "DDTREE_MATRIX_FIXTURES": str(FIXTURES)},
    )
    if done.problem is not None:
        cell.fail("import-failed", "import", *done.tail())
        return False
    report = done.result
    cell.imports = report["modules"]
    cell.checks = {k: report.get(k) for k in (*IN_TARGET_CHECKS, "shims", "torch")}
    problems = _import_problems(report)
    if problems:
        cell.fail("import-failed", "import", *problems)
        return False
    cell.steps["import"] = "ok"
    return True


# What in_target/matrix_checks.py reports besides the imports, and the label of each check
# whose result is a list of problems.
IN_TARGET_CHECKS = (
    "registry", "server_args", "compat", "resolution", "hybrid_resolution", "worker_width",
    "verify_width", "grammar", "logprobs",
)
LISTED_PROBLEMS = {
    "resolution": "server-args resolution",
    "hybrid_resolution": "hybrid server-args resolution",
    "worker_width": "worker widths",
    "verify_width": "verify width scope",
    "grammar": "grammar over the tree",
    "logprobs": "logprobs over the tree",
}


def _import_problems(report: dict[str, Any]) -> list[str]:
    problems = [
        f"import {name}: {entry['error']} ({entry['where']})"
        for name, entry in report["modules"].items()
        if not entry["ok"]
    ]
    registry = report.get("registry") or {}
    for key in IN_TARGET_CHECKS:
        value = report.get(key)
        if isinstance(value, dict) and "error" in value:
            problems.append(f"{key} check: {value['error']}")
    problems += [f"registry: {p}" for p in registry.get("problems", [])]
    problems += [f"server args: {p}" for p in report.get("server_args") or [] if isinstance(p, str)]
    compat = report.get("compat")
    if isinstance(compat, list):
        problems += [f"compat contract: {p}" for p in compat]
    for key, label in LISTED_PROBLEMS.items():
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
    site = site_packages(env)
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


def _report(cells: list[Cell], supported: tuple[str, ...], base: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {
        "matrix_version": 1,
        "supported": list(supported),
        "base_env": base,
        "seconds": seconds,
        "statuses": STATUS_MEANINGS,
        "failing_statuses": sorted(FAILING),
        "cells": [asdict(c) for c in cells],
    }


