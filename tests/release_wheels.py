"""The stock sglang wheels in the matrix cache (~/.cache/ddtree-overlay/matrix/wheels;
`ddtree-overlay matrix` fills it) and a release's patches applied to their files: for the tests
that check per-release hunks against each release's own sources; and a scratch venv with a
release installed over the matrix's CPU import closure, for the tests that run its code."""

from __future__ import annotations

from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT

from ddtree_overlay.engine.hunks import apply_hunks
from ddtree_overlay.engine.patchset import load_patch_set
from ddtree_overlay.matrix.envs import (
    BaseEnv,
    cache_root,
    closure_names,
    ensure_pins_env,
    ensure_wheel,
    scratch_venv,
    wheel_requirements,
)

WHEELS = Path.home() / ".cache" / "ddtree-overlay" / "matrix" / "wheels"


def stock_wheel(version: str) -> Path:
    """The release's cached wheel; the test is skipped without it."""
    wheel = next(iter(sorted(WHEELS.glob(f"sglang-{version}-*.whl"))), None)
    if wheel is None:
        pytest.skip(f"no sglang {version} wheel in {WHEELS} (run `ddtree-overlay matrix` once)")
    return wheel


def release_diffs(version: str) -> list:
    """(patch path, diff, target file) of every diff in the release's patch set, in order."""
    patch_set = load_patch_set(REPO_ROOT / "manifests" / f"{version}.toml", require_file_table=False)
    return [
        (patch.path, diff, diff.target_path.removeprefix("b/"))
        for patch in patch_set.patches
        for diff in patch.diffs
    ]


def apply_at_own_lines(stock: bytes, diff, what) -> str:
    """``diff`` applied to ``stock``: every hunk must apply, at its own line (no offset)."""
    outcome = apply_hunks(stock, diff.hunks)
    assert outcome.applied, (what, [h.describe() for h in outcome.hunks])
    assert all(h.offset == 0 for h in outcome.hunks), (what, [h.describe() for h in outcome.hunks])
    return outcome.after.decode()


def release_env(release: str, scratch: Path) -> Path:
    """A venv under ``scratch`` with sglang ``release`` (no deps) over the matrix's CPU torch
    and the release's pinned pure-Python closure (the wheel downloads once, then is cached)."""
    cache = cache_root()
    wheel = ensure_wheel(release, cache / "wheels")
    pins = {n: v for n, v in wheel_requirements(wheel)["pins"].items() if n in closure_names()}
    base = BaseEnv(cache)
    return scratch_venv(release, wheel, [base.ensure(), ensure_pins_env(pins, base, cache)], scratch)
