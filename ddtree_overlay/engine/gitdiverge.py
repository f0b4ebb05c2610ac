"""`status --git-checkout`: where a git checkout's `python/sglang` and the installed copy differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtree_overlay.engine import errors


def package_tree_of(checkout: Path) -> Path:
    for candidate in (checkout / "python" / "sglang", checkout / "sglang", checkout):
        if (candidate / "__init__.py").is_file() and candidate.name == "sglang":
            return candidate
    raise errors.checkout_without_sglang(checkout)


def compare_trees(installed: Path, checkout: Path) -> dict[str, Any]:
    source = package_tree_of(checkout)
    ours, theirs = _files(installed), _files(source)
    differing = sorted(
        path for path in ours & theirs if (installed / path).read_bytes() != (source / path).read_bytes()
    )
    return {
        "installed": str(installed),
        "checkout": str(source),
        "only_installed": sorted(ours - theirs),
        "only_in_checkout": sorted(theirs - ours),
        "differing": differing,
    }


def _files(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
