"""`apply`: plan in memory, refuse on any mismatch, then write in one transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.engine import errors, ledger, transaction
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.files import sha256_hex
from ddtree_overlay.engine.fingerprint import select_patch_set
from ddtree_overlay.engine.ledger import Ledger, LedgerFile
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.planner import ApplyPlan, plan_apply
from ddtree_overlay.engine.result import Result
from ddtree_overlay.engine.site import EnvOverlay, open_overlay, overall_state
from ddtree_overlay.engine.transaction import FileStep, Transition


def apply(env: EnvInfo, *, manifest: Path | None = None, check: bool = False) -> Result:
    overlay = open_overlay(env, for_writing=True)
    patch_set = select_patch_set(env, manifest)
    with overlay.locked("apply"):
        if check:
            overlay.refuse_pending(also="`apply` without --check")
            notes: tuple[str, ...] = ()
        else:
            notes = transaction.recover_pending(overlay)
        applied = overlay.applied()
        if applied is not None:
            return _already_applied(applied, patch_set, overlay, notes)
        plan = plan_apply(patch_set, overlay.tree, env=env.requested)
        transition = _transition(plan, overlay)
        if check:
            transaction.check(transition, overlay)
            return Result(("apply",), "ok", _plan_data(plan, applied=False), messages=notes)
        transaction.run(transition, overlay, contents=_contents(plan))
    return Result(("apply",), "ok", _plan_data(plan, applied=True), messages=notes)


def _already_applied(
    applied: Ledger, patch_set: PatchSet, overlay: EnvOverlay, notes: tuple[str, ...]
) -> Result:
    env = overlay.env.requested
    if applied.patch_set_sha256 != patch_set.content_sha256:
        raise errors.patch_set_changed(env, patch_set.id, applied.patch_set_sha256, patch_set.content_sha256)
    states = overlay.file_states(applied)
    if overall_state(states) != "applied":
        raise errors.changed_since_apply(
            env,
            [f"{s.path}: {s.state}" for s in states if s.state != "applied"],
            reinstalled=applied.record_sha256 != overlay.sglang.record.sha256,
        )
    data = {"patch_set": patch_set.id, "already_applied": True, "files": [s.path for s in states]}
    return Result(("apply",), "noop", data, messages=notes)


def _transition(plan: ApplyPlan, overlay: EnvOverlay) -> Transition:
    sglang = overlay.sglang
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
        site_packages=str(overlay.tree.root),
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
