"""Move an env from one set of file contents to another, or not at all.

A `Transition` lists, per file, the sha256 it has before and after (None: absent). `run` checks
every effect in a dry run (paths, expectations, permissions, free space), stores every pre- and
post-image as a blob, writes a journal, then writes. The ledger's write is the commit point: any
failure before it (a full disk, an I/O error, SIGINT or SIGTERM at a step boundary) undoes what
was written and ends in one error; a SIGKILL leaves the journal, and `recovery.finish_interrupted` (what
`recover` and the next `apply`/`rollback` call) finishes the job.

Before a file is replaced or removed, its before-image is kept as a hard link beside it (a temp
name, `kept_path`), as dpkg keeps its backups: undoing that step is a rename, which needs no free
space, so a transaction stopped by a full disk can always be undone. The links go once the
transaction is committed or undone; a crash leaves them to the next run's sweep.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ddtree_overlay.engine import errors, faults, interrupts, ledger
from ddtree_overlay.engine.compat import assert_never
from ddtree_overlay.engine.files import (
    fsync_dir,
    remove_durably,
    sha256_of,
    temp_path,
    write_file_durably,
    write_json_durably,
)
from ddtree_overlay.engine.ledger import Ledger
from ddtree_overlay.engine.site import EnvOverlay

_JOURNAL_SPACE = 1 << 16  # bytes the journal and ledger need at most, with room to spare


@dataclass(frozen=True)
class FileStep:
    path: str
    before_sha256: str | None
    after_sha256: str | None
    mode: int


@dataclass(frozen=True)
class Transition:
    operation: str
    steps: tuple[FileStep, ...]
    make_dirs: tuple[str, ...]
    remove_dirs: tuple[str, ...]
    ledger_after: Ledger | None

    def to_journal(self, txid: str, phase: str, release: Mapping[str, str | None]) -> dict[str, Any]:
        return {
            "journal_version": ledger.JOURNAL_VERSION,
            "txid": txid,
            "phase": phase,
            "release": dict(release),
            "operation": self.operation,
            "steps": [asdict(step) for step in self.steps],
            "make_dirs": list(self.make_dirs),
            "remove_dirs": list(self.remove_dirs),
            "ledger_after": None if self.ledger_after is None else self.ledger_after.to_json(),
        }

    @classmethod
    def from_journal(cls, raw: Mapping[str, Any]) -> Transition:
        """Raises TypeError, KeyError or ValueError on a wrong shape (`ledger.shaped`)."""
        after = raw["ledger_after"]
        steps = tuple(FileStep(**step) for step in raw["steps"])
        if raw["operation"] not in ("apply", "rollback") or raw["phase"] not in ("writing", "committed"):
            raise ValueError(f"operation {raw['operation']!r}, phase {raw['phase']!r}")
        if not isinstance(raw["txid"], str) or not isinstance(raw.get("release", {}), dict):
            raise ValueError("txid or release has the wrong type")
        if not all(isinstance(step.path, str) and isinstance(step.mode, int) for step in steps):
            raise ValueError("a step has the wrong types")
        return cls(
            operation=raw["operation"],
            steps=steps,
            make_dirs=tuple(str(path) for path in raw["make_dirs"]),
            remove_dirs=tuple(str(path) for path in raw["remove_dirs"]),
            ledger_after=None if after is None else Ledger.from_json(after),
        )


@dataclass(frozen=True)
class MakeDir:
    path: str


@dataclass(frozen=True)
class WriteFile:
    path: str
    expect_sha256: str | None
    content_sha256: str
    mode: int


@dataclass(frozen=True)
class RemoveFile:
    path: str
    expect_sha256: str


@dataclass(frozen=True)
class RemoveDir:
    path: str


@dataclass(frozen=True)
class PurgePycache:
    path: str


Effect = MakeDir | WriteFile | RemoveFile | RemoveDir | PurgePycache


def effects_of(transition: Transition) -> tuple[Effect, ...]:
    effects: list[Effect] = [MakeDir(path) for path in transition.make_dirs]
    for step in transition.steps:
        if step.after_sha256 is None:
            assert step.before_sha256 is not None
            effects.append(RemoveFile(step.path, step.before_sha256))
        else:
            effects.append(WriteFile(step.path, step.before_sha256, step.after_sha256, step.mode))
        if step.path.endswith(".py"):
            effects.append(PurgePycache(step.path))
    effects += [RemoveDir(path) for path in transition.remove_dirs]
    return tuple(effects)


def kept_path(path: Path, txid: str) -> Path:
    """Where transaction ``txid`` keeps ``path``'s before-image while it runs."""
    return temp_path(path, f"ddtree-{txid}-before")


def release_of(overlay: EnvOverlay) -> dict[str, str | None]:
    """The installed release a journal records, so that recovery never mixes two."""
    return {"version": overlay.sglang.version, "record_sha256": overlay.sglang.record.sha256}


