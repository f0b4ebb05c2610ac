"""One error base class, one exit-code table, and a named builder for every failure.

Every failure the engine can report is an `OverlayError` subclass whose class says which exit
code it maps to. `cli.main` is the only place that turns them into an exit status.

The tool raises them only through the builders below, one per situation: each says what
happened, then why, and ends with a hint that names the command or path that fixes it, built
from the real env, interpreter and manifest (the uv message rules: no trailing period on a
one-liner, commands and paths in backticks). `tests/engine/test_error_messages.py` pins every
builder's text. Classes, exit codes and texts stay in this one module (past 500 lines) so that
one read shows every failure the tool can report and what it tells the user to do.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from enum import IntEnum
from pathlib import Path
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
    SGLANG_DEPENDENCIES_MISSING = 12


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
    ExitCode.SGLANG_DEPENDENCIES_MISSING: "sglang's own dependencies are missing in the env (not the overlay)",
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


class SglangDependenciesMissing(OverlayError):
    exit_code = ExitCode.SGLANG_DEPENDENCIES_MISSING
    code = "sglang_dependencies_missing"


# --- builders -------------------------------------------------------------------------------


def command(*words: str | Path) -> str:
    """A shell command line in backticks, each word quoted as the shell needs it."""
    return "`" + " ".join(shlex.quote(str(word)) for word in words) + "`"


def _overlay(verb: str, env: Path, *flags: str) -> str:
    return command("ddtree-overlay", verb, "--env", env, *flags)


# EnvNotFound


def no_interpreter(env: Path) -> EnvNotFound:
    return EnvNotFound(
        f"no python interpreter in `{env}`",
        hint="pass a virtualenv root (with `bin/python`) or a python executable to --env",
    )


def env_missing(env: Path) -> EnvNotFound:
    return EnvNotFound(
        f"env not found: `{env}`",
        hint="pass an existing virtualenv root or python executable to --env",
    )


def interpreter_unusable(python: Path, why: str) -> EnvNotFound:
    return EnvNotFound(
        f"`{python}` {why}",
        hint=f"check that the interpreter runs: {command(python, '-c', 'import sys; print(sys.version)')}",
    )


def checkout_without_sglang(checkout: Path) -> EnvNotFound:
    return EnvNotFound(
        f"no sglang package in the checkout `{checkout}`",
        hint="pass the root of an sglang git checkout (the one holding `python/sglang`) to --git-checkout",
    )


# SglangNotInstalled


def sglang_not_installed(env: Path, python: Path, python_version: str, newest: str | None) -> SglangNotInstalled:
    install = command(python, "-m", "pip", "install", f"sglang=={newest}") if newest else "install sglang"
    return SglangNotInstalled(
        f"sglang is not installed in `{env}` (python {python_version})",
        hint=f"{install}, or pass the env that has it",
    )


# ScratchEnvFailed


def pip_failed(what: str, details: Sequence[str] = ()) -> ScratchEnvFailed:
    return ScratchEnvFailed(f"could not {what}", details=tuple(details), hint="check network access to PyPI")


def venv_failed(root: Path, details: Sequence[str]) -> ScratchEnvFailed:
    return ScratchEnvFailed(
        f"could not create a venv at `{root}`",
        details=tuple(details),
        hint=f"check that {command('python3', '-m', 'venv', root)} works (the `venv` module, disk space)",
    )


def wheel_missing(release: str, tag: str, wheels: Path) -> ScratchEnvFailed:
    return ScratchEnvFailed(
        f"pip left no sglang {release} wheel for {tag} in `{wheels}`",
        hint=f"check that sglang {release} publishes a wheel for this interpreter ({tag})",
    )


# UnsupportedRelease


def no_patch_set(
    version: str, supported: Sequence[str], reason: str | None, python: Path, newest: str | None
) -> UnsupportedRelease:
    install = command(python, "-m", "pip", "install", f"sglang=={newest}") if newest else None
    return UnsupportedRelease(
        f"no patch set for sglang {version}; supported: {', '.join(supported) or 'none'}",
        details=(f"sglang {version} is not supported: {reason}",) if reason else (),
        hint=f"install a supported release: {install}" if install else "install a supported sglang release",
    )


def version_unparsable(raw: str) -> UnsupportedRelease:
    return UnsupportedRelease(
        f"sglang reports a version that does not parse: `{raw}`",
        hint="reinstall sglang from a released wheel",
    )


def manifest_for_other_release(manifest: Path, versions: str, installed: str, python: Path) -> UnsupportedRelease:
    return UnsupportedRelease(
        f"`{manifest}` targets sglang {versions}, the env has {installed}",
        hint=f"pass an env whose sglang matches {versions} (`{python}` has {installed})",
    )


# EditableInstall


def editable_install(env: Path, checkout: str) -> EditableInstall:
    return EditableInstall(
        f"sglang in `{env}` is an editable install of the checkout at `{checkout}`",
        hint=f"patch the checkout at `{checkout}` with git instead, or install a released wheel into the env",
    )


def sglang_shadowed(env: Path, origin: str | None, site_packages: Path) -> EditableInstall:
    return EditableInstall(
        f"`import sglang` in `{env}` resolves to `{origin}`, outside `{site_packages}` where its "
        "metadata lives",
        hint="remove the other copy from sys.path (PYTHONPATH, .pth files, user site)",
    )


# ReadOnlyEnv


def externally_managed(prefix: Path) -> ReadOnlyEnv:
    return ReadOnlyEnv(
        f"`{prefix}` is externally managed (PEP 668); refusing to edit it",
        hint=f"create a virtualenv ({command('python3', '-m', 'venv', '/path/to/venv')}), install sglang "
        "there, and pass it to --env",
    )


def not_writable(directory: Path) -> ReadOnlyEnv:
    return ReadOnlyEnv(
        f"cannot write to `{directory}`: read-only",
        hint=f"run as the user that owns `{directory}`, or clone the venv to a writable place",
    )


# BadPatchSet


def manifest_invalid(manifest: Path, problem: str, hint: str | None = None) -> BadPatchSet:
    return BadPatchSet(
        f"malformed manifest `{manifest}`: {problem}",
        hint=hint or f"fix `{manifest}`; nothing was written",
    )


def patch_set_invalid(where: str, problem: str) -> BadPatchSet:
    """A manifest entry that does not hold; ``where`` names the manifest and the entry."""
    return BadPatchSet(f"{where}: {problem}", hint=f"fix {where}; nothing was written")


def file_unreadable(what: str, path: Path) -> BadPatchSet:
    return BadPatchSet(
        f"{what} not found or not a regular file: `{path}`",
        hint=f"check that `{path}` exists and is a regular file, not a symlink",
    )


def patch_invalid(patch: Path | str, problem: str, hint: str | None = None) -> BadPatchSet:
    return BadPatchSet(f"malformed patch `{patch}`: {problem}", hint=hint or f"fix `{patch}`; nothing was written")


def file_table_stale(manifest: Path, release: str, problems: Sequence[str]) -> BadPatchSet:
    return BadPatchSet(
        f"the [[file]] table of `{manifest}` is out of date",
        details=tuple(problems),
        hint=f"regenerate it from a pristine sglang {release}: `bash scripts/refresh_manifests.sh {release}` "
        "(`ddtree-overlay manifest-refresh` in a fresh venv)",
    )


def manifest_disagrees(patch_set: str, manifest: Path, release: str, problems: Sequence[str]) -> BadPatchSet:
    return BadPatchSet(
        f"patch set `{patch_set}` disagrees with its own manifest `{manifest}`",
        details=tuple(problems),
        hint=f"regenerate its [[file]] tables from a pristine sglang {release}: "
        f"`bash scripts/refresh_manifests.sh {release}` (`ddtree-overlay manifest-refresh` in a fresh venv)",
    )


def several_patch_sets(version: str, ids: Sequence[str]) -> BadPatchSet:
    return BadPatchSet(
        f"several patch sets claim sglang {version}: {', '.join(ids)}",
        hint="pass the one to use with --patch-set",
    )


# UnsafePath


def unsafe_manifest_path(what: str, raw: str, why: str) -> UnsafePath:
    return UnsafePath(f"unsafe {what} path: `{raw}`", hint=why)


def outside_distribution(relative: str, top_levels: Sequence[str]) -> UnsafePath:
    return UnsafePath(
        f"refusing to write outside the distribution's tree: `{relative}`",
        hint=f"targets must lie under {', '.join(f'`{top}/`' for top in sorted(top_levels))}",
    )


# PreImageMismatch


def not_a_regular_file(path: Path) -> PreImageMismatch:
    return PreImageMismatch(f"`{path}` is not a regular file", hint=f"move `{path}` aside, then run again")


def pre_images_differ(env: Path, patch_set: str, details: Sequence[str], files: Sequence[str]) -> PreImageMismatch:
    return PreImageMismatch(
        f"{len(files)} file(s) differ from the pre-image patch set `{patch_set}` was made for",
        details=tuple(details),
        hint=f"the installed files were changed after install; {_overlay('status', env)} lists what differs "
        "from RECORD",
        data={"files": list(files)},
    )


def changed_while_planning(path: Path, expected: str | None, found: str | None) -> PreImageMismatch:
    return PreImageMismatch(
        f"`{path}` changed while planning: expected {expected or 'absent'}, found {found or 'absent'}",
        hint="another process is writing to this env; run the command again",
    )


def env_not_pristine(env: Path, python: Path, version: str, details: Sequence[str]) -> PreImageMismatch:
    return PreImageMismatch(
        f"`{env}` is not a pristine sglang {version}",
        details=tuple(details),
        hint=f"roll the overlay back ({_overlay('rollback', env)}), or reinstall: "
        f"{command(python, '-m', 'pip', 'install', '--force-reinstall', '--no-deps', f'sglang=={version}')}",
    )


# HunkDoesNotApply


def hunks_do_not_apply(patch_set: str, version: str, details: Sequence[str]) -> HunkDoesNotApply:
    return HunkDoesNotApply(
        f"patch set `{patch_set}` does not apply to sglang {version}",
        details=tuple(details),
        hint="refresh the failing patch against this release (fuzz 0: every context line must match)",
    )


# SymlinkedTarget


def symlinked_target(relative: str, link: Path) -> SymlinkedTarget:
    return SymlinkedTarget(
        f"refusing to modify `{relative}` through a symlink: `{link}`",
        hint=f"replace the symlink `{link}` with a real copy of what it points to, then run again",
    )


# FileChangedSinceApply


def changed_since_apply(env: Path, details: Sequence[str], *, reinstalled: bool) -> FileChangedSinceApply:
    return FileChangedSinceApply(
        "files changed since the overlay was applied"
        + (" (sglang was reinstalled or upgraded: RECORD changed)" if reinstalled else ""),
        details=tuple(details),
        hint=f"{_overlay('rollback', env)} (add --force to set edits aside), then {_overlay('apply', env)}",
    )


def edited_since_apply(env: Path, count: int, details: Sequence[str]) -> FileChangedSinceApply:
    return FileChangedSinceApply(
        f"{count} file(s) changed since apply; rollback would lose those edits",
        details=tuple(details),
        hint=f"{_overlay('rollback', env, '--force')} restores them and saves the edits aside",
    )


# PatchSetChangedSinceApply


def patch_set_changed(env: Path, patch_set: str, applied_sha256: str, now_sha256: str) -> PatchSetChangedSinceApply:
    return PatchSetChangedSinceApply(
        f"patch set `{patch_set}` changed since it was applied to this env",
        details=(f"applied {applied_sha256}", f"now     {now_sha256}"),
        hint=f"{_overlay('rollback', env)}, then {_overlay('apply', env)}",
    )


# PostImageMismatch


def post_images_wrong(paths: Sequence[str]) -> PostImageMismatch:
    return PostImageMismatch(
        "files do not hold the expected content after writing: " + ", ".join(paths),
        hint="something else is writing to this env; nothing was changed",
    )


# EnvLocked


def env_locked(holder: str, lock: Path) -> EnvLocked:
    return EnvLocked(
        f"another ddtree-overlay run holds the lock for this env: {holder}",
        hint=f"wait for it to finish, then run the command again (the lock is `{lock}`)",
    )


# RecoveryNeeded


def transaction_pending(env: Path, *, also: str | None = None) -> RecoveryNeeded:
    """An interrupted transaction's journal is there; ``also`` names another way out."""
    return RecoveryNeeded(
        "an interrupted transaction is pending for this env",
        hint=f"run {_overlay('recover', env)}" + (f" (or {also})" if also else ""),
    )


