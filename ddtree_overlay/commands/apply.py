"""`apply`: plan in memory, refuse on any mismatch, then write in one transaction.

From wherever the env is, as long as every file holds an image the overlay knows: pristine,
applied without a ledger (it is rebuilt), partly applied (a reinstall put back the patched files
and left the added ones), or applied for another release (an upgrade over an applied env: the
old overlay's added files are replaced or removed in the same transaction).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.engine import errors, ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.files import sha256_hex
from ddtree_overlay.engine.fingerprint import select_patch_set
from ddtree_overlay.engine.images import AppliedOverlay, FileState, overlay_images
from ddtree_overlay.engine.ledger import Ledger, LedgerFile
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.planner import ApplyPlan, plan_apply
from ddtree_overlay.engine.recovery import recover_pending
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import EnvOverlay, open_overlay
from ddtree_overlay.engine.transaction import FileStep, Transition


def apply(env: EnvInfo, *, manifest: Path | None = None, check: bool = False) -> Result:
    overlay = open_overlay(env, for_writing=True)
    patch_set = select_patch_set(env, manifest)
    with overlay.locked("apply"):
        if check:
            overlay.refuse_pending(also="`apply` without --check")
            notes: tuple[str, ...] = ()
        else:
            notes = recover_pending(overlay, patch_set)
        applied, found = overlay.applied_overlay(patch_set)
        notes += found + _what_changed(applied, patch_set)
        if applied is not None and not applied.rebuilt and applied.release_change is None:
            _refuse_changed(applied, patch_set, overlay)
            if applied.state == "applied":
                data = {"patch_set": patch_set.id, "already_applied": True, "files": [f.path for f in applied.files]}
                return Result(("apply",), "noop", data, messages=notes)  # the view says it
        plan = plan_apply(
            patch_set,
            overlay.tree,
            env=env.requested,
            is_foreign=lambda path, sha256: _is_foreign(applied, path, sha256),
            leftovers=_leftovers(applied, patch_set),
        )
        transition = _transition(plan, overlay)
        if check:
            transaction.check(transition, overlay)
            return Result(("apply",), "ok", _plan_data(plan, applied=False), messages=notes)
        transaction.run(transition, overlay, contents=_contents(plan))
    if not transition.steps:
        data = {"patch_set": patch_set.id, "already_applied": True, "files": [f.path for f in plan.files]}
        return Result(("apply",), "noop", data, messages=(*notes, f"{patch_set.id} is already applied; recorded it"))
    return Result(("apply",), "ok", _plan_data(plan, applied=True), messages=notes)


def _what_changed(applied: AppliedOverlay | None, patch_set: PatchSet) -> tuple[str, ...]:
    if applied is None:
        return ()
    if applied.release_change is not None:
        return (f"{applied.release_change.describe()}: applying {patch_set.id} to it",)
    if applied.state == "partial":
        held = sum(file.state == "applied" for file in applied.files)
        return (f"{held} of {len(applied.files)} files held the overlay already: completing it",)
    return ()


def _refuse_changed(applied: AppliedOverlay, patch_set: PatchSet, overlay: EnvOverlay) -> None:
    env = overlay.env.requested
    if applied.ledger.patch_set_sha256 != patch_set.content_sha256:
        raise errors.patch_set_changed(env, patch_set.id, applied.ledger.patch_set_sha256, patch_set.content_sha256)
    edited = [file for file in applied.files if file.state == "edited"]
    if edited:
        raise errors.changed_since_apply(env, [f"{file.path}: edited" for file in edited])


def _is_foreign(applied: AppliedOverlay | None, path: str, sha256: str | None) -> bool:
    """Does an added file hold the overlay's bytes of another release (the ledger's, or any
    bundled patch set's)?"""
    if sha256 is None:
        return False
    previous = {entry.path: entry.post_sha256 for entry in applied.ledger.files} if applied else {}
    return sha256 == previous.get(path) or sha256 in overlay_images().get(path, frozenset())


def _leftovers(applied: AppliedOverlay | None, patch_set: PatchSet) -> tuple[FileState, ...]:
    """Files a previous overlay added that this patch set does not, still holding its bytes."""
    if applied is None:
        return ()
    touched = set(patch_set.touched_paths())
    return tuple(
        file for file in applied.files
        if file.added and file.path not in touched and file.state in ("applied", "other-release")
    )


def _transition(plan: ApplyPlan, overlay: EnvOverlay) -> Transition:
    sglang = overlay.sglang
    steps = tuple(
        FileStep(path=f.path, before_sha256=_sha(f.current), after_sha256=_sha(f.after), mode=f.mode)
        for f in plan.files
        if f.kind != "kept"
    )
    applied = Ledger(
        patch_set_id=plan.patch_set.id,
        patch_set_sha256=plan.patch_set.content_sha256,
        distribution=plan.patch_set.distribution,
        version=sglang.version,
        record_sha256=sglang.record.sha256,
        site_packages=str(overlay.tree.root),
        applied_at=ledger.now_utc(),
        files=tuple(
            LedgerFile(f.path, _sha(f.pre), _sha(f.after) or "", f.mode) for f in plan.files if f.after is not None
        ),
        new_dirs=plan.new_dirs,
    )
    return Transition("apply", steps, plan.new_dirs, (), applied)


def _sha(data: bytes | None) -> str | None:
    return None if data is None else sha256_hex(data)


def _contents(plan: ApplyPlan) -> dict[str, bytes]:
    images = [image for f in plan.files for image in (f.current, f.pre, f.after) if image is not None]
    return {sha256_hex(data): data for data in images}


def _plan_data(plan: ApplyPlan, *, applied: bool) -> dict[str, Any]:
    return {
        "patch_set": plan.patch_set.id,
        "applied": applied,
        "new_dirs": list(plan.new_dirs),
        "files": [
            {
                "path": f.path,
                "kind": f.kind,
                "hunks": [
                    {"number": h.number, "line": h.line, "offset": h.offset} for h in f.hunks
                ],
            }
            for f in plan.files
        ],
    }