def run(transition: Transition, overlay: EnvOverlay, *, contents: Mapping[str, bytes]) -> None:
    """Carry out `transition` atomically; `contents` maps sha256 to bytes for every image."""
    txid = secrets.token_hex(6)
    state = overlay.state
    effects = effects_of(transition)
    _Executor(overlay, txid, dry_run=True).run_all(effects)
    _require_space(overlay, transition, contents)
    try:
        for data in contents.values():
            interrupts.raise_if_signalled()
            ledger.store_blob(state, data)
            faults.reach("blob-written")
        interrupts.raise_if_signalled()
        write_json_durably(state.journal_path, transition.to_journal(txid, "writing", release_of(overlay)))
        faults.reach("journal-written")
    except OSError as error:
        # Nothing in site-packages was written yet; a journal, if its write got that far, is
        # complete (renamed into place whole) and undone like any other.
        undo(transition, overlay, txid)
        raise _write_error(error, state.root, "nothing in the env was changed") from error
    try:
        _Executor(overlay, txid, dry_run=False).run_all(effects)
        _check_post_images(transition, overlay)
        interrupts.raise_if_signalled()
        write_json_durably(state.journal_path, transition.to_journal(txid, "committed", release_of(overlay)))
        faults.reach("journal-committed")
        ledger.write_ledger(state, transition.ledger_after)
    except BaseException as error:
        undo(transition, overlay, txid)
        if isinstance(error, OSError):
            outcome = f"the {transition.operation} was undone, the env is as it was before"
            raise _write_error(error, overlay.tree.root, outcome) from error
        raise
    try:
        faults.reach("ledger-written")
        drop_kept(transition, overlay, txid)
        remove_durably(state.journal_path)
        faults.reach("journal-removed")
    except OSError as error:
        outcome = f"the {transition.operation} is complete; the next command clears what it left"
        raise _write_error(error, state.root, outcome) from error


def check(transition: Transition, overlay: EnvOverlay) -> None:
    """The dry run alone: every path, expectation and permission, nothing written."""
    _Executor(overlay, "check", dry_run=True).run_all(effects_of(transition))


def undo(transition: Transition, overlay: EnvOverlay, txid: str) -> None:
    """Every file back to its before-image, then the journal removed; an undo that fails leaves
    the journal for `recover` and says so."""
    try:
        _restore_before_images(transition, overlay, txid)
        drop_kept(transition, overlay, txid)
        remove_durably(overlay.state.journal_path)
        faults.reach("journal-removed")
    except OSError as error:
        raise errors.undo_failed(overlay.env.requested, f"`{error.filename}`: {error.strerror}") from error


def remove_files(overlay: EnvOverlay, files: Mapping[str, str]) -> None:
    """Remove ``files`` (path: the sha256 each must hold) and their bytecode, outside a
    transaction: what recovery does to an interrupted one's added files."""
    executor = _Executor(overlay, "recovery", dry_run=False, undoing=True)
    for path, sha256 in files.items():
        executor.run(RemoveFile(path, sha256))
        if path.endswith(".py"):
            executor.run(PurgePycache(path))


def _write_error(error: OSError, where: Path, outcome: str) -> errors.WriteFailed:
    path = Path(error.filename) if error.filename else where
    return errors.write_failed(path, error.strerror or str(error), outcome)


def _check_post_images(transition: Transition, overlay: EnvOverlay) -> None:
    wrong = [
        step.path
        for step in transition.steps
        if sha256_of(overlay.tree.path(step.path)) != step.after_sha256
    ]
    if wrong:
        raise errors.post_images_wrong(wrong)


def _restore_before_images(transition: Transition, overlay: EnvOverlay, txid: str) -> None:
    conflicts: list[str] = []
    target = overlay.tree
    executor = _Executor(overlay, txid, dry_run=False, undoing=True)
    for path in transition.remove_dirs:
        if not target.path(path).exists():
            executor.run(MakeDir(path))
    for step in reversed(transition.steps):
        current = sha256_of(target.path(step.path))
        if current == step.before_sha256:
            continue
        if current != step.after_sha256:
            conflicts.append(step.path)
        elif step.before_sha256 is None:
            executor.run(RemoveFile(step.path, current))
        elif not _restore_kept(target.checked(step.path), txid, step.before_sha256):
            executor.run(WriteFile(step.path, current, step.before_sha256, step.mode))
        if step.path.endswith(".py"):
            executor.run(PurgePycache(step.path))
    for path in reversed(transition.make_dirs):
        directory = target.path(path)
        if directory.is_dir() and not directory.is_symlink() and not any(directory.iterdir()):
            executor.run(RemoveDir(path))
    if conflicts:
        raise errors.recovery_blocked(overlay.env.requested, overlay.reinstall_command(), conflicts)


def _restore_kept(path: Path, txid: str, before_sha256: str) -> bool:
    """Put the kept before-image back with a rename (no bytes written); False when it is gone."""
    kept = kept_path(path, txid)
    if kept.is_symlink() or not kept.is_file() or sha256_of(kept) != before_sha256:
        return False
    os.replace(kept, path)
    fsync_dir(path.parent)
    faults.reach("kept-restored")
    return True


