"""Which image each file the overlay touches holds, and every pre-image, from the files alone.

A manifest pins the pre- and post-image sha256 of every file its patch set touches, and the
patches turn a post-image back into its pre-image (their hunks reversed, fuzz 0, the result
checked against the pinned hash). So the patch set alone, without a ledger or backups, says
whether an env is pristine, applied, partly applied or edited, and gives back what was there.
The installed RECORD adds one more fact: a file pip wrote for the installed release is that
release's own (`stock`), whatever the ledger says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.files import mode_of, sha256_hex, sha256_of
from ddtree_overlay.engine.hunks import revert_hunks
from ddtree_overlay.engine.ledger import Ledger, LedgerFile
from ddtree_overlay.engine.patchset import PatchSet, bundled_patch_sets
from ddtree_overlay.engine.record import ReleaseChange

REBUILT = "unknown (rebuilt from the env's files)"


@dataclass(frozen=True)
class FileState:
    """One file the overlay touches: the images it may hold, and the one it holds now."""

    path: str
    pre_sha256: str | None  # None: the overlay adds the file
    post_sha256: str
    current_sha256: str | None  # None: absent
    mode: int
    stock_sha256: str | None = None  # the installed RECORD's sha256 of this path
    foreign: bool = False  # an added file that holds another patch set's version of it

    @property
    def state(self) -> str:
        """applied, pristine, stock (the installed release's own file), other-release, edited."""
        current = self.current_sha256
        if current == self.post_sha256:
            return "applied"
        if current == self.pre_sha256:
            return "pristine"
        if current is not None and current == self.stock_sha256:
            return "stock"
        return "other-release" if self.foreign else "edited"

    @property
    def added(self) -> bool:
        return self.pre_sha256 is None


def overall_state(files: Iterable[FileState]) -> str:
    kinds = {file.state for file in files}
    if kinds == {"applied"}:
        return "applied"
    if "edited" in kinds:
        return "drifted"
    if kinds <= {"pristine", "stock"}:
        return "pristine"
    return "partial"


@dataclass(frozen=True)
class AppliedOverlay:
    """What is applied to an env: its ledger, or one rebuilt from the patch set's images."""

    ledger: Ledger
    rebuilt: bool
    files: tuple[FileState, ...]
    release_change: ReleaseChange | None

    @property
    def state(self) -> str:
        return overall_state(self.files)


def file_states(
    entries: Iterable[LedgerFile], site_root: Path, record: Mapping[str, str]
) -> tuple[FileState, ...]:
    states = []
    for entry in entries:
        current = sha256_of(site_root / entry.path)
        stock = record.get(entry.path)
        foreign = (
            entry.pre_sha256 is None
            and current not in (None, entry.post_sha256, stock)
            and current in overlay_images().get(entry.path, frozenset())
        )
        states.append(
            FileState(entry.path, entry.pre_sha256, entry.post_sha256, current, entry.mode, stock, foreign)
        )
    return tuple(states)


def ledger_of(patch_set: PatchSet, *, version: str, record_sha256: str | None, site_root: Path,
              record: Mapping[str, str], applied_at: str = REBUILT) -> Ledger:
    """The ledger an apply of ``patch_set`` to this install writes (the modes as they are now)."""
    files = tuple(
        LedgerFile(entry.path, entry.pre_sha256, entry.post_sha256, mode_of(site_root / entry.path))
        for entry in (patch_set.expectation(path) for path in patch_set.touched_paths())
    )
    return Ledger(
        patch_set_id=patch_set.id,
        patch_set_sha256=patch_set.content_sha256,
        distribution=patch_set.distribution,
        version=version,
        record_sha256=record_sha256,
        site_packages=str(site_root),
        applied_at=applied_at,
        files=files,
        new_dirs=_dirs_not_in_record(patch_set, record),
    )


def rebuild_pre_image(patch_set: PatchSet, path: str, post: bytes) -> bytes | None:
    """The pre-image of a patched file, from its post-image and the patch series run backwards;
    None when a hunk does not match or the result is not the manifest's pre-image."""
    image: bytes | None = post
    for patch in reversed(patch_set.patches):
        for diff, target in zip(patch.diffs, patch.targets, strict=True):
            if target == path and image is not None:
                image = revert_hunks(image, diff.hunks)
    expected = patch_set.expectation(path).pre_sha256
    if image is None or expected is None or sha256_hex(image) != expected:
        return None
    return image


@cache
def overlay_images() -> Mapping[str, frozenset[str]]:
    """The post-image sha256s every bundled patch set gives each file it adds."""
    images: dict[str, set[str]] = {}
    try:
        patch_sets = bundled_patch_sets()
    except OverlayError:
        return {}
    for patch_set in patch_sets:
        for entry in patch_set.files:
            if entry.pre_sha256 is None:
                images.setdefault(entry.path, set()).add(entry.post_sha256)
    return {path: frozenset(digests) for path, digests in images.items()}


def _dirs_not_in_record(patch_set: PatchSet, record: Mapping[str, str]) -> tuple[str, ...]:
    """Directories of added files that no file of the installed release lives in: the overlay
    made them, so a rollback removes them once empty."""
    made: list[str] = []
    for new_file in patch_set.new_files:
        for parent in reversed(PurePosixPath(new_file.target).parents[:-1]):
            inside = f"{parent}/"
            if str(parent) not in made and not any(path.startswith(inside) for path in record):
                made.append(str(parent))
    return tuple(made)
