"""What every writing verb does first, under the env's lock: finish what an earlier run left.

- temp files a killed write left, beside the files the overlay writes and in the state dir;
- an interrupted transaction's journal: finished forward or undone (`finish_interrupted`);
- a journal that does not parse: set aside, and the env's files decide (`settle_partial`);
- a ledger that does not parse: set aside (the state is rebuilt from the files, `images`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from ddtree_overlay.engine import errors, faults, ledger, transaction
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.files import remove_durably, remove_stray_temp_files, sha256_of
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.record import ReleaseChange, release_change
from ddtree_overlay.engine.restore import plan_restore
from ddtree_overlay.engine.site import EnvOverlay
from ddtree_overlay.engine.transaction import Transition


def recover_pending(overlay: EnvOverlay, patch_set: PatchSet | None) -> tuple[str, ...]:
    """Run by `apply`, `rollback` and `recover` before they plan; returns what was done.
    ``patch_set`` is the installed release's (None when it has none)."""
    touched = patch_set.touched_paths() if patch_set else ()
    try:
        raw = ledger.read_journal(overlay.state)
        interrupted = None if raw is None else ledger.shaped(overlay.state.journal_path, Transition.from_journal, raw)
    except ledger.Unreadable as error:
        _remove_stray_temp_files(overlay, touched)
        aside = ledger.set_aside(error.path)
        notes = (f"set the unreadable journal aside as `{aside}` ({error.why})", *overlay.set_aside_unreadable_ledger())
        return (*notes, *settle_partial(overlay, patch_set))
    if raw is None or interrupted is None:
        _remove_stray_temp_files(overlay, touched)
        return overlay.set_aside_unreadable_ledger()
    done = finish_interrupted(overlay, raw, interrupted)  # it may use the kept links
    _remove_stray_temp_files(overlay, (*touched, *(step.path for step in interrupted.steps)))
    return (done, *overlay.set_aside_unreadable_ledger())


def settle_partial(overlay: EnvOverlay, patch_set: PatchSet | None, *, ledger_lost: bool = False) -> tuple[str, ...]:
    """With no journal to say where a crash stopped: a partly applied env goes back to
    pristine, as `rollback` would take it; applied, pristine or edited envs stay as they are.
    ``ledger_lost``: only when there is no ledger either (with one, a partial env is a
    reinstall's doing, which `apply` and `rollback` handle)."""
    applied, notes = overlay.applied_overlay(patch_set)
    if applied is None or applied.state != "partial" or (ledger_lost and not applied.rebuilt):
        return ()
    plan = plan_restore(overlay, applied, patch_set)
    transaction.run(plan.transition, overlay, contents=plan.contents)
    done = f"brought the partly applied env back to pristine ({len(plan.transition.steps)} file(s) restored)"
    return (*notes, done)


def finish_interrupted(overlay: EnvOverlay, raw: Mapping[str, Any], transition: Transition) -> str:
    """Finish an interrupted transaction from its journal: forward if it committed and every file
    holds its after-image, else back to where it started. Returns what was done.

    When the installed release is not the one the journal recorded (sglang was reinstalled or
    upgraded since), nothing of the old release is written back: the files pip wrote are the
    installed release's, and only the overlay's added files are removed (`_clean_to_installed`).
    A write that fails meanwhile leaves the journal for the next try.
    """
    txid = str(raw["txid"])
    try:
        change = _release_change_since(overlay, raw, transition)
        if change is not None:
            left_alone = _clean_to_installed(transition, overlay)
            if transition.operation == "rollback":
                ledger.write_ledger(overlay.state, None)
            remove_durably(overlay.state.journal_path)
            done = f"{change.describe()}: finished the interrupted {transition.operation} by removing the overlay's added files"
            return done + (f"; left alone (neither the release's nor the overlay's): {', '.join(left_alone)}" if left_alone else "")
        if raw["phase"] == "committed" and all(
            sha256_of(overlay.tree.path(step.path)) == step.after_sha256 for step in transition.steps
        ):
            ledger.write_ledger(overlay.state, transition.ledger_after)
            faults.reach("ledger-written")
            transaction.drop_kept(transition, overlay, txid)
            remove_durably(overlay.state.journal_path)
            faults.reach("journal-removed")
            return f"completed the interrupted {transition.operation}"
    except OSError as error:
        raise errors.undo_failed(overlay.env.requested, f"`{error.filename}`: {error.strerror}") from error
    transaction.undo(transition, overlay, txid)
    return f"undid the interrupted {transition.operation}"


def _release_change_since(overlay: EnvOverlay, raw: Mapping[str, Any], transition: Transition) -> ReleaseChange | None:
    recorded = dict(raw.get("release") or {})
    # the pre-images of the patched files: an apply's ledger names them, a rollback writes them
    if transition.ledger_after is not None:
        pre_images = {f.path: f.pre_sha256 for f in transition.ledger_after.files if f.pre_sha256}
    else:
        pre_images = {step.path: step.after_sha256 for step in transition.steps if step.after_sha256}
    return release_change(
        str(recorded.get("version")), recorded.get("record_sha256"), pre_images, overlay.sglang, overlay.record
    )


def _clean_to_installed(transition: Transition, overlay: EnvOverlay) -> tuple[str, ...]:
    """Remove the journal's added files where they hold the overlay's bytes; leave the rest
    (returned) unless pip wrote them for the installed release."""
    removable: dict[str, str] = {}
    left_alone = []
    for step in transition.steps:
        current = sha256_of(overlay.tree.path(step.path))
        if current is None or current == overlay.record.get(step.path):
            continue
        added = step.before_sha256 is None or step.after_sha256 is None
        if added and current in (step.before_sha256, step.after_sha256):
            removable[step.path] = current
        else:
            left_alone.append(step.path)
    transaction.remove_files(overlay, removable)
    return tuple(left_alone)


def _remove_stray_temp_files(overlay: EnvOverlay, paths: Iterable[str]) -> None:
    for directory in sorted({str(PurePosixPath(path).parent) for path in paths}):
        try:
            remove_stray_temp_files(overlay.tree.checked(directory))
        except OverlayError:
            continue  # outside the tree or through a symlink: never swept, never written
