"""`apply`: plan in memory, refuse on any mismatch, then write in one transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.commands.recover import recover_pending
from ddtree_overlay.engine import ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.errors import (
    FileChangedSinceApply,
    PatchSetChangedSinceApply,
    RecoveryNeeded,
)
from ddtree_overlay.engine.files import sha256_hex
from ddtree_overlay.engine.fingerprint import select_patch_set
from ddtree_overlay.engine.ledger import Ledger, LedgerFile
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.planner import ApplyPlan, plan_apply
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import (
    SiteTree,
    file_states,
    overall_state,
    require_patchable,
    site_tree,
)
from ddtree_overlay.engine.transaction import FileStep, Transition


def apply(env: EnvInfo, *, manifest: Path | None = None, check: bool = False) -> Result:
    sglang = require_patchable(env)
    patch_set = select_patch_set(env, manifest)
    tree = site_tree(sglang)
    state = ledger.env_state(tree.root)
    with ledger.locked(state, "apply"):
        notes = _recover_or_refuse(state, tree, check=check)
        applied = ledger.read_ledger(state)
        if applied is not None:
            return _already_applied(applied, patch_set, tree, sglang, notes)
        plan = plan_apply(patch_set, tree)
        transition = _transition(plan, sglang, tree)
        if check:
            transaction.check(transition, root=tree.root, top_levels=tree.top_levels)
            return Result(("apply",), "ok", _plan_data(plan, applied=False), messages=notes)
        transaction.run(
            transition,
            root=tree.root,
            state=state,
            top_levels=tree.top_levels,
            contents=_contents(plan),
        )
    return Result(("apply",), "ok", _plan_data(plan, applied=True), messages=notes)


def _recover_or_refuse(state: ledger.EnvState, tree: SiteTree, *, check: bool) -> tuple[str, ...]:
    if not check:
        return recover_pending(state, tree)
    if ledger.read_journal(state) is not None:
        raise RecoveryNeeded(
            "an interrupted transaction is pending for this env",
            hint="run `ddtree-overlay recover --env ENV` (or `apply` without --check)",
        )
    return ()


def _already_applied(
    applied: Ledger, patch_set: PatchSet, tree: SiteTree, sglang: SglangInstall, notes: tuple[str, ...]
) -> Result:
    if applied.patch_set_sha256 != patch_set.content_sha256:
        raise PatchSetChangedSinceApply(
            f"patch set `{patch_set.id}` changed since it was applied to this env",
            details=(f"applied {applied.patch_set_sha256}", f"now     {patch_set.content_sha256}"),
            hint="`ddtree-overlay rollback --env ENV`, then `ddtree-overlay apply --env ENV`",
        )
    states = file_states(applied, tree)
    if overall_state(states) != "applied":
        reinstalled = applied.record_sha256 != sglang.record.sha256
        raise FileChangedSinceApply(
            "files changed since the overlay was applied"
            + (" (sglang was reinstalled or upgraded: RECORD changed)" if reinstalled else ""),
            details=tuple(f"{s.path}: {s.state}" for s in states if s.state != "applied"),
            hint="`ddtree-overlay rollback --env ENV` (add --force to set edits aside), then apply",
        )
    data = {"patch_set": patch_set.id, "already_applied": True, "files": [s.path for s in states]}
    return Result(("apply",), "noop", data, messages=(*notes, f"{patch_set.id} is already applied"))


def _transition(plan: ApplyPlan, sglang: SglangInstall, tree: SiteTree) -> Transition:
    steps = tuple(
        FileStep(
            path=f.path,
            before_sha256=None if f.before is None else sha256_hex(f.before),
            after_sha256=sha256_hex(f.after),
            mode=f.mode,
        )
        for f in plan.files
    )
    applied = Ledger(
        patch_set_id=plan.patch_set.id,
        patch_set_sha256=plan.patch_set.content_sha256,
        distribution=plan.patch_set.distribution,
        version=sglang.version,
        record_sha256=sglang.record.sha256,
        site_packages=str(tree.root),
        applied_at=ledger.now_utc(),
        files=tuple(
            LedgerFile(s.path, s.before_sha256, s.after_sha256 or "", s.mode) for s in steps
        ),
        new_dirs=plan.new_dirs,
    )
    return Transition("apply", steps, plan.new_dirs, (), applied)


def _contents(plan: ApplyPlan) -> dict[str, bytes]:
    images = [f.before for f in plan.files if f.before is not None] + [f.after for f in plan.files]
    return {sha256_hex(data): data for data in images}


def _plan_data(plan: ApplyPlan, *, applied: bool) -> dict[str, Any]:
    return {
        "patch_set": plan.patch_set.id,
        "applied": applied,
        "new_dirs": list(plan.new_dirs),
        "files": [
            {
                "path": f.path,
                "kind": "added" if f.before is None else "modified",
                "hunks": [
                    {"number": h.number, "line": h.line, "offset": h.offset} for h in f.hunks
                ],
            }
            for f in plan.files
        ],
    }
