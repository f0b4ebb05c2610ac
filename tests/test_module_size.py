"""A module past 500 lines says why it is one module, in its docstring ("past 500 lines")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500


def test_every_long_module_states_why_it_is_one_module() -> None:
    unexplained = []
    for path in sorted([*(ROOT / "ddtree_overlay").rglob("*.py"), *(ROOT / "overlay").rglob("*.py")]):
        text = path.read_text()
        if text.count("\n") <= LIMIT:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if "past 500 lines" not in " ".join(docstring.split()):
            unexplained.append(str(path.relative_to(ROOT)))
    assert unexplained == []
