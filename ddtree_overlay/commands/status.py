"""`status`: the env, its sglang and runtime, the matching patch set and the overlay state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.fingerprint import fingerprint, runtime_warnings, select_patch_set
from ddtree_overlay.engine.gitdiverge import compare_trees
from ddtree_overlay.engine.images import AppliedOverlay, overall_state
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.engine.site import EnvOverlay, open_overlay


def status(env: EnvInfo, *, manifest: Path | None = None, git_checkout: Path | None = None) -> Result:
    overlay = open_overlay(env)
    sglang = overlay.sglang
    try:
        patch_set: PatchSet | None = select_patch_set(env, manifest)
        match: dict[str, Any] = {"id": patch_set.id, "versions": str(patch_set.versions)}
    except OverlayError as error:
        patch_set, match = None, {"id": None, "reason": error.message}
    data: dict[str, Any] = {
        "env": _env_data(env),
        "sglang": _sglang_data(sglang) | {"fingerprint": fingerprint(env)},
        "runtime": _runtime_data(env),
        "patch_set": match,
        "overlay": _overlay_data(overlay, patch_set),
    }
    if git_checkout is not None and sglang.location is not None:
        data["git"] = compare_trees(sglang.location, git_checkout)
    issues = tuple(Issue("runtime_mismatch", text) for text in runtime_warnings(env))
    return Result(("status",), "ok", data, issues)


def _env_data(env: EnvInfo) -> dict[str, Any]:
    return {
        "path": str(env.requested),
        "python": str(env.python),
        "python_version": env.python_version,
        "is_venv": env.is_venv,
        "externally_managed": env.externally_managed,
    }


def _sglang_data(sglang: SglangInstall) -> dict[str, Any]:
    record = sglang.record
    return {
        "version": sglang.version,
        "location": str(sglang.location),
        "site_packages": str(sglang.site_packages),
        "install_kind": sglang.install_kind,
        "commit": sglang.commit,
        "editable_checkout": sglang.editable_checkout,
        "record": {
            "present": record.present,
            "files": record.files,
            "hashed": record.hashed,
            "modified": list(record.modified),
            "missing": list(record.missing),
        },
    }


def _runtime_data(env: EnvInfo) -> dict[str, Any]:
    return {
        "torch": env.torch.version if env.torch else None,
        "torch_cuda": env.torch.cuda if env.torch else None,
        "sgl_kernel": env.sgl_kernel.version if env.sgl_kernel else None,
        "sgl_kernel_cudart": list(env.sgl_kernel.cudart) if env.sgl_kernel else [],
        "driver_cuda": env.driver_cuda,
    }


def _overlay_data(overlay: EnvOverlay, patch_set: PatchSet | None) -> dict[str, Any]:
    if overlay.pending():
        note = f"an interrupted transaction is pending: {errors.overlay_command('recover', overlay.env.requested)} finishes it"
        return {"state": "needs-recovery", "notes": [note]}
    applied, found = overlay.applied_overlay(patch_set)
    if applied is None:
        return _unapplied(overlay, patch_set, found)
    notes = [*found, *_what_happened(overlay, applied, patch_set)]
    return {
        "state": applied.state,
        "applied": applied.ledger.patch_set_id,
        "applied_at": applied.ledger.applied_at,
        "ledger": "missing" if applied.rebuilt else "present",
        "files": {file.path: file.state for file in applied.files},
        "notes": notes,
    }


def _what_happened(overlay: EnvOverlay, applied: AppliedOverlay, patch_set: PatchSet | None) -> list[str]:
    """Name what moved the env away from the ledger, and the command that settles it."""
    env = overlay.env.requested
    rollback = errors.overlay_command("rollback", env)
    if applied.release_change is not None:
        fix = (
            f"{errors.overlay_command('apply', env)} applies `{patch_set.id}` to it, {rollback} removes the overlay's files"
            if patch_set is not None
            else f"it has no patch set; {rollback} removes the overlay's files"
        )
        return [f"{applied.release_change.describe()}: {fix}"]
    if patch_set is not None and patch_set.content_sha256 != applied.ledger.patch_set_sha256:
        return [f"patch set `{patch_set.id}` changed since it was applied"]
    if applied.state != "partial":
        return []
    patched = [file for file in applied.files if not file.added]
    added = [file for file in applied.files if file.added]
    if all(file.state == "pristine" for file in patched) and all(file.state != "pristine" for file in added):
        what = (
            f"sglang {overlay.sglang.version} was reinstalled: its {len(patched)} patched files are stock again, "
            f"the {len(added)} files the overlay added are left behind"
        )
    else:
        held = sum(file.state == "applied" for file in applied.files)
        what = f"{held} of {len(applied.files)} files hold the overlay, the others their pre-image"
    return [f"{what}: {errors.overlay_command('apply', env)} completes it, {rollback} takes it out"]


def _unapplied(overlay: EnvOverlay, patch_set: PatchSet | None, notes: tuple[str, ...]) -> dict[str, Any]:
    """Nothing of the overlay is there: pristine, unless a file differs from its pre-image."""
    if patch_set is None:
        return {"state": "pristine", "files": {}, "notes": list(notes)}
    files = overlay.rebuilt_overlay(patch_set).files
    return {
        "state": overall_state(files),
        "files": {file.path: file.state for file in files},
        "notes": list(notes),
    }
