"""The site-packages tree the overlay writes into, and how its files compare with the ledger.

Every verb opens an env the same way: the sglang install (`require_sglang`, or
`require_patchable` before a write), its `SiteTree`, and the ledger's view of each file the
overlay touched (`file_states`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ddtree_overlay.engine.envprobe import EnvInfo, SglangInstall
from ddtree_overlay.engine.errors import (
    EditableInstall,
    ReadOnlyEnv,
    SglangNotInstalled,
    SymlinkedTarget,
    UnsafePath,
)
from ddtree_overlay.engine.files import sha256_of
from ddtree_overlay.engine.ledger import Ledger


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
            raise UnsafePath(
                f"refusing to write outside the distribution's tree: `{relative}`",
                hint=f"targets must lie under {', '.join(sorted(self.top_levels))}/",
            )
        current = self.root
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise SymlinkedTarget(
                    f"refusing to modify `{relative}` through a symlink: `{current}`",
                    hint="replace the symlink with a real copy of the file, then run again",
                )
        return current


def require_sglang(env: EnvInfo) -> SglangInstall:
    if env.sglang is None:
        raise SglangNotInstalled(
            f"sglang is not installed in `{env.requested}` (python {env.python_version})",
            hint=f"`{env.python} -m pip install sglang==VERSION`, or pass the env that has it",
        )
    return env.sglang


def require_patchable(env: EnvInfo) -> SglangInstall:
    """Refuse envs whose files we must not edit, before anything is planned."""
    sglang = require_sglang(env)
    if sglang.install_kind == "editable":
        where = sglang.editable_checkout or sglang.origin or "an unknown checkout"
        raise EditableInstall(
            f"sglang in `{env.requested}` is an editable install of the checkout at `{where}`",
            hint="patch the checkout with git instead, or install a released wheel into the env",
        )
    if not env.is_venv and env.externally_managed:
        raise ReadOnlyEnv(
            f"`{env.prefix}` is externally managed (PEP 668); refusing to edit it",
            hint="create a virtualenv, install sglang there, and pass it to --env",
        )
    if sglang.location is None or not _is_within(sglang.location, sglang.site_packages):
        raise EditableInstall(
            f"`import sglang` in `{env.requested}` resolves to `{sglang.origin}`, outside "
            f"`{sglang.site_packages}` where its metadata lives",
            hint="remove the other copy from sys.path (PYTHONPATH, .pth files, user site)",
        )
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


def _is_within(path: Path, parent: Path) -> bool:
    return path.resolve().is_relative_to(parent.resolve())
