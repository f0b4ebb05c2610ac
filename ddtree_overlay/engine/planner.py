"""Plan an apply entirely in memory: read, check pre-images, patch, check post-images."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.files import sha256_hex
from ddtree_overlay.engine.hunks import HunkOutcome, apply_hunks
from ddtree_overlay.engine.patchset import PatchSet
from ddtree_overlay.engine.site import SiteTree
from ddtree_overlay.engine.transaction import NEW_FILE_MODE


@dataclass(frozen=True)
class PlannedFile:
    path: str
    before: bytes | None
    after: bytes
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
        for diff, target in zip(patch.diffs, patch.targets):
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


def read_originals(patch_set: PatchSet, tree: SiteTree) -> dict[str, bytes | None]:
    originals: dict[str, bytes | None] = {}
    for path in patch_set.touched_paths():
        real = tree.checked(path)
        if real.exists() and not real.is_file():
            raise errors.not_a_regular_file(real)
        originals[path] = real.read_bytes() if real.exists() else None
    return originals


def plan_apply(patch_set: PatchSet, tree: SiteTree, *, env: Path) -> ApplyPlan:
    """``env`` is the env as the user named it, for the hints of the errors."""
    originals = read_originals(patch_set, tree)
    result = compute_post_images(patch_set, originals)
    drifted = [path for path in originals if _pre_image_differs(patch_set, path, originals[path])]
    if drifted:
        raise errors.pre_images_differ(
            env,
            patch_set.id,
            [_drift_report(patch_set, path, originals[path], result) for path in drifted],
            drifted,
        )
    _check_against_manifest(patch_set, result)
    files = tuple(
        PlannedFile(
            path=path,
            before=originals[path],
            after=result.images[path],
            mode=_mode_of(tree.path(path)),
            hunks=result.hunks.get(path, ()),
        )
        for path in patch_set.touched_paths()
    )
    return ApplyPlan(patch_set, files, _missing_dirs(patch_set, tree))


def _pre_image_differs(patch_set: PatchSet, path: str, current: bytes | None) -> bool:
    expected = patch_set.expectation(path).pre_sha256
    return (None if current is None else sha256_hex(current)) != expected


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


def _mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o7777 if path.exists() else NEW_FILE_MODE


def _missing_dirs(patch_set: PatchSet, tree: SiteTree) -> tuple[str, ...]:
    missing: list[str] = []
    for new_file in patch_set.new_files:
        for parent in reversed(PurePosixPath(new_file.target).parents[:-1]):
            if not tree.path(str(parent)).exists() and str(parent) not in missing:
                missing.append(str(parent))
    return tuple(missing)
