"""Plan an apply entirely in memory: read, check pre-images, patch, check post-images.

The plan brings every file the patch set touches to its post-image from where it is: a
pre-image is patched; a post-image is kept (its pre-image rebuilt from the patch set, so the
ledger and backups are whole: a crash plus a lost state dir, a reinstall that left the added
files); an added file that holds another patch set's version of itself is replaced; files the
previous overlay added and this patch set does not are removed. Anything else is drift.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.files import mode_of, sha256_hex
from ddtree_overlay.engine.hunks import HunkOutcome, apply_hunks
from ddtree_overlay.engine.images import FileState, rebuild_pre_image
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.site import SiteTree


@dataclass(frozen=True)
class PlannedFile:
    path: str
    kind: str  # "modified", "added", "kept" (holds its post-image), "replaced", "removed"
    current: bytes | None
    pre: bytes | None  # the pre-image; None for a file the overlay adds
    after: bytes | None  # None: removed
    mode: int
    hunks: tuple[HunkOutcome, ...]


@dataclass(frozen=True)
class ApplyPlan:
    patch_set: PatchSet
    files: tuple[PlannedFile, ...]
    new_dirs: tuple[str, ...]


@dataclass(frozen=True)
class PostImages:
    images: Mapping[str, bytes]
    hunks: Mapping[str, tuple[HunkOutcome, ...]]
    failed: tuple[str, ...]


def compute_post_images(patch_set: PatchSet, originals: Mapping[str, bytes | None]) -> PostImages:
    """Run the series over `originals`; a file whose hunks fail keeps no post-image."""
    images: dict[str, bytes] = {}
    hunks: dict[str, tuple[HunkOutcome, ...]] = {}
    failed: list[str] = []
    current = dict(originals)
    for patch in patch_set.patches:
        for diff, target in zip(patch.diffs, patch.targets, strict=True):
            before = current.get(target)
            if before is None:
                failed.append(target)
                continue
            outcome = apply_hunks(before, diff.hunks)
            hunks[target] = hunks.get(target, ()) + outcome.hunks
            if outcome.after is None:
                failed.append(target)
                current[target] = None
            else:
                current[target] = images[target] = outcome.after
    for new_file in patch_set.new_files:
        images[new_file.target] = new_file.content
    return PostImages(images, hunks, tuple(dict.fromkeys(failed)))


def read_originals(paths: Iterable[str], tree: SiteTree) -> dict[str, bytes | None]:
    originals: dict[str, bytes | None] = {}
    for path in paths:
        real = tree.checked(path)
        if real.exists() and not real.is_file():
            raise errors.not_a_regular_file(real)
        originals[path] = real.read_bytes() if real.exists() else None
    return originals


def plan_apply(
    patch_set: PatchSet,
    tree: SiteTree,
    *,
    env: Path,
    is_foreign: Callable[[str, str | None], bool] = lambda path, sha256: False,
    leftovers: Iterable[FileState] = (),
) -> ApplyPlan:
    """``env`` is the env as the user named it, for the hints of the errors; ``is_foreign(path,
    sha256)`` says whether an added file holds another patch set's version of itself (replaced);
    ``leftovers`` are the added files of a previous overlay that this patch set does not add
    (removed)."""
    currents = read_originals(patch_set.touched_paths(), tree)
    pre_images: dict[str, bytes | None] = {}
    kinds: dict[str, str] = {}
    for path, current in currents.items():
        kind, pre = _starting_point(patch_set, path, current, is_foreign)
        if kind != "drifted":
            pre_images[path], kinds[path] = pre, kind
    drifted = [path for path in currents if path not in kinds]
    if drifted:
        on_current = compute_post_images(patch_set, currents)
        raise errors.pre_images_differ(
            env,
            patch_set.id,
            [_drift_report(patch_set, path, currents[path], on_current) for path in drifted],
            drifted,
        )
    result = compute_post_images(patch_set, pre_images)
    _check_against_manifest(patch_set, result)
    files = [
        PlannedFile(
            path=path,
            kind=kinds[path],
            current=currents[path],
            pre=pre_images[path],
            after=result.images[path],
            mode=mode_of(tree.path(path)),
            hunks=result.hunks.get(path, ()),
        )
        for path in patch_set.touched_paths()
    ]
    removed = read_originals((file.path for file in leftovers), tree)
    files += [
        PlannedFile(path, "removed", current, None, None, mode_of(tree.path(path)), ())
        for path, current in removed.items()
        if current is not None
    ]
    return ApplyPlan(patch_set, tuple(files), _missing_dirs(patch_set, tree))


def _starting_point(
    patch_set: PatchSet, path: str, current: bytes | None, is_foreign: Callable[[str, str | None], bool]
) -> tuple[str, bytes | None]:
    """(kind, pre-image) for a file holding ``current``; kind "drifted" when it cannot start."""
    expected = patch_set.expectation(path)
    digest = None if current is None else sha256_hex(current)
    added = expected.pre_sha256 is None
    if digest == expected.pre_sha256:
        return ("added" if added else "modified"), current
    if digest == expected.post_sha256:
        assert current is not None
        pre = None if added else rebuild_pre_image(patch_set, path, current)
        return ("kept", pre) if added or pre is not None else ("drifted", None)
    if added and is_foreign(path, digest):
        return "replaced", None
    return "drifted", None


def _drift_report(patch_set: PatchSet, path: str, current: bytes | None, result: PostImages) -> str:
    expected = patch_set.expectation(path).pre_sha256
    found = "absent" if current is None else sha256_hex(current)
    lines = [f"{path}: expected sha256 {expected or 'absent'}, found {found}"]
    lines += [f"  {outcome.describe()}" for outcome in result.hunks.get(path, ())]
    return "\n".join(lines)


def _check_against_manifest(patch_set: PatchSet, result: PostImages) -> None:
    problems = [f"{path}: hunks do not apply to the recorded pre-image" for path in result.failed]
    problems += [
        f"{entry.path}: the patch set produces sha256 {sha256_hex(result.images[entry.path])}, "
        f"the manifest records {entry.post_sha256}"
        for entry in patch_set.files
        if entry.path in result.images and sha256_hex(result.images[entry.path]) != entry.post_sha256
    ]
    if problems:
        raise errors.manifest_disagrees(patch_set.id, patch_set.manifest_path, patch_set.release, problems)


def _missing_dirs(patch_set: PatchSet, tree: SiteTree) -> tuple[str, ...]:
    missing: list[str] = []
    for new_file in patch_set.new_files:
        for parent in reversed(PurePosixPath(new_file.target).parents[:-1]):
            if not tree.path(str(parent)).exists() and str(parent) not in missing:
                missing.append(str(parent))
    return tuple(missing)