def recovery_blocked(env: Path, reinstall: str, paths: Sequence[str]) -> RecoveryNeeded:
    return RecoveryNeeded(
        "cannot finish the interrupted transaction: files changed meanwhile: " + ", ".join(paths),
        hint=f"reinstall sglang ({reinstall}), then run {_overlay('recover', env)} again",
    )


def backup_unreadable(path: Path, reinstall: str) -> RecoveryNeeded:
    return RecoveryNeeded(f"backup `{path}` is missing or corrupted", hint=f"reinstall sglang: {reinstall}")


def state_unreadable(path: Path, why: str) -> RecoveryNeeded:
    return RecoveryNeeded(
        f"cannot read `{path}`: {why}",
        hint=f"repair `{path}` (JSON that ddtree-overlay wrote), or move it aside after reinstalling sglang",
    )


def state_version_unknown(path: Path, key: str, found: object, known: int) -> RecoveryNeeded:
    return RecoveryNeeded(
        f"`{path}` has {key} {found!r}; this ddtree-overlay understands {known}",
        hint="use the ddtree-overlay release that wrote it, or upgrade this one",
    )


# VerifyFailed


def nothing_applied(env: Path) -> VerifyFailed:
    return VerifyFailed(f"no overlay is applied in `{env}`", hint=f"run {_overlay('apply', env)}")


