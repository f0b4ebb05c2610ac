"""The site-packages tree the overlay writes into, and the env's overlay state.

Every verb opens an env the same way, `open_overlay`: the sglang install (`require_sglang`, or
`require_patchable` before a write), its `SiteTree`, its installed RECORD and its overlay state
directory (ledger, journal, backups), as one `EnvOverlay` that also knows the env's own paths for
the hints its errors give. `EnvOverlay.applied_overlay` says what is applied: from the ledger, or,
when there is none (or it does not parse), rebuilt from the patch set and the env's files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath

from ddtree_overlay.engine import errors, interrupts, ledger, settings
from ddtree_overlay.engine.datadir import bundled_releases
from ddtree_overlay.engine.envlock import env_lock
from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.images import AppliedOverlay, file_states, ledger_of
from ddtree_overlay.engine.ledger import EnvState, Ledger
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.record import record_hashes, release_change


@dataclass(frozen=True)
class SiteTree:
    """The site-packages tree, as the only place writes may go."""

    root: Path
    top_levels: frozenset[str]

    def path(self, relative: str) -> Path:
        return self.root / relative

    def checked(self, relative: str) -> Path:
        """`relative` inside one of the distribution's top-level dirs, with no symlink on the way."""
        parts = PurePosixPath(relative).parts
        if not parts or parts[0] not in self.top_levels or ".." in parts or relative.startswith("/"):
            raise errors.outside_distribution(relative, sorted(self.top_levels))
        current = self.root
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise errors.symlinked_target(relative, current)
        return current


def require_sglang(env: EnvInfo) -> SglangInstall:
    if env.sglang is None:
        newest = (bundled_releases() or (None,))[-1]
        raise errors.sglang_not_installed(env.requested, env.python, env.python_version, newest)
    return env.sglang


def require_patchable(env: EnvInfo) -> SglangInstall:
    """Refuse envs whose files we must not edit, before anything is planned."""
    sglang = require_sglang(env)
    if sglang.install_kind == "editable":
        where = sglang.editable_checkout or sglang.origin or "an unknown checkout"
        raise errors.editable_install(env.requested, where)
    if not env.is_venv and env.externally_managed:
        raise errors.externally_managed(env.prefix)
    if sglang.location is None or not _is_within(sglang.location, sglang.site_packages):
        raise errors.sglang_shadowed(env.requested, sglang.origin, sglang.site_packages)
    return sglang


def site_tree(sglang: SglangInstall) -> SiteTree:
    tops = {name for name in sglang.record.top_level if not name.endswith(".dist-info")}
    if sglang.location is not None:
        tops.add(sglang.location.name)
    return SiteTree(sglang.site_packages.resolve(), frozenset(tops))


