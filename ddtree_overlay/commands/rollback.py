"""`rollback`: the ledger's transition, inverted, through the same transaction writer."""

from __future__ import annotations

from typing import Any

from ddtree_overlay.commands.recover import recover_pending
from ddtree_overlay.engine import ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import FileChangedSinceApply
from ddtree_overlay.engine.files import write_bytes_durably
from ddtree_overlay.engine.ledger import EnvState, Ledger
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import FileState, SiteTree, file_states, require_sglang, site_tree
from ddtree_overlay.engine.textdiff import diff_file
from ddtree_overlay.engine.transaction import FileStep, Transition

_EDIT_PREVIEW_LINES = 12


def rollback(env: EnvInfo, *, force: bool = False) -> Result:
    tree = site_tree(require_sglang(env))
    state = ledger.env_state(tree.root)
    with ledger.locked(state, "rollback"):
        notes = recover_pending(state, tree)
        applied = ledger.read_ledger(state)
        if applied is None:
            return Result(("rollback",), "noop", {"files": []}, messages=(*notes, "nothing to roll back"))
        states = file_states(applied, tree)
        edited = tuple(s for s in states if s.state == "edited")
        if edited and not force:
            raise _edited_error(applied, edited, tree, state)
        saved = _set_edits_aside(state, tree, edited)
        transition = _inverse(applied, states)
        contents = {s.sha256: tree.path(s.path).read_bytes() for s in states if s.sha256}
        transaction.run(
            transition, root=tree.root, state=state, top_levels=tree.top_levels, contents=contents
        )
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
    applied: Ledger, edited: tuple[FileState, ...], tree: SiteTree, state: EnvState
) -> FileChangedSinceApply:
    by_path = {entry.path: entry for entry in applied.files}
    details = []
    for file in edited:
        post = ledger.read_blob(state, by_path[file.path].post_sha256)
        current = tree.path(file.path).read_bytes() if file.sha256 else None
        preview = diff_file(file.path, post, current).text.splitlines()[:_EDIT_PREVIEW_LINES]
        details.append("\n".join([f"{file.path} was edited after apply:", *preview]))
    return FileChangedSinceApply(
        f"{len(edited)} file(s) changed since apply; rollback would lose those edits",
        details=tuple(details),
        hint="`ddtree-overlay rollback --env ENV --force` restores them and saves the edits aside",
    )


def _set_edits_aside(state: EnvState, tree: SiteTree, edited: tuple[FileState, ...]) -> list[str]:
    if not edited:
        return []
    folder = state.saved_edits_dir / ledger.now_utc().replace(":", "")
    saved = []
    for file in edited:
        if file.sha256 is None:
            continue
        destination = folder / file.path
        write_bytes_durably(destination, tree.path(file.path).read_bytes())
        saved.append(str(destination))
    return saved
