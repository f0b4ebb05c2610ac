"""A patch set: one `manifests/<release>.toml`, loaded and checked before anything runs.

Paths inside a manifest are relative to its data root (the directory above `manifests/`);
targets are relative to the site-packages directory that holds the distribution.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.compat import tomllib
from ddtree_overlay.engine.datadir import bundled_manifests
from ddtree_overlay.engine.hunks import FileDiff, PatchParseError, parse_patch

_SHA256 = re.compile(r"[0-9a-f]{64}")
_TABLES = {"patchset", "patch", "new_file", "file"}
_PATCHSET_KEYS = {"id", "distribution", "versions", "why", "upstream", "drop_when"}
_PATCH_KEYS = {"path", "why", "upstream", "drop_when"}
_NEW_FILE_KEYS = {"source", "target", "why"}
_FILE_KEYS = {"path", "pre_sha256", "post_sha256"}


@dataclass(frozen=True)
class Provenance:
    why: str
    upstream: str | None
    drop_when: str | None


@dataclass(frozen=True)
class PatchEntry:
    path: str
    provenance: Provenance
    diffs: tuple[FileDiff, ...]
    targets: tuple[str, ...]
    content: bytes


@dataclass(frozen=True)
class NewFile:
    source: str
    target: str
    content: bytes


@dataclass(frozen=True)
class FileExpectation:
    path: str
    pre_sha256: str | None
    post_sha256: str


@dataclass(frozen=True)
class PatchSet:
    id: str
    distribution: str
    versions: SpecifierSet
    provenance: Provenance
    patches: tuple[PatchEntry, ...]
    new_files: tuple[NewFile, ...]
    files: tuple[FileExpectation, ...]
    manifest_path: Path
    content_sha256: str

    def touched_paths(self) -> tuple[str, ...]:
        """Every target, in series order, each once."""
        ordered = [t for patch in self.patches for t in patch.targets]
        ordered += [new_file.target for new_file in self.new_files]
        return tuple(dict.fromkeys(ordered))

    @property
    def release(self) -> str:
        """The release the manifest pins with `==`, or its version specifier when it pins none."""
        pinned = [spec.version for spec in self.versions if spec.operator == "=="]
        return pinned[0] if pinned else str(self.versions)

    def expectation(self, path: str) -> FileExpectation:
        return next(entry for entry in self.files if entry.path == path)


@cache
def bundled_patch_sets() -> tuple[PatchSet, ...]:
    """Every bundled manifest, loaded once per process: they ship with the tool, and nothing
    the tool does changes them under it."""
    return tuple(load_patch_set(path) for path in bundled_manifests())


def safe_relative_path(raw: str, *, what: str) -> str:
    """A normalised POSIX path that cannot leave the directory it is relative to."""
    if not raw or raw.startswith(('"', "/")) or "\\" in raw or "\0" in raw:
        raise errors.unsafe_manifest_path(what, raw, "use a plain relative path")
    parts = PurePosixPath(raw).parts
    if any(part in ("..", ".") for part in parts) or raw.endswith("/"):
        raise errors.unsafe_manifest_path(what, raw, "paths may not contain `..` or `.`")
    return str(PurePosixPath(*parts))


def load_patch_set(manifest_path: Path, *, require_file_table: bool = True) -> PatchSet:
    """Parse, interpret and check a manifest; raises `BadPatchSet` / `UnsafePath`."""
    raw_manifest = _read(manifest_path, what="manifest")
    try:
        manifest = tomllib.loads(raw_manifest.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise errors.manifest_invalid(manifest_path, str(error)) from error
    _check_keys(manifest, _TABLES, where=f"`{manifest_path}`")
    root = manifest_path.resolve().parent.parent
    header = _table(manifest, "patchset", manifest_path)
    _check_keys(header, _PATCHSET_KEYS, where=f"`{manifest_path}` [patchset]")
    patches = tuple(
        _patch_entry(entry, root, f"`{manifest_path}` [[patch]] #{n}")
        for n, entry in enumerate(_array(manifest, "patch", manifest_path), 1)
    )
    new_files = tuple(
        _new_file(entry, root, f"`{manifest_path}` [[new_file]] #{n}")
        for n, entry in enumerate(_array(manifest, "new_file", manifest_path), 1)
    )
    files = tuple(
        _file_expectation(entry, f"`{manifest_path}` [[file]] #{n}")
        for n, entry in enumerate(_array(manifest, "file", manifest_path), 1)
    )
    patch_set = PatchSet(
        id=_string(header, "id", f"`{manifest_path}` [patchset]"),
        distribution=_string(header, "distribution", f"`{manifest_path}` [patchset]"),
        versions=_specifiers(header, manifest_path),
        provenance=_provenance(header, f"`{manifest_path}` [patchset]"),
        patches=patches,
        new_files=new_files,
        files=files,
        manifest_path=manifest_path,
        content_sha256=_content_sha256(raw_manifest, patches, new_files),
    )
    _check_targets_unique(patch_set)
    if require_file_table:
        _check_file_table(patch_set)
    return patch_set


def _read(path: Path, *, what: str) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise errors.file_unreadable(what, path)
    try:
        return path.read_bytes()
    except OSError as error:
        raise errors.file_unreadable(what, path) from error


def _read_inside(root: Path, relative: str, *, what: str) -> bytes:
    """A file of the patch set's data root, reached without a symlink (a linked directory could
    lead anywhere, whatever the path says)."""
    current = root
    for part in PurePosixPath(relative).parts:
        current = current / part
        if current.is_symlink():
            raise errors.unsafe_manifest_path(what, relative, f"`{current}` is a symlink")
    return _read(current, what=what)


def _check_keys(table: Mapping[str, Any], allowed: set[str], *, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise errors.patch_set_invalid(where, f"unknown keys {', '.join(unknown)}")


def _table(manifest: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any]:
    table = manifest.get(name)
    if not isinstance(table, dict):
        raise errors.manifest_invalid(path, f"no [{name}] table")
    return table


def _array(manifest: Mapping[str, Any], name: str, path: Path) -> list[Mapping[str, Any]]:
    entries = manifest.get(name, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise errors.manifest_invalid(path, f"`{name}` must be an array of tables [[{name}]]")
    return entries


def _string(table: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> str:
    value = table.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value:
        raise errors.patch_set_invalid(where, f"`{key}` must be a non-empty string")
    return value


def _specifiers(header: Mapping[str, Any], path: Path) -> SpecifierSet:
    text = _string(header, "versions", f"`{path}` [patchset]")
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as error:
        raise errors.manifest_invalid(path, f"versions `{text}` is not a version specifier") from error


def _provenance(table: Mapping[str, Any], where: str) -> Provenance:
    return Provenance(
        why=_string(table, "why", where),
        upstream=_string(table, "upstream", where, optional=True) or None,
        drop_when=_string(table, "drop_when", where, optional=True) or None,
    )


def _patch_entry(entry: Mapping[str, Any], root: Path, where: str) -> PatchEntry:
    _check_keys(entry, _PATCH_KEYS, where=where)
    path = safe_relative_path(_string(entry, "path", where), what="patch")
    content = _read_inside(root, path, what="patch file")
    try:
        diffs = parse_patch(content)
    except PatchParseError as error:
        line = f" near line {error.line}" if error.line else ""
        raise errors.patch_invalid(path, f"{error}{line}") from error
    targets = tuple(_diff_target(diff, path) for diff in diffs)
    if len(set(targets)) != len(targets):
        raise errors.patch_invalid(path, "it changes the same file twice; merge those sections")
    return PatchEntry(path, _provenance(entry, where), diffs, targets, content)


def _diff_target(diff: FileDiff, patch_path: str) -> str:
    what = f"patch `{patch_path}`"
    if diff.is_binary:
        raise errors.patch_invalid(patch_path, f"binary change not representable: `{diff.target_path}`")
    if diff.is_added or diff.is_removed or diff.is_rename or diff.mode_change:
        raise errors.patch_invalid(
            patch_path,
            f"it adds, removes, renames or re-modes `{diff.target_path}`",
            hint="ship whole new files as [[new_file]] entries; patches only modify files",
        )
    if not diff.hunks:
        raise errors.patch_invalid(patch_path, f"no hunks for `{diff.target_path}`")
    source, target = (_strip_prefix(p, what) for p in (diff.source_path, diff.target_path))
    if source != target:
        raise errors.patch_invalid(patch_path, f"source `{source}` and target `{target}` differ")
    return target


def _strip_prefix(raw: str, what: str) -> str:
    path = safe_relative_path(raw, what=f"{what} target")
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or parts[0] not in ("a", "b"):
        raise errors.patch_set_invalid(what, f"expected `a/...` and `b/...` paths, got `{raw}`")
    return str(PurePosixPath(*parts[1:]))


def _new_file(entry: Mapping[str, Any], root: Path, where: str) -> NewFile:
    _check_keys(entry, _NEW_FILE_KEYS, where=where)
    source = safe_relative_path(_string(entry, "source", where), what="new_file source")
    target = safe_relative_path(_string(entry, "target", where), what="new_file target")
    return NewFile(source, target, _read_inside(root, source, what="overlay file"))


def _file_expectation(entry: Mapping[str, Any], where: str) -> FileExpectation:
    _check_keys(entry, _FILE_KEYS, where=where)
    path = safe_relative_path(_string(entry, "path", where), what="file")
    pre = entry.get("pre_sha256", "") or None
    post = entry.get("post_sha256")
    for value in (pre, post):
        if value is not None and (not isinstance(value, str) or not _SHA256.fullmatch(value)):
            raise errors.patch_set_invalid(where, f"`{value}` is not a lowercase sha256 hex digest")
    if post is None:
        raise errors.patch_set_invalid(where, "`post_sha256` is required")
    return FileExpectation(path, pre, post)


def _content_sha256(
    manifest: bytes, patches: tuple[PatchEntry, ...], new_files: tuple[NewFile, ...]
) -> str:
    digest = hashlib.sha256(manifest)
    for patch in patches:
        digest.update(patch.path.encode() + b"\0" + patch.content)
    for new_file in new_files:
        digest.update(new_file.target.encode() + b"\0" + new_file.content)
    return digest.hexdigest()


def _check_targets_unique(patch_set: PatchSet) -> None:
    patched = {t for patch in patch_set.patches for t in patch.targets}
    created = [new_file.target for new_file in patch_set.new_files]
    clashes = sorted(patched & set(created)) + sorted({t for t in created if created.count(t) > 1})
    if clashes:
        raise errors.manifest_invalid(patch_set.manifest_path, f"patch set `{patch_set.id}` both creates and patches: {clashes}")
    if not patch_set.touched_paths():
        raise errors.manifest_invalid(patch_set.manifest_path, f"patch set `{patch_set.id}` changes nothing")


def _check_file_table(patch_set: PatchSet) -> None:
    listed = [entry.path for entry in patch_set.files]
    touched = set(patch_set.touched_paths())
    created = {new_file.target for new_file in patch_set.new_files}
    problems = [f"listed twice: `{p}`" for p in sorted({p for p in listed if listed.count(p) > 1})]
    problems += [f"touched but not listed: `{p}`" for p in sorted(touched - set(listed))]
    problems += [f"listed but not touched: `{p}`" for p in sorted(set(listed) - touched)]
    for entry in patch_set.files:
        if (entry.pre_sha256 is None) != (entry.path in created):
            problems.append(f"`{entry.path}`: pre_sha256 must be empty exactly for new files")
    if problems:
        raise errors.file_table_stale(patch_set.manifest_path, patch_set.release, problems)