def drop_kept(transition: Transition, overlay: EnvOverlay, txid: str) -> None:
    for step in transition.steps:
        kept = kept_path(overlay.tree.path(step.path), txid)
        if kept.exists() or kept.is_symlink():
            kept.unlink()
            faults.reach("kept-dropped")


def _require_space(overlay: EnvOverlay, transition: Transition, contents: Mapping[str, bytes]) -> None:
    """Refuse up front when a file system cannot hold what the transaction writes: the blobs
    and journal in the state dir, every new image (as a temp file first) in site-packages."""
    new_blobs = sum(len(data) for digest, data in contents.items() if ledger.find_blob(overlay.state, digest) is None)
    written = sum(len(contents.get(step.after_sha256, b"")) for step in transition.steps if step.after_sha256)
    needs: dict[int, list[Any]] = {}  # per file system: [a directory on it, bytes it must hold]
    for directory, size in ((overlay.state.root, new_blobs + _JOURNAL_SPACE), (overlay.tree.root, written)):
        needs.setdefault(directory.stat().st_dev, [directory, 0])[1] += size
    for directory, size in needs.values():
        stats = os.statvfs(directory)
        free = (stats.f_bfree if os.geteuid() == 0 else stats.f_bavail) * stats.f_frsize
        if size > free:
            raise errors.no_space(directory, size, free)


class _Executor:
    def __init__(self, overlay: EnvOverlay, txid: str, *, dry_run: bool, undoing: bool = False) -> None:
        self.overlay = overlay
        self.target = overlay.tree
        self.txid = txid
        self.dry_run = dry_run
        self.undoing = undoing  # an undo finishes whatever signal comes

    def run_all(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            self.run(effect)

    def run(self, effect: Effect) -> None:
        if not (self.dry_run or self.undoing):
            interrupts.raise_if_signalled()
        match effect:
            case MakeDir(path):
                self._make_dir(self.target.checked(path))
            case WriteFile(path, expect, content, mode):
                self._write_file(self.target.checked(path), expect, content, mode)
            case RemoveFile(path, expect):
                self._remove_file(self.target.checked(path), expect)
            case RemoveDir(path):
                self._remove_dir(self.target.checked(path))
            case PurgePycache(path):
                self._purge_pycache(path, self.target.checked(path))
            case _:
                assert_never(effect)

    def _make_dir(self, directory: Path) -> None:
        _require_writable(directory.parent, dry_run=self.dry_run)
        if not self.dry_run:
            directory.mkdir()
            fsync_dir(directory.parent)
            faults.reach("dir-made")

    def _write_file(self, path: Path, expect: str | None, content: str, mode: int) -> None:
        _require_writable(path.parent, dry_run=self.dry_run)
        _require_current(path, expect)
        if self.dry_run:
            return
        data = self.overlay.read_blob(content)
        existing = path.stat() if path.exists() else path.parent.stat()
        owner = (existing.st_uid, existing.st_gid) if os.geteuid() == 0 else None
        _require_current(path, expect)
        if path.exists() and not self.undoing:
            os.link(path, kept_path(path, self.txid))
        # this process's own temp name: a killed run's temp file, same txid, never collides
        write_file_durably(path, data, tag=f"ddtree-{self.txid}-{os.getpid()}", mode=mode, owner=owner)
        faults.reach("file-replaced")

    def _remove_file(self, path: Path, expect: str) -> None:
        _require_writable(path.parent, dry_run=self.dry_run)
        _require_current(path, expect)
        if not self.dry_run:
            if self.undoing:
                path.unlink()
            else:
                os.replace(path, kept_path(path, self.txid))
            fsync_dir(path.parent)
            faults.reach("file-removed")

    def _remove_dir(self, directory: Path) -> None:
        _require_writable(directory.parent, dry_run=self.dry_run)
        if not self.dry_run and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            fsync_dir(directory.parent)
            faults.reach("dir-removed")

    def _purge_pycache(self, relative: str, source: Path) -> None:
        """Drop every cached bytecode of `source`: all interpreter tags and optimisation levels.
        A symlinked `__pycache__` is refused in the dry run: nothing is deleted through it."""
        cache = source.parent / "__pycache__"
        if cache.is_symlink():
            raise errors.symlinked_target(f"{Path(relative).parent}/__pycache__", cache)
        if self.dry_run or not cache.is_dir():
            return
        for compiled in cache.glob(f"{source.stem}.*.pyc"):
            compiled.unlink()
        faults.reach("pycache-purged")


def _require_current(path: Path, expect: str | None) -> None:
    if path.exists() and not path.is_file():
        raise errors.not_a_regular_file(path)
    current = sha256_of(path)
    if current != expect:
        raise errors.changed_while_planning(path, expect, current)


def _require_writable(directory: Path, *, dry_run: bool) -> None:
    if not dry_run:
        return
    existing = directory
    while not existing.exists():
        existing = existing.parent
    read_only_fs = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    if read_only_fs or not os.access(existing, os.W_OK):
        raise errors.not_writable(existing)
