"""Unified diffs of byte contents, for display (decoded with replacement characters)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from ddtree_overlay.engine.hunks import split_lines

_NO_NEWLINE = b"\n\\ No newline at end of file\n"


@dataclass(frozen=True)
class FileDiffText:
    path: str
    kind: str  # "modified" | "added" | "removed"
    added: int
    removed: int
    text: str


def diff_file(path: str, before: bytes | None, after: bytes | None) -> FileDiffText:
    old, new = split_lines(before or b""), split_lines(after or b"")
    lines = list(
        difflib.diff_bytes(
            difflib.unified_diff,
            old,
            new,
            fromfile=b"/dev/null" if before is None else b"a/" + path.encode(),
            tofile=b"/dev/null" if after is None else b"b/" + path.encode(),
            lineterm=b"",
        )
    )
    body = b"".join(_terminated(line) for line in lines)
    kind = "added" if before is None else "removed" if after is None else "modified"
    return FileDiffText(
        path=path,
        kind=kind,
        added=sum(1 for line in lines if line.startswith(b"+") and not line.startswith(b"+++")),
        removed=sum(1 for line in lines if line.startswith(b"-") and not line.startswith(b"---")),
        text=body.decode("utf-8", errors="replace"),
    )


def _terminated(line: bytes) -> bytes:
    # Header lines come without a newline (lineterm=b""); body lines keep the file's own.
    if line.endswith(b"\n"):
        return line
    if line.startswith((b"---", b"+++", b"@@")):
        return line + b"\n"
    return line + _NO_NEWLINE
