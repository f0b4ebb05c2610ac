"""`recover`: finish or undo an interrupted transaction, from its journal or from the files.

With a journal, as its phase says (`transaction.finish_interrupted`). Without one, or with one
that does not parse, the env's files decide: a partly applied env (a crash plus a lost state
dir) goes back to pristine, as `rollback` would take it.
"""

from __future__ import annotations

from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.fingerprint import installed_patch_set
from ddtree_overlay.engine.recovery import recover_pending, settle_partial
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import open_overlay


def recover(env: EnvInfo) -> Result:
    overlay = open_overlay(env)
    patch_set = installed_patch_set(env)
    with overlay.locked("recover"):
        done = recover_pending(overlay, patch_set) + settle_partial(overlay, patch_set, ledger_lost=True)
        applied, _ = overlay.applied_overlay(patch_set)
    overlay_state = "pristine" if applied is None else f"{applied.state} {applied.ledger.patch_set_id}"
    return Result(
        ("recover",),
        "ok" if done else "noop",
        data={"recovered": list(done), "overlay": overlay_state},
        messages=done or ("nothing to recover",),
    )
