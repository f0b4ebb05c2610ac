"""Finish or undo an interrupted transaction, from its journal."""

from __future__ import annotations

from ddtree_overlay.engine import transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import open_overlay


def recover(env: EnvInfo) -> Result:
    overlay = open_overlay(env)
    with overlay.locked("recover"):
        done = transaction.recover_pending(overlay)
        applied = overlay.applied()
    overlay_state = "pristine" if applied is None else f"applied {applied.patch_set_id}"
    return Result(
        ("recover",),
        "ok" if done else "noop",
        data={"recovered": list(done), "overlay": overlay_state},
        messages=done or ("nothing to recover",),
    )
