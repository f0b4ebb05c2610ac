"""Finish or undo an interrupted transaction, from its journal."""

from __future__ import annotations

from ddtree_overlay.engine import ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.ledger import EnvState
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import SiteTree, require_sglang, site_tree


def recover_pending(state: EnvState, tree: SiteTree) -> tuple[str, ...]:
    """Run by every writing command before it plans: the next command recovers a crash."""
    done = transaction.undo_journal(state, root=tree.root, top_levels=tree.top_levels)
    for stray in state.root.glob(".*.tmp"):
        stray.unlink()
    return (done,) if done else ()


def recover(env: EnvInfo) -> Result:
    tree = site_tree(require_sglang(env))
    state = ledger.env_state(tree.root)
    with ledger.locked(state, "recover"):
        done = recover_pending(state, tree)
        applied = ledger.read_ledger(state)
    overlay = "pristine" if applied is None else f"applied {applied.patch_set_id}"
    return Result(
        ("recover",),
        "ok" if done else "noop",
        data={"recovered": list(done), "overlay": overlay},
        messages=done or ("nothing to recover",),
    )
