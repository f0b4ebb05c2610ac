"""What every writing verb does first, under the env's lock: finish what an earlier run left.

- temp files a killed write left, beside the files the overlay writes and in the state dir;
- an interrupted transaction's journal: finished forward or undone (`transaction.finish_interrupted`);
- a journal that does not parse: set aside, and the env's files decide (`settle_partial`);
- a ledger that does not parse: set aside (the state is rebuilt from the files, `images`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from ddtree_overlay.engine import ledger, transaction
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.files import remove_stray_temp_files
from ddtree_overlay.engine.patchset import PatchSet
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
    done = transaction.finish_interrupted(overlay, raw, interrupted)  # it may use the kept links
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


def _remove_stray_temp_files(overlay: EnvOverlay, paths: Iterable[str]) -> None:
    for directory in sorted({str(PurePosixPath(path).parent) for path in paths}):
        try:
            remove_stray_temp_files(overlay.tree.checked(directory))
        except OverlayError:
            continue  # outside the tree or through a symlink: never swept, never written
