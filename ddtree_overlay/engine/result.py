"""What every engine call returns: a frozen result that `render` turns into text or JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddtree_overlay.engine.errors import OverlayError

RESULT_VERSION = "1"


@dataclass(frozen=True)
class Issue:
    code: str
    message: str
    file: str | None = None

    def to_json(self) -> dict[str, Any]:
        body = {"code": self.code, "message": self.message}
        return body | ({"file": self.file} if self.file else {})


@dataclass(frozen=True)
class Result:
    command: tuple[str, ...]
    status: str
    data: Mapping[str, Any] = field(default_factory=dict)
    issues: tuple[Issue, ...] = ()
    messages: tuple[str, ...] = ()
    exit_code: int = 0

    def envelope(self) -> dict[str, Any]:
        return {
            "ddtree_overlay_result_version": RESULT_VERSION,
            "command": list(self.command),
            "status": self.status,
            "exit_code": self.exit_code,
            "data": dict(self.data),
            "issues": [issue.to_json() for issue in self.issues],
        }


def error_result(command: tuple[str, ...], error: OverlayError) -> Result:
    issue = Issue(code=error.code, message=error.message)
    data = dict(error.data) | {"details": list(error.details), "hint": error.hint}
    return Result(command, "error", data, (issue,), exit_code=int(error.exit_code))
