"""`diff`: what apply would change, or what the applied overlay changed."""

from __future__ import annotations

from pathlib import Path

from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.fingerprint import select_patch_set
from ddtree_overlay.engine.ledger import LedgerFile
from ddtree_overlay.engine.planner import plan_apply
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import EnvOverlay, open_overlay
from ddtree_overlay.engine.textdiff import FileDiffText, diff_file


def diff(env: EnvInfo, *, manifest: Path | None = None, stat: bool = False) -> Result:
    overlay = open_overlay(env)
    overlay.refuse_pending()
    applied = overlay.applied()
    if applied is None:
        plan = plan_apply(select_patch_set(env, manifest), overlay.tree, env=env.requested)
        mode = "planned"
        files = [diff_file(f.path, f.current, f.after) for f in plan.files if f.kind != "kept"]
    else:
        mode = "applied"
        files = [_applied_file_diff(overlay, entry) for entry in applied.files]
    data = {
        "mode": mode,
        "files": [
            {"path": f.path, "kind": f.kind, "added": f.added, "removed": f.removed} for f in files
        ],
    }
    if not stat:
        data["diff"] = "".join(f.text for f in files)
    return Result(("diff",), "ok", data)


def _applied_file_diff(overlay: EnvOverlay, entry: LedgerFile) -> FileDiffText:
    pristine = None if entry.pre_sha256 is None else overlay.read_blob(entry.pre_sha256)
    current_path = overlay.tree.path(entry.path)
    current = current_path.read_bytes() if current_path.exists() else None
    return diff_file(entry.path, pristine, current)
