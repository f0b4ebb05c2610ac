"""Move an env from one set of file contents to another, or not at all.

A `Transition` lists, per file, the sha256 it has before and after (None: absent). `run` checks
every effect in a dry run, stores every pre- and post-image as a blob, writes a journal, then
writes. Any exception (Ctrl-C included) undoes what was written; a SIGKILL leaves the journal,
and `recover_pending` (what `recover` and the next `apply`/`rollback` call) finishes the job.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ddtree_overlay.engine import errors, faults, ledger
from ddtree_overlay.engine.compat import assert_never
from ddtree_overlay.engine.files import fsync_dir, remove_durably, sha256_of, write_json_durably
from ddtree_overlay.engine.ledger import EnvState, Ledger
from ddtree_overlay.engine.site import EnvOverlay

NEW_FILE_MODE = 0o644


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

    def to_journal(self, txid: str, phase: str) -> dict[str, Any]:
        return {
            "journal_version": ledger.JOURNAL_VERSION,
            "txid": txid,
            "phase": phase,
            "operation": self.operation,
            "steps": [asdict(step) for step in self.steps],
            "make_dirs": list(self.make_dirs),
            "remove_dirs": list(self.remove_dirs),
            "ledger_after": None if self.ledger_after is None else self.ledger_after.to_json(),
        }

    @classmethod
    def from_journal(cls, raw: Mapping[str, Any]) -> Transition:
        after = raw["ledger_after"]
        return cls(
            operation=raw["operation"],
            steps=tuple(FileStep(**step) for step in raw["steps"]),
            make_dirs=tuple(raw["make_dirs"]),
            remove_dirs=tuple(raw["remove_dirs"]),
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


def run(transition: Transition, overlay: EnvOverlay, *, contents: Mapping[str, bytes]) -> None:
    """Carry out `transition` atomically; `contents` maps sha256 to bytes for every image."""
    txid = secrets.token_hex(6)
    state = overlay.state
    effects = effects_of(transition)
    _Executor(overlay, txid, dry_run=True).run_all(effects)
    for data in contents.values():
        ledger.store_blob(state, data)
        faults.reach("blob-written")
    write_json_durably(state.journal_path, transition.to_journal(txid, "writing"))
    faults.reach("journal-written")
    try:
        _Executor(overlay, txid, dry_run=False).run_all(effects)
        _check_post_images(transition, overlay)
    except BaseException:
        undo_journal(overlay)
        raise
    _commit(state, transition, txid)


def check(transition: Transition, overlay: EnvOverlay) -> None:
    """The dry run alone: every path, expectation and permission, nothing written."""
    _Executor(overlay, "check", dry_run=True).run_all(effects_of(transition))


def recover_pending(overlay: EnvOverlay) -> tuple[str, ...]:
    """Run by every writing verb before it plans: the next command recovers a crash."""
    done = undo_journal(overlay)
    for stray in overlay.state.root.glob(".*.tmp"):
        stray.unlink()
    return (done,) if done else ()


def undo_journal(overlay: EnvOverlay) -> str | None:
    """Finish an interrupted transaction: forward if it committed, else back to its start.

    Returns what was done, or None when there was no journal.
    """
    state = overlay.state
    raw = ledger.read_journal(state)
    if raw is None:
        return None
    transition = Transition.from_journal(raw)
    _remove_stray_temp_files(overlay, transition, raw["txid"])
    if raw["phase"] == "committed":
        _commit(state, transition, raw["txid"])
        return f"completed the interrupted {transition.operation}"
    _restore_before_images(transition, overlay, raw["txid"])
    remove_durably(state.journal_path)
    return f"undid the interrupted {transition.operation}"


def _commit(state: EnvState, transition: Transition, txid: str) -> None:
    write_json_durably(state.journal_path, transition.to_journal(txid, "committed"))
    faults.reach("journal-committed")
    ledger.write_ledger(state, transition.ledger_after)
    faults.reach("ledger-written")
    remove_durably(state.journal_path)


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
    executor = _Executor(overlay, txid, dry_run=False)
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
        else:
            executor.run(WriteFile(step.path, current, step.before_sha256, step.mode))
        if step.path.endswith(".py"):
            executor.run(PurgePycache(step.path))
    for path in reversed(transition.make_dirs):
        directory = target.path(path)
        if directory.is_dir() and not any(directory.iterdir()):
            executor.run(RemoveDir(path))
    if conflicts:
        raise errors.recovery_blocked(overlay.env.requested, overlay.reinstall_command(), conflicts)


def _remove_stray_temp_files(overlay: EnvOverlay, transition: Transition, txid: str) -> None:
    directories = {PurePosixPath(step.path).parent for step in transition.steps}
    for directory in directories:
        real = overlay.tree.path(str(directory))
        if real.is_dir():
            for stray in real.glob(f".*.ddtree-{txid}.tmp"):
                stray.unlink()


class _Executor:
    def __init__(self, overlay: EnvOverlay, txid: str, *, dry_run: bool) -> None:
        self.overlay = overlay
        self.target = overlay.tree
        self.txid = txid
        self.dry_run = dry_run

    def run_all(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            self.run(effect)

    def run(self, effect: Effect) -> None:
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
                if not self.dry_run:
                    _purge_pycache(self.target.checked(path))
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
        temp = path.with_name(f".{path.name}.ddtree-{self.txid}.tmp")
        owner = path.stat() if path.exists() else path.parent.stat()
        # Same directory, so `os.replace` is atomic, and a new inode: a hardlinked cache copy
        # (uv, conda) is superseded rather than written through.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
            if os.geteuid() == 0:
                os.fchown(fd, owner.st_uid, owner.st_gid)
            os.fsync(fd)
        finally:
            os.close(fd)
        faults.reach("temp-written")
        _require_current(path, expect)
        os.replace(temp, path)
        faults.reach("file-replaced")
        fsync_dir(path.parent)

    def _remove_file(self, path: Path, expect: str) -> None:
        _require_writable(path.parent, dry_run=self.dry_run)
        _require_current(path, expect)
        if not self.dry_run:
            path.unlink()
            fsync_dir(path.parent)
            faults.reach("file-removed")

    def _remove_dir(self, directory: Path) -> None:
        _require_writable(directory.parent, dry_run=self.dry_run)
        if not self.dry_run and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            fsync_dir(directory.parent)
            faults.reach("dir-removed")


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


def _purge_pycache(source: Path) -> None:
    """Drop every cached bytecode of `source`: all interpreter tags and optimisation levels."""
    cache = source.parent / "__pycache__"
    if cache.is_dir():
        for compiled in cache.glob(f"{source.stem}.*.pyc"):
            compiled.unlink()
