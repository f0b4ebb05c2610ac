"""Bytes on disk: their sha256, and writes that leave a file old or new, never torn.

Every write goes to a new temp file beside its target (`O_EXCL | O_NOFOLLOW`), is written in
full (a short write is continued, an error raised), fsynced, renamed over the target and the
directory fsynced. A failed write removes its temp file before the error goes on, so nothing is
ever truncated in place and no temp file outlives its write but by a crash (`remove_stray_temp_files`).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddtree_overlay.engine import faults

TEMP_SUFFIX = ".ddtree-tmp"
NEW_FILE_MODE = 0o644


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of(path: Path) -> str | None:
    """The file's sha256, or None when it does not exist."""
    if not path.exists():
        return None
    return sha256_hex(path.read_bytes())


def mode_of(path: Path) -> int:
    """The permission bits a rewrite of ``path`` keeps, or `NEW_FILE_MODE` for a new file."""
    return path.stat().st_mode & 0o7777 if path.is_file() else NEW_FILE_MODE


def temp_path(path: Path, tag: str) -> Path:
    """The temp file a write of ``path`` goes through; ``tag`` names the writer (pid, txid)."""
    return path.with_name(f".{path.name}.{tag}{TEMP_SUFFIX}")


def write_file_durably(
    path: Path,
    data: bytes,
    *,
    tag: str,
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
    steps: str = "",
) -> None:
    """Temp file, fsync, rename, fsync the directory: ``path`` is old or new, never torn.

    The rename replaces the directory entry, so a hardlinked copy elsewhere (uv, conda caches)
    keeps the old bytes, and a symlink at ``path`` is replaced, never written through. ``steps``
    prefixes the names of the fault-injection steps it reaches (`faults`).
    """
    temp = temp_path(path, tag)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            faults.reach(f"{steps}temp-opened")
            write_all(fd, data)
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
            os.fsync(fd)
        finally:
            os.close(fd)
        faults.reach(f"{steps}temp-written")
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """`os.write` until every byte is written: a short write (a full disk, a file size limit) is
    continued, and the write that cannot go on raises its `OSError`."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"wrote {written} bytes")
        view = view[written:]


def write_bytes_durably(path: Path, data: bytes) -> None:
    """A state file (ledger, journal, blob): `write_file_durably` into a directory made as needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_durably(path, data, tag=f"{os.getpid()}-{secrets.token_hex(4)}", steps="state-")


def write_json_durably(path: Path, payload: Mapping[str, Any]) -> None:
    write_bytes_durably(path, (json.dumps(payload, sort_keys=True, indent=2) + "\n").encode())


def remove_durably(path: Path) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stray_temp_files(directory: Path) -> list[Path]:
    """Temp files a killed writer left in ``directory`` (not below it); the caller holds the lock."""
    if directory.is_symlink() or not directory.is_dir():
        return []
    strays = [path for path in directory.glob(f".*{TEMP_SUFFIX}") if not path.is_dir()]
    for stray in strays:
        stray.unlink(missing_ok=True)
    return strays
