"""diff on a real sglang 0.5.14: what apply would change, and what the applied overlay changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from overlay_helpers import TOUCHED_FILES

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.commands.diff import diff
from ddtree_overlay.engine.envprobe import probe_env


def test_diff_before_and_after_apply_and_without_a_ledger(sglang_env: Path, state_dir: Path) -> None:
    planned = diff(probe_env(sglang_env), stat=True).data
    assert planned["mode"] == "planned" and len(planned["files"]) == TOUCHED_FILES
    apply(probe_env(sglang_env))
    applied = diff(probe_env(sglang_env), stat=True).data
    assert applied["mode"] == "applied" and applied["files"] == planned["files"]
    shutil.rmtree(state_dir)
    # no ledger: the env already holds every post-image, so apply would change nothing
    assert diff(probe_env(sglang_env), stat=True).data == {"mode": "planned", "files": []}
