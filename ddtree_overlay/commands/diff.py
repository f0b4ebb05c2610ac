"""`diff`: what apply would change, or what the applied overlay changed."""

from __future__ import annotations

from pathlib import Path

from ddtree_overlay.engine import ledger
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import RecoveryNeeded
from ddtree_overlay.engine.fingerprint import select_patch_set
from ddtree_overlay.engine.planner import plan_apply
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import SiteTree, require_sglang, site_tree
from ddtree_overlay.engine.textdiff import FileDiffText, diff_file


def diff(env: EnvInfo, *, manifest: Path | None = None, stat: bool = False) -> Result:
    tree = site_tree(require_sglang(env))
    state = ledger.env_state(tree.root)
    if ledger.read_journal(state) is not None:
        raise RecoveryNeeded(
            "an interrupted transaction is pending for this env",
            hint="run `ddtree-overlay recover --env ENV`",
        )
    applied = ledger.read_ledger(state)
    if applied is None:
        plan = plan_apply(select_patch_set(env, manifest), tree)
        mode = "planned"
        files = [diff_file(f.path, f.before, f.after) for f in plan.files]
    else:
        mode = "applied"
        files = [_applied_file_diff(state, tree, entry) for entry in applied.files]
    data = {
        "mode": mode,
        "files": [
            {"path": f.path, "kind": f.kind, "added": f.added, "removed": f.removed} for f in files
        ],
    }
    if not stat:
        data["diff"] = "".join(f.text for f in files)
    return Result(("diff",), "ok", data)


def _applied_file_diff(state: ledger.EnvState, tree: SiteTree, entry: ledger.LedgerFile) -> FileDiffText:
    pristine = None if entry.pre_sha256 is None else ledger.read_blob(state, entry.pre_sha256)
    current_path = tree.path(entry.path)
    current = current_path.read_bytes() if current_path.exists() else None
    return diff_file(entry.path, pristine, current)
