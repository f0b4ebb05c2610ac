"""Refuse a run made with other models than the ones given to replay it.

A run records its models as given to `from_pretrained` (a hub id or a path), not a digest, so
the check is by name (a hub snapshot directory `models--ORG--NAME/snapshots/...` is named
NAME), then by what the run itself shows: every token id inside the target's vocabulary, and
the drafter's block size equal to the run's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddtree_overlay.compare.runfile import OfflineRun
from ddtree_overlay.engine.errors import run_file_model_missing, run_file_other_models


def model_name(recorded_or_dir: str | Path) -> str:
    parts = Path(str(recorded_or_dir).rstrip("/")).parts
    for part in parts:
        if part.startswith("models--"):
            return part.split("--")[-1].lower()
    return parts[-1].lower() if parts else ""


def check_models(run: OfflineRun, target: Path, draft: Path) -> None:
    """`RunFileInvalid` unless `target` and `draft` can be the run's models."""
    for recorded, given in ((run.target, target), (run.draft, draft)):
        if model_name(recorded) != model_name(given):
            raise run_file_other_models(run.path, recorded, given, f"its name is `{model_name(given)}`")
    vocab = _config(run, run.target, target).get("vocab_size")
    highest = max(max(turn.prompt, default=0) for turn in run.turns)
    highest = max(highest, *(max(g.tokens, default=0) for turn in run.turns for g in turn.methods.values()))
    if not isinstance(vocab, int) or highest >= vocab:
        raise run_file_other_models(run.path, run.target, target, f"token {highest} is outside its vocabulary of {vocab}")
    block = _config(run, run.draft, draft).get("block_size")
    if block != run.block_size:
        raise run_file_other_models(run.path, run.draft, draft, f"its block size is {block}, the run's {run.block_size}")


def _config(run: OfflineRun, recorded: str, model: Path) -> dict[str, Any]:
    if not model.is_dir():
        raise run_file_model_missing(run.path, model)
    try:
        return json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        raise run_file_other_models(run.path, recorded, model, "it has no readable config.json") from None
