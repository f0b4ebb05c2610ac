"""`rollback`: every file the overlay touched back to its pre-image, in one transaction.

From the ledger and its backups where they exist; without them from the patch set alone
(`images`, `restore`). After sglang was reinstalled or upgraded over the applied env, only what
belongs to the overlay goes: the installed release's own files stay, whatever `--force` says.
"""

from __future__ import annotations

from typing import Any

from ddtree_overlay.engine import errors, ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.files import write_bytes_durably
from ddtree_overlay.engine.fingerprint import installed_patch_set
from ddtree_overlay.engine.images import AppliedOverlay, FileState
from ddtree_overlay.engine.recovery import recover_pending
from ddtree_overlay.engine.restore import plan_restore
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import EnvOverlay, open_overlay
from ddtree_overlay.engine.textdiff import diff_file

_EDIT_PREVIEW_LINES = 12


def rollback(env: EnvInfo, *, force: bool = False) -> Result:
    overlay = open_overlay(env)
    patch_set = installed_patch_set(env)
    with overlay.locked("rollback"):
        notes = recover_pending(overlay, patch_set)
        applied, found = overlay.applied_overlay(patch_set)
        notes += found
        if applied is None:
            return Result(("rollback",), "noop", {"files": []}, messages=(*notes, "nothing to roll back"))
        if applied.release_change is not None:
            notes += (f"{applied.release_change.describe()}: removing the overlay's files, keeping the release's",)
        edited = tuple(f for f in applied.files if f.state == "edited")
        if edited and (not force or applied.rebuilt):  # without backups, an edit cannot be undone
            raise _edited_error(applied, edited, overlay)
        plan = plan_restore(overlay, applied, patch_set)
        saved = _set_edits_aside(overlay, edited)
        transaction.run(plan.transition, overlay, contents=plan.contents)
    if plan.left_alone:
        notes += (f"left alone, neither sglang {overlay.sglang.version}'s nor the overlay's: {', '.join(plan.left_alone)}",)
    data: dict[str, Any] = {
        "patch_set": applied.ledger.patch_set_id,
        "files": [step.path for step in plan.transition.steps],
        "left_alone": list(plan.left_alone),
        "saved_edits": saved,
    }
    return Result(("rollback",), "ok", data, messages=notes)


def _edited_error(applied: AppliedOverlay, edited: tuple[FileState, ...], overlay: EnvOverlay) -> OverlayError:
    env = overlay.env.requested
    if applied.rebuilt:
        details = [f"{file.path}: found {file.current_sha256 or 'absent'}" for file in edited]
        return errors.files_match_neither(
            env, applied.ledger.patch_set_id, details, [file.path for file in edited], overlay.reinstall_command()
        )
    details = []
    for file in edited:
        post = overlay.read_blob(file.post_sha256)
        current = overlay.tree.checked(file.path).read_bytes() if file.current_sha256 else None
        preview = diff_file(file.path, post, current).text.splitlines()[:_EDIT_PREVIEW_LINES]
        details.append("\n".join([f"{file.path} was edited after apply:", *preview]))
    return errors.edited_since_apply(env, len(edited), details)


def _set_edits_aside(overlay: EnvOverlay, edited: tuple[FileState, ...]) -> list[str]:
    folder = overlay.state.saved_edits_dir / ledger.now_utc().replace(":", "")
    saved = []
    for file in edited:
        if file.current_sha256 is None:
            continue
        destination = folder / file.path
        try:
            write_bytes_durably(destination, overlay.tree.checked(file.path).read_bytes())
        except OSError as error:
            why = error.strerror or str(error)
            raise errors.write_failed(destination, why, "nothing in the env was changed") from error
        saved.append(str(destination))
    return saved
