"""The site-packages tree the overlay writes into, and how its files compare with the ledger.

Every verb opens an env the same way, `open_overlay`: the sglang install (`require_sglang`, or
`require_patchable` before a write), its `SiteTree`, and its overlay state directory (ledger,
journal, backups, lock), as one `EnvOverlay` that also knows the env's own paths for the hints
its errors give.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ddtree_overlay.engine import errors, ledger
from ddtree_overlay.engine.datadir import bundled_releases
from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.files import sha256_of
from ddtree_overlay.engine.ledger import EnvState, Ledger


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
class FileState:
    path: str
    state: str  # "applied" | "pristine" | "edited"
    sha256: str | None


def file_states(applied: Ledger, tree: SiteTree) -> tuple[FileState, ...]:
    states = []
    for entry in applied.files:
        current = sha256_of(tree.path(entry.path))
        if current == entry.post_sha256:
            state = "applied"
        elif current == entry.pre_sha256:
            state = "pristine"
        else:
            state = "edited"
        states.append(FileState(entry.path, state, current))
    return tuple(states)


def overall_state(states: tuple[FileState, ...]) -> str:
    kinds = {state.state for state in states}
    if kinds == {"applied"}:
        return "applied"
    if "edited" in kinds:
        return "drifted"
    return "partial"


@dataclass(frozen=True)
class EnvOverlay:
    """One env opened for a verb: its sglang, the site tree, and the overlay state directory."""

    env: EnvInfo
    sglang: SglangInstall
    tree: SiteTree
    state: EnvState

    def reinstall_command(self) -> str:
        """The command that puts this env's sglang back to its released files."""
        return errors.command(
            self.env.python, "-m", "pip", "install", "--force-reinstall", "--no-deps",
            f"sglang=={self.sglang.version}",
        )

    def locked(self, command: str) -> AbstractContextManager[None]:
        """One writer per env (`ledger.locked`)."""
        return ledger.locked(self.state, command)

    def pending(self) -> bool:
        """Is an interrupted transaction's journal waiting for `recover`?"""
        return ledger.read_journal(self.state) is not None

    def refuse_pending(self, *, also: str | None = None) -> None:
        """For the verbs that do not recover by themselves: stop at a pending journal."""
        if self.pending():
            raise errors.transaction_pending(self.env.requested, also=also)

    def applied(self) -> Ledger | None:
        return ledger.read_ledger(self.state)

    def file_states(self, applied: Ledger) -> tuple[FileState, ...]:
        return file_states(applied, self.tree)

    def applied_state(self) -> tuple[Ledger | None, str]:
        """The ledger and `overall_state` of its files; (None, "pristine") when none is applied."""
        applied = self.applied()
        if applied is None:
            return None, "pristine"
        return applied, overall_state(self.file_states(applied))

    def read_blob(self, digest: str) -> bytes:
        return ledger.read_blob(self.state, digest, reinstall=self.reinstall_command())


def open_overlay(env: EnvInfo, *, for_writing: bool = False) -> EnvOverlay:
    """The shared first step of every verb; ``for_writing`` refuses envs we must not edit."""
    sglang = require_patchable(env) if for_writing else require_sglang(env)
    tree = site_tree(sglang)
    return EnvOverlay(env, sglang, tree, ledger.env_state(tree.root))


def _is_within(path: Path, parent: Path) -> bool:
    return path.resolve().is_relative_to(parent.resolve())
