"""How the files an overlay touched compare with what the ledger says they should hold."""

from __future__ import annotations

from dataclasses import dataclass

from ddtree_overlay.engine.ledger import Ledger
from ddtree_overlay.engine.transaction import SiteTree, sha256_of


@dataclass(frozen=True)
class FileState:
    path: str
    state: str  # "applied" | "pristine" | "edited"
    sha256: str | None


def file_states(applied: Ledger, tree: SiteTree) -> tuple[FileState, ...]:
    states = []
    for entry in applied.files:
        current = sha256_of(tree.path(entry.path))
        if current == entry.post_sha256:
            state = "applied"
        elif current == entry.pre_sha256:
            state = "pristine"
        else:
            state = "edited"
        states.append(FileState(entry.path, state, current))
    return tuple(states)


def overall_state(states: tuple[FileState, ...]) -> str:
    kinds = {state.state for state in states}
    if kinds == {"applied"}:
        return "applied"
    if "edited" in kinds:
        return "drifted"
    return "partial"
