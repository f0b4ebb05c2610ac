"""`rollback`: the ledger's transition, inverted, through the same transaction writer."""

from __future__ import annotations

from typing import Any

from ddtree_overlay.engine import errors, ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import FileChangedSinceApply
from ddtree_overlay.engine.files import write_bytes_durably
from ddtree_overlay.engine.ledger import Ledger
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import EnvOverlay, FileState, open_overlay
from ddtree_overlay.engine.textdiff import diff_file
from ddtree_overlay.engine.transaction import FileStep, Transition

_EDIT_PREVIEW_LINES = 12


def rollback(env: EnvInfo, *, force: bool = False) -> Result:
    overlay = open_overlay(env)
    with overlay.locked("rollback"):
        notes = transaction.recover_pending(overlay)
        applied = overlay.applied()
        if applied is None:
            return Result(("rollback",), "noop", {"files": []}, messages=(*notes, "nothing to roll back"))
        states = overlay.file_states(applied)
        edited = tuple(s for s in states if s.state == "edited")
        if edited and not force:
            raise _edited_error(applied, edited, overlay)
        saved = _set_edits_aside(overlay, edited)
        transition = _inverse(applied, states)
        contents = {s.sha256: overlay.tree.path(s.path).read_bytes() for s in states if s.sha256}
        transaction.run(transition, overlay, contents=contents)
    data: dict[str, Any] = {
        "patch_set": applied.patch_set_id,
        "files": [step.path for step in transition.steps],
        "saved_edits": saved,
    }
    return Result(("rollback",), "ok", data, messages=notes)


def _inverse(applied: Ledger, states: tuple[FileState, ...]) -> Transition:
    by_path = {entry.path: entry for entry in applied.files}
    steps = tuple(
        FileStep(s.path, s.sha256, by_path[s.path].pre_sha256, by_path[s.path].mode)
        for s in reversed(states)
        if s.state != "pristine"
    )
    return Transition("rollback", steps, (), tuple(reversed(applied.new_dirs)), None)


def _edited_error(
    applied: Ledger, edited: tuple[FileState, ...], overlay: EnvOverlay
) -> FileChangedSinceApply:
    by_path = {entry.path: entry for entry in applied.files}
    details = []
    for file in edited:
        post = overlay.read_blob(by_path[file.path].post_sha256)
        current = overlay.tree.path(file.path).read_bytes() if file.sha256 else None
        preview = diff_file(file.path, post, current).text.splitlines()[:_EDIT_PREVIEW_LINES]
        details.append("\n".join([f"{file.path} was edited after apply:", *preview]))
    return errors.edited_since_apply(overlay.env.requested, len(edited), details)


def _set_edits_aside(overlay: EnvOverlay, edited: tuple[FileState, ...]) -> list[str]:
    if not edited:
        return []
    tree = overlay.tree
    folder = overlay.state.saved_edits_dir / ledger.now_utc().replace(":", "")
    saved = []
    for file in edited:
        if file.sha256 is None:
            continue
        destination = folder / file.path
        write_bytes_durably(destination, tree.path(file.path).read_bytes())
        saved.append(str(destination))
    return saved
