"""One error base class, one exit-code table.

Every failure the engine can report is an `OverlayError` subclass whose class says which exit
code it maps to. `cli.main` is the only place that turns them into an exit status.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any, ClassVar


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1
    USAGE = 2
    ENV_NOT_FOUND = 3
    UNSUPPORTED_VERSION = 4
    EDITABLE_INSTALL = 5
    READ_ONLY = 6
    BAD_PATCH_SET = 7
    CONFLICT = 8
    LOCKED = 9
    RECOVERY_NEEDED = 10
    VERIFY_FAILED = 11


EXIT_CODE_MEANINGS: Mapping[ExitCode, str] = {
    ExitCode.OK: "success, including a no-op (already applied, nothing to roll back)",
    ExitCode.INTERNAL: "internal error (a bug: please report it)",
    ExitCode.USAGE: "usage error: unknown option or bad argument",
    ExitCode.ENV_NOT_FOUND: "env not found, not a python env, or sglang not installed in it",
    ExitCode.UNSUPPORTED_VERSION: "installed sglang version has no matching patch set",
    ExitCode.EDITABLE_INSTALL: "sglang is an editable install (patch its checkout with git)",
    ExitCode.READ_ONLY: "site-packages is read-only or externally managed",
    ExitCode.BAD_PATCH_SET: "malformed manifest or patch, or an unsafe path in it",
    ExitCode.CONFLICT: "drift or conflict: files differ from what the patch set or ledger expects",
    ExitCode.LOCKED: "another ddtree-overlay run holds this env's lock",
    ExitCode.RECOVERY_NEEDED: "an interrupted transaction or unreadable state needs `recover`",
    ExitCode.VERIFY_FAILED: "verification of the applied overlay failed",
}


def exit_code_table() -> str:
    """The table as plain text, for `--help` and the README."""
    return "\n".join(f"{int(code):>3}  {text}" for code, text in EXIT_CODE_MEANINGS.items())


class OverlayError(Exception):
    """Base of every expected failure: a one-line message, details, a hint, an exit code."""

    exit_code: ClassVar[ExitCode] = ExitCode.INTERNAL
    code: ClassVar[str] = "internal"

    def __init__(
        self,
        message: str,
        *,
        details: tuple[str, ...] = (),
        hint: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.hint = hint
        self.data: Mapping[str, Any] = data or {}


class EnvNotFound(OverlayError):
    exit_code = ExitCode.ENV_NOT_FOUND
    code = "env_not_found"


class SglangNotInstalled(OverlayError):
    exit_code = ExitCode.ENV_NOT_FOUND
    code = "sglang_not_installed"


class ScratchEnvFailed(OverlayError):
    exit_code = ExitCode.ENV_NOT_FOUND
    code = "scratch_env_failed"


class UnsupportedRelease(OverlayError):
    exit_code = ExitCode.UNSUPPORTED_VERSION
    code = "unsupported_release"


class EditableInstall(OverlayError):
    exit_code = ExitCode.EDITABLE_INSTALL
    code = "editable_install"


class ReadOnlyEnv(OverlayError):
    exit_code = ExitCode.READ_ONLY
    code = "read_only_env"


class BadPatchSet(OverlayError):
    exit_code = ExitCode.BAD_PATCH_SET
    code = "bad_patch_set"


class UnsafePath(OverlayError):
    exit_code = ExitCode.BAD_PATCH_SET
    code = "unsafe_path"


class PreImageMismatch(OverlayError):
    exit_code = ExitCode.CONFLICT
    code = "pre_image_mismatch"


class HunkDoesNotApply(OverlayError):
    exit_code = ExitCode.CONFLICT
    code = "hunk_does_not_apply"


class SymlinkedTarget(OverlayError):
    exit_code = ExitCode.CONFLICT
    code = "symlinked_target"


class FileChangedSinceApply(OverlayError):
    exit_code = ExitCode.CONFLICT
    code = "file_changed_since_apply"


class PatchSetChangedSinceApply(OverlayError):
    exit_code = ExitCode.CONFLICT
    code = "patch_set_changed_since_apply"


class PostImageMismatch(OverlayError):
    exit_code = ExitCode.CONFLICT
    code = "post_image_mismatch"


class EnvLocked(OverlayError):
    exit_code = ExitCode.LOCKED
    code = "env_locked"


class RecoveryNeeded(OverlayError):
    exit_code = ExitCode.RECOVERY_NEEDED
    code = "recovery_needed"


class VerifyFailed(OverlayError):
    exit_code = ExitCode.VERIFY_FAILED
    code = "verify_failed"