def overlay_not_intact(env: Path, state: str) -> VerifyFailed:
    return VerifyFailed(
        f"the overlay in `{env}` is {state}, not applied", hint=f"{_overlay('status', env)} lists each file"
    )


def target_script_failed(python: Path, what: str, tail: str) -> VerifyFailed:
    return VerifyFailed(
        f"the {what} could not run in `{python}`: {tail}",
        hint=f"run {command(python, '-c', 'import sglang')} to see the full error",
    )


def sglang_dependencies_missing(
    env: Path,
    python: Path,
    version: str,
    missing: Mapping[str, Sequence[str]],
    other_failures: Sequence[str],
    data: Mapping[str, Any],
) -> SglangDependenciesMissing:
    """``missing``: each absent module (not sglang's) and the patched modules that needed it."""
    blocked = {module for modules in missing.values() for module in modules}
    names = ", ".join(f"`{name}`" for name in sorted(missing))
    return SglangDependenciesMissing(
        f"sglang {version}'s own dependencies are missing in `{env}`: {names}; {len(blocked)} patched "
        "module(s) cannot be imported without them, so the overlay could not be checked",
        details=(
            *(f"`{name}`, needed by {len(modules)} module(s), e.g. `{modules[0]}`" for name, modules in sorted(missing.items())),
            *(f"also failing: {failure}" for failure in other_failures),
        ),
        hint=f"install sglang with its dependencies, {command(python, '-m', 'pip', 'install', f'sglang=={version}')} "
        f"(it keeps the applied files), then {_overlay('verify', env)} again",
        data=data,
    )


def too_few_prompts(held_out: int, asked: int, prompts: Path) -> VerifyFailed:
    return VerifyFailed(
        f"the fixture has {held_out} held-out prompts, {asked} were asked for",
        hint=f"pass --prompts {held_out} or fewer (the prompts are in `{prompts}`)",
    )
