"""The package's wings import one way: cli -> commands, matrix -> engine, bench -> in_target;
compare (offline runs of the reference code against replays) sits on bench and reference.

`in_target/` scripts run in the target env's interpreter, which need not have ddtree_overlay
installed, so they import none of it; the offline reference decoder stands alone but for
`fixture_paths`, the leaf that says where the bundled fixtures are, which every other wing may read.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ddtree_overlay

PACKAGE = Path(ddtree_overlay.__file__).parent
# wing -> the wings its modules may import (besides their own)
ALLOWED = {
    "fixture_paths": set(),
    "engine": {"fixture_paths"},
    "in_target": set(),
    "reference": {"fixture_paths"},
    "bench": {"fixture_paths", "engine", "in_target"},
    "compare": {"fixture_paths", "engine", "bench", "reference"},
    "commands": {"fixture_paths", "engine", "bench", "compare", "in_target"},
    "matrix": {"fixture_paths", "engine", "commands", "in_target"},
    "render": {"fixture_paths", "engine", "compare"},
    "cli": {"fixture_paths", "engine", "bench", "commands", "matrix", "render"},
}


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ddtree_overlay"):
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("ddtree_overlay")}
    return found


def test_every_wing_imports_only_the_wings_below_it() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        wing = _wing(".".join(relative.parts))
        if wing in ("__init__", "__main__"):
            continue
        for imported in _imports(path):
            target = _wing(imported)
            if target != wing and target not in ALLOWED[wing]:
                wrong.append(f"{relative}: {imported}")
    assert wrong == []


def test_the_wings_are_the_folders() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == {"bench", "commands", "compare", "engine", "in_target", "matrix", "reference"}
