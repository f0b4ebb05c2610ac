"""The way back: every file of an applied overlay to its pre-image, as one `Transition`.

A pre-image comes from the backups where they are intact, else from the patch set (the hunks
reversed and checked against the manifest's pre-image sha256). When the installed release is
not the one the overlay was applied to, no file of the old release is written back: a file that
matches the installed RECORD is that release's own and stays, the overlay's added files go, and
anything else is left alone and named.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddtree_overlay.engine import errors, ledger
from ddtree_overlay.engine.images import AppliedOverlay, FileState, rebuild_pre_image
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.site import EnvOverlay
from ddtree_overlay.engine.transaction import FileStep, Transition


@dataclass(frozen=True)
class RestorePlan:
    transition: Transition
    contents: dict[str, bytes]
    left_alone: tuple[str, ...]  # patched files of another release: never written back


def plan_restore(overlay: EnvOverlay, applied: AppliedOverlay, patch_set: PatchSet | None) -> RestorePlan:
    """Restore every file that is not pristine; edited files are restored too (the caller
    refuses them first unless forced), from their backup only."""
    steps: list[FileStep] = []
    contents: dict[str, bytes] = {}
    left_alone: list[str] = []
    for file in reversed(applied.files):
        if file.state in ("pristine", "stock"):
            continue
        current = overlay.tree.checked(file.path).read_bytes() if file.current_sha256 else None
        if file.added:
            steps.append(FileStep(file.path, file.current_sha256, None, file.mode))
        elif applied.release_change is not None:
            left_alone.append(file.path)
            continue
        else:
            pre = _pre_image(overlay, file, current, patch_set)
            steps.append(FileStep(file.path, file.current_sha256, file.pre_sha256, file.mode))
            contents[file.pre_sha256 or ""] = pre
        if current is not None and file.current_sha256:
            contents[file.current_sha256] = current
    transition = Transition("rollback", tuple(steps), (), tuple(reversed(applied.ledger.new_dirs)), None)
    return RestorePlan(transition, contents, tuple(left_alone))


def _pre_image(overlay: EnvOverlay, file: FileState, current: bytes | None, patch_set: PatchSet | None) -> bytes:
    assert file.pre_sha256 is not None
    backup = ledger.find_blob(overlay.state, file.pre_sha256)
    if backup is not None:
        return backup
    if current is not None and file.state == "applied" and _same_images(patch_set, file):
        assert patch_set is not None
        rebuilt = rebuild_pre_image(patch_set, file.path, current)
        if rebuilt is not None:
            return rebuilt
    raise errors.backup_unreadable(overlay.state.blobs_dir / file.pre_sha256, overlay.reinstall_command())


def _same_images(patch_set: PatchSet | None, file: FileState) -> bool:
    """Does ``patch_set`` pin the same pre- and post-image for the file as the ledger?"""
    if patch_set is None or file.path not in patch_set.touched_paths():
        return False
    expected = patch_set.expectation(file.path)
    return (expected.pre_sha256, expected.post_sha256) == (file.pre_sha256, file.post_sha256)