@dataclass(frozen=True)
class EnvOverlay:
    """One env opened for a verb: its sglang, the site tree, and the overlay state directory."""

    env: EnvInfo
    sglang: SglangInstall
    tree: SiteTree
    state: EnvState

    @cached_property
    def record(self) -> Mapping[str, str]:
        """The installed RECORD's sha256 per path (`record.record_hashes`)."""
        return record_hashes(self.sglang)

    def reinstall_command(self) -> str:
        """The command that puts this env's sglang back to its released files."""
        return errors.command(
            self.env.python, "-m", "pip", "install", "--force-reinstall", "--no-deps",
            f"sglang=={self.sglang.version}",
        )

    @contextmanager
    def locked(self, command: str) -> Iterator[None]:
        """One writer per env (`envlock`); SIGINT and SIGTERM end it at a step boundary."""
        settings.fault_spec()  # a malformed value stops the run here, before anything is written
        self._prepare_state()
        with env_lock(self.tree.root, self.state.root, command), interrupts.deferred() as deferral:
            self.state.remove_stray_temp_files()
            try:
                yield
            except interrupts.Signalled as signalled:
                outcome = f"`{command}` stopped and undid what it had written"
                raise errors.interrupted(signalled.name, self.env.requested, outcome) from None
            if deferral.received:
                name = interrupts.Signalled(deferral.received[0]).name
                raise errors.interrupted(name, self.env.requested, f"`{command}` had already finished")

    def _prepare_state(self) -> None:
        root = self.state.root
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise errors.state_dir_unusable(root, error.strerror or str(error)) from error
        if os.statvfs(root).f_flag & os.ST_RDONLY or not os.access(root, os.W_OK):
            raise errors.state_dir_unusable(root, "read-only")

    def pending(self) -> bool:
        """Is an interrupted transaction's journal (readable or not) waiting for `recover`?"""
        return self.state.journal_path.exists()

    def refuse_pending(self, *, also: str | None = None) -> None:
        """For the verbs that do not recover by themselves: stop at a pending journal."""
        if self.pending():
            raise errors.transaction_pending(self.env.requested, also=also)

    def applied(self) -> Ledger | None:
        """The ledger; one that does not parse is an error that names the way out."""
        try:
            return ledger.read_ledger(self.state)
        except ledger.Unreadable as error:
            raise errors.state_unreadable(error.path, error.why, self.env.requested) from error

    def applied_overlay(self, patch_set: PatchSet | None) -> tuple[AppliedOverlay | None, tuple[str, ...]]:
        """What is applied, and notes on where that came from. Without a readable ledger it is
        rebuilt from ``patch_set`` (the installed release's) and the files. None: nothing of
        the overlay is in the env."""
        notes: list[str] = []
        try:
            found = ledger.read_ledger(self.state)
        except ledger.Unreadable as error:
            found = None
            notes.append(f"the ledger `{error.path}` is unreadable ({error.why}); `recover` sets it aside")
        if found is not None:
            pre_images = {entry.path: entry.pre_sha256 for entry in found.files if entry.pre_sha256}
            change = release_change(found.version, found.record_sha256, pre_images, self.sglang, self.record)
            files = file_states(found.files, self.tree.root, self.record)
            return AppliedOverlay(found, False, files, change), tuple(notes)
        if patch_set is None:
            return None, tuple(notes)
        rebuilt = self.rebuilt_overlay(patch_set)
        if not any(file.state in ("applied", "other-release") for file in rebuilt.files):
            return None, tuple(notes)
        notes.append(f"no ledger in `{self.state.root}`: the overlay's state was read from the env's files")
        return rebuilt, tuple(notes)

    def rebuilt_overlay(self, patch_set: PatchSet) -> AppliedOverlay:
        """``patch_set`` as if applied to this install, and the image each of its files holds."""
        rebuilt = ledger_of(
            patch_set, version=self.sglang.version, record_sha256=self.sglang.record.sha256,
            site_root=self.tree.root, record=self.record,
        )
        return AppliedOverlay(rebuilt, True, file_states(rebuilt.files, self.tree.root, self.record), None)

    def set_aside_unreadable_ledger(self) -> tuple[str, ...]:
        """A ledger that does not parse is renamed out of the way (kept for a post-mortem)."""
        try:
            ledger.read_ledger(self.state)
        except ledger.Unreadable as error:
            aside = ledger.set_aside(error.path)
            return (f"set the unreadable ledger aside as `{aside}` ({error.why})",)
        return ()

    def read_blob(self, digest: str) -> bytes:
        return ledger.read_blob(self.state, digest, reinstall=self.reinstall_command())


def open_overlay(env: EnvInfo, *, for_writing: bool = False) -> EnvOverlay:
    """The shared first step of every verb; ``for_writing`` refuses envs we must not edit."""
    sglang = require_patchable(env) if for_writing else require_sglang(env)
    tree = site_tree(sglang)
    return EnvOverlay(env, sglang, tree, ledger.env_state(tree.root))


def _is_within(path: Path, parent: Path) -> bool:
    return path.resolve().is_relative_to(parent.resolve())
