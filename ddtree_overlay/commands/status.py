"""`status`: the env, its sglang and runtime, the matching patch set and the overlay state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.files import sha256_of
from ddtree_overlay.engine.fingerprint import fingerprint, runtime_warnings, select_patch_set
from ddtree_overlay.engine.gitdiverge import compare_trees
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.engine.site import EnvOverlay, SiteTree, open_overlay, overall_state


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
        return {"state": "needs-recovery", "notes": ["an interrupted transaction is pending"]}
    applied = overlay.applied()
    if applied is None:
        return _unmanaged_state(overlay.tree, patch_set)
    states = overlay.file_states(applied)
    notes = []
    if patch_set is not None and patch_set.content_sha256 != applied.patch_set_sha256:
        notes.append(f"patch set `{patch_set.id}` changed since it was applied")
    return {
        "state": overall_state(states),
        "applied": applied.patch_set_id,
        "applied_at": applied.applied_at,
        "files": {s.path: s.state for s in states},
        "notes": notes,
    }


def _unmanaged_state(tree: SiteTree, patch_set: PatchSet | None) -> dict[str, Any]:
    """No ledger: pristine, unless files already differ from the patch set's pre-images."""
    if patch_set is None:
        return {"state": "pristine", "files": {}, "notes": []}
    files = {}
    for entry in patch_set.files:
        current = sha256_of(tree.path(entry.path))
        if current == entry.pre_sha256:
            files[entry.path] = "pristine"
        elif current == entry.post_sha256:
            files[entry.path] = "post-image without ledger (applied by hand, or merged upstream?)"
        else:
            files[entry.path] = "differs from the pre-image"
    drifted = any(value != "pristine" for value in files.values())
    return {"state": "drifted" if drifted else "pristine", "files": files, "notes": []}

