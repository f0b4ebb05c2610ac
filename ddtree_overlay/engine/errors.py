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
    BAD_RUN_FILE = 12
    SGLANG_DEPENDENCIES_MISSING = 13
    BAD_PROMPT_FILE = 14
    ATTENTION_BACKEND_MISSING = 15
    INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
    TERMINATED = 143  # 128 + SIGTERM


EXIT_CODE_MEANINGS: Mapping[ExitCode, str] = {
    ExitCode.OK: "success, including a no-op (already applied, nothing to roll back)",
    ExitCode.INTERNAL: "internal error (a bug: please report it)",
    ExitCode.USAGE: "usage error: unknown option or bad argument",
    ExitCode.ENV_NOT_FOUND: "env not found, not a python env, or sglang not installed in it",
    ExitCode.UNSUPPORTED_VERSION: "installed sglang version has no matching patch set",
    ExitCode.EDITABLE_INSTALL: "sglang is an editable install (patch its checkout with git)",
    ExitCode.READ_ONLY: "site-packages or the state dir cannot be written (read-only, externally managed, "
    "full, I/O error)",
    ExitCode.BAD_PATCH_SET: "malformed input: a manifest, patch, environment variable or the env's answer to "
    "the probe, or an unsafe path in it",
    ExitCode.CONFLICT: "drift or conflict: files differ from what the patch set or ledger expects",
    ExitCode.LOCKED: "another ddtree-overlay run holds this env's lock",
    ExitCode.RECOVERY_NEEDED: "an interrupted transaction or unreadable state needs `recover`",
    ExitCode.VERIFY_FAILED: "verification of the applied overlay failed",
    ExitCode.BAD_RUN_FILE: "a saved run to compare with or re-analyse is unreadable, malformed, or from other "
    "models",
    ExitCode.SGLANG_DEPENDENCIES_MISSING: "sglang's own dependencies are missing in the env (not the overlay)",
    ExitCode.BAD_PROMPT_FILE: "a bench prompt file is unreadable or malformed, or its chat prompts cannot be "
    "tokenized with the target's tokenizer",
    ExitCode.ATTENTION_BACKEND_MISSING: "a bench arm's attention backend is not installed in the env (FA3 without "
    "sgl_kernel's flash_ops)",
    ExitCode.INTERRUPTED: "interrupted by Ctrl-C (SIGINT); the env was left exactly pristine or applied",
    ExitCode.TERMINATED: "terminated by SIGTERM; the env was left exactly pristine or applied",
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


class BadArguments(OverlayError):
    """A usage error found only once the env or the models are known (Typer finds the rest)."""

    exit_code = ExitCode.USAGE
    code = "usage"


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


class WriteFailed(OverlayError):
    exit_code = ExitCode.READ_ONLY
    code = "write_failed"


class BadPatchSet(OverlayError):
    exit_code = ExitCode.BAD_PATCH_SET
    code = "bad_patch_set"


class UnsafePath(OverlayError):
    exit_code = ExitCode.BAD_PATCH_SET
    code = "unsafe_path"


class BadSetting(OverlayError):
    exit_code = ExitCode.BAD_PATCH_SET
    code = "bad_setting"


class MalformedProbeAnswer(OverlayError):
    exit_code = ExitCode.BAD_PATCH_SET
    code = "malformed_probe_answer"


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


class StateUnreadable(RecoveryNeeded):
    """A ledger or journal that does not parse: the verbs that write set it aside and rebuild."""

    code = "state_unreadable"


class VerifyFailed(OverlayError):
    exit_code = ExitCode.VERIFY_FAILED
    code = "verify_failed"


class RunFileInvalid(OverlayError):
    exit_code = ExitCode.BAD_RUN_FILE
    code = "run_file_invalid"


class BadPromptFile(OverlayError):
    exit_code = ExitCode.BAD_PROMPT_FILE
    code = "bad_prompt_file"


class AttentionBackendMissing(OverlayError):
    exit_code = ExitCode.ATTENTION_BACKEND_MISSING
    code = "attention_backend_missing"


class Interrupted(OverlayError):
    exit_code = ExitCode.INTERRUPTED
    code = "interrupted"


class Terminated(OverlayError):
    exit_code = ExitCode.TERMINATED
    code = "terminated"


class SglangDependenciesMissing(OverlayError):
    exit_code = ExitCode.SGLANG_DEPENDENCIES_MISSING
    code = "sglang_dependencies_missing"


# --- builders -------------------------------------------------------------------------------


def command(*words: str | Path) -> str:
    """A shell command line in backticks, each word quoted as the shell needs it."""
    return "`" + " ".join(shlex.quote(str(word)) for word in words) + "`"


def overlay_command(verb: str, env: Path, *flags: str) -> str:
    """`ddtree-overlay VERB --env ENV FLAGS...` as a quoted command, for hints."""
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


def state_dir_unusable(path: Path, why: str) -> ReadOnlyEnv:
    return ReadOnlyEnv(
        f"cannot use the state dir `{path}`: {why}",
        hint=f"make `{path}` a writable directory, or set DDTREE_OVERLAY_STATE_DIR to one",
    )


# WriteFailed


def no_space(directory: Path, needed: int, free: int) -> WriteFailed:
    return WriteFailed(
        f"not enough space on the file system of `{directory}`: the transaction needs {_mib(needed)}, "
        f"{_mib(free)} are free; nothing was written",
        hint=f"free space on the file system that holds `{directory}`, then run the command again",
    )


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def write_failed(path: Path, why: str, outcome: str) -> WriteFailed:
    """A write that failed midway (disk full, quota, I/O error); ``outcome`` says what was left."""
    return WriteFailed(
        f"could not write `{path}`: {why}; {outcome}",
        hint=f"free space on (or repair) the file system that holds `{path}`, then run the command again",
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


# BadSetting


def bad_setting(name: str, value: str, expected: str) -> BadSetting:
    return BadSetting(
        f"{name}={value!r} is not {expected}",
        hint=f"set {name} to {expected}, or unset it: {command('unset', name)}",
    )


# MalformedProbeAnswer


def probe_answer_malformed(python: Path, script: Path, problem: str) -> MalformedProbeAnswer:
    return MalformedProbeAnswer(
        f"`{python}` answered the env probe with something that is not a probe report: {problem}",
        hint=f"see what it prints: {command(python, '-I', script)}",
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
        hint=f"the installed files were changed after install; {overlay_command('status', env)} lists what differs "
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
        hint=f"roll the overlay back ({overlay_command('rollback', env)}), or reinstall: "
        f"{command(python, '-m', 'pip', 'install', '--force-reinstall', '--no-deps', f'sglang=={version}')}",
    )


def files_match_neither(
    env: Path, patch_set: str, details: Sequence[str], files: Sequence[str], reinstall: str
) -> PreImageMismatch:
    """Without a ledger, files that hold neither image of the patch set cannot be restored."""
    return PreImageMismatch(
        f"{len(files)} file(s) in `{env}` hold neither the pre- nor the post-image of patch set `{patch_set}`",
        details=tuple(details),
        hint=f"reinstall sglang to get its released files back ({reinstall}), then run the command again",
        data={"files": list(files)},
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


def changed_since_apply(env: Path, details: Sequence[str]) -> FileChangedSinceApply:
    return FileChangedSinceApply(
        "files changed since the overlay was applied",
        details=tuple(details),
        hint=f"{overlay_command('rollback', env)} (add --force to set edits aside), then {overlay_command('apply', env)}",
    )


def edited_since_apply(env: Path, count: int, details: Sequence[str]) -> FileChangedSinceApply:
    return FileChangedSinceApply(
        f"{count} file(s) changed since apply; rollback would lose those edits",
        details=tuple(details),
        hint=f"{overlay_command('rollback', env, '--force')} restores them and saves the edits aside",
    )


# PatchSetChangedSinceApply


def patch_set_changed(env: Path, patch_set: str, applied_sha256: str, now_sha256: str) -> PatchSetChangedSinceApply:
    return PatchSetChangedSinceApply(
        f"patch set `{patch_set}` changed since it was applied to this env",
        details=(f"applied {applied_sha256}", f"now     {now_sha256}"),
        hint=f"{overlay_command('rollback', env)}, then {overlay_command('apply', env)}",
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
        hint=f"run {overlay_command('recover', env)}" + (f" (or {also})" if also else ""),
    )


def recovery_blocked(env: Path, reinstall: str, paths: Sequence[str]) -> RecoveryNeeded:
    return RecoveryNeeded(
        "cannot finish the interrupted transaction: files changed meanwhile: " + ", ".join(paths),
        hint=f"reinstall sglang ({reinstall}), then run {overlay_command('recover', env)} again",
    )


def backup_unreadable(path: Path, reinstall: str) -> RecoveryNeeded:
    return RecoveryNeeded(f"backup `{path}` is missing or corrupted", hint=f"reinstall sglang: {reinstall}")


def undo_failed(env: Path, why: str) -> RecoveryNeeded:
    return RecoveryNeeded(
        f"the transaction could not be finished or undone: {why}",
        hint=f"free space on (or repair) the file system, then run {overlay_command('recover', env)}",
    )


def state_unreadable(path: Path, why: str, env: Path) -> StateUnreadable:
    return StateUnreadable(
        f"cannot read `{path}`: {why}",
        hint=f"run {overlay_command('recover', env)}: it sets the file aside and rebuilds the state from the env's files",
    )


def state_version_unknown(path: Path, key: str, found: object, known: int) -> RecoveryNeeded:
    return RecoveryNeeded(
        f"`{path}` has {key} {found!r}; this ddtree-overlay understands {known}",
        hint="use the ddtree-overlay release that wrote it, or move it aside and let this one rebuild the "
        f"state from the env's files: {command('mv', path, f'{path}.aside')}",
    )


# VerifyFailed


def nothing_applied(env: Path) -> VerifyFailed:
    return VerifyFailed(f"no overlay is applied in `{env}`", hint=f"run {overlay_command('apply', env)}")


def overlay_not_intact(env: Path, state: str) -> VerifyFailed:
    return VerifyFailed(
        f"the overlay in `{env}` is {state}, not applied", hint=f"{overlay_command('status', env)} lists each file"
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
        f"(it keeps the applied files), then {overlay_command('verify', env)} again",
        data=data,
    )


def too_few_prompts(held_out: int, asked: int, prompts: Path) -> VerifyFailed:
    return VerifyFailed(
        f"the fixture has {held_out} held-out prompts, {asked} were asked for",
        hint=f"pass --prompts {held_out} or fewer (the prompts are in `{prompts}`)",
    )


# RunFileInvalid

_RUN_FILE_HINT = "pass the file `benchmark.py --save-path` of the DDTree reference code wrote"


def run_file_unreadable(path: Path, why: str) -> RunFileInvalid:
    return RunFileInvalid(f"cannot read the run file `{path}`: {why}", hint=_RUN_FILE_HINT)


def run_file_malformed(path: Path, problem: str) -> RunFileInvalid:
    return RunFileInvalid(f"`{path}` is not a DDTree benchmark run: {problem}", hint=_RUN_FILE_HINT)


def bench_run_invalid(run: Path, why: str) -> RunFileInvalid:
    """`bench --reanalyse RUN`: RUN holds no finished bench run to rebuild the report of."""
    return RunFileInvalid(
        f"`{run}` is not a bench run to re-analyse: {why}",
        hint="pass a bench --out directory (bench.json beside records.jsonl or records.jsonl.xz)",
    )


def run_file_other_models(path: Path, recorded: str, given: Path, why: str) -> RunFileInvalid:
    return RunFileInvalid(
        f"`{path}` was made with `{recorded}`, which `{given}` is not: {why}",
        hint="pass --target/--draft with the models the run was made with",
    )


def run_file_model_missing(path: Path, model: Path) -> RunFileInvalid:
    """The model a run recorded (or was given) is no directory from here (a hub id, or a path
    relative to where the run was made)."""
    return RunFileInvalid(
        f"`{path}` was made with `{model}`, which is no model directory here",
        hint="pass --target/--draft with the models the run was made with",
    )

# BadArguments


def bench_plan_refused(problem: str) -> BadArguments:
    """The sweep cannot be planned as asked for this pair and env (an `--only` arm it lacks)."""
    return BadArguments(
        problem, hint="the same `bench` command with --dry-run and without --only lists the arms this pair and env run"
    )


def preset_needs_release(preset: str, release: str, installed: str) -> BadArguments:
    """A check preset sends requests the installed release's DDTREE does not serve."""
    return BadArguments(
        f"preset {preset} needs sglang {release} or later; this env has {installed}",
        hint=f"run it in an env with sglang {release}+, or drop {preset} from --preset",
    )


def preset_needs_fixture_pair(preset: str) -> BadArguments:
    """A check preset whose judge reads outputs in the fixtures' byte vocabulary."""
    return BadArguments(
        f"preset {preset} judges outputs in the fixture pairs' byte vocabulary, not --target's tokenizer",
        hint=f"run {preset} without --target/--draft",
    )


def bench_beyond_context(problem: str) -> BadArguments:
    """The sweep's prompts and new tokens do not fit the target's context length."""
    return BadArguments(problem, hint="pass a smaller --max-new-tokens, or on a random-weight setting --prompt-tokens")


def bench_tp_refused(tp_size: int, why: str) -> BadArguments:
    """The target's heads do not split over the asked tensor-parallel size: every engine would fail."""
    return BadArguments(
        f"the target cannot run at --tp-size {tp_size}: {why}",
        hint="pass a --tp-size that divides the target's attention and Gated-DeltaNet heads",
    )


# BadPromptFile

_PROMPT_FILE_HINT = (
    "pass a JSON list of token-id lists, or JSON lines each with `turns` (the user turns, as the "
    "DDTree reference's datasets) or `messages` (role and content, the last a user's)"
)


def prompt_file_invalid(path: Path, problem: str) -> BadPromptFile:
    return BadPromptFile(f"`{path}` is not a bench prompt file: {problem}", hint=_PROMPT_FILE_HINT)


def too_few_prompts_for_batch(path: Path, count: int, widest: int) -> BadPromptFile:
    return BadPromptFile(
        f"`{path}` gives {count} prompts, fewer than the widest batch size {widest}",
        hint=f"add prompts to `{path}`, or keep --batch-sizes at {count} or below",
    )


def no_chat_tokenizer(tokenizer: Path, why: str) -> BadPromptFile:
    return BadPromptFile(
        f"chat prompts need the target's tokenizer and chat template, and `{tokenizer}` {why}",
        hint="pass --tokenizer with a directory that holds the tokenizer files and a chat template "
        "(`chat_template` in tokenizer_config.json, or chat_template.jinja)",
    )


def chat_prompts_failed(path: Path, python: Path, why: str) -> BadPromptFile:
    return BadPromptFile(
        f"the chat prompts of `{path}` could not be tokenized in `{python}`: {why}",
        hint="check the tokenizer loads there: "
        + command(python, "-c", "import transformers; print(transformers.__version__)"),
    )


# Interrupted, Terminated


def interrupted(signal_name: str, env: Path, outcome: str) -> Interrupted | Terminated:
    """A SIGINT or SIGTERM the transaction finished or undid its step for; ``outcome`` says which."""
    kind = Terminated if signal_name == "SIGTERM" else Interrupted
    return kind(f"{signal_name} received; {outcome}", hint=f"{overlay_command('status', env)} shows the env's state")


# AttentionBackendMissing


def fa3_not_installed(algorithms: Sequence[str], python: Path, *, default: bool) -> AttentionBackendMissing:
    """The arms of ``algorithms`` would run FA3, asked for or (``default``) as SGLang's default for
    the GPU, and the env's sgl_kernel has no FA3 (found before any engine started)."""
    if len(algorithms) == 1:
        whose = f"{algorithms[0]}'s attention backend"
    else:
        whose = f"the attention backend of {', '.join(algorithms[:-1])} and {algorithms[-1]}"
    chosen = " (SGLang's default for this GPU)" if default else ""
    return AttentionBackendMissing(
        f"{whose} here is fa3{chosen}, but `sgl_kernel` in `{python}` has no `flash_ops` (FA3 is not "
        "installed): no engine was started",
        hint="pass --baseline-attention-backend flashinfer or triton",
    )
