"""Bytes on disk: their sha256, and writes that leave a file old or new, never torn."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of(path: Path) -> str | None:
    """The file's sha256, or None when it does not exist."""
    if not path.exists():
        return None
    return sha256_hex(path.read_bytes())


def write_json_durably(path: Path, payload: Mapping[str, Any]) -> None:
    write_bytes_durably(path, (json.dumps(payload, sort_keys=True, indent=2) + "\n").encode())


def write_bytes_durably(path: Path, data: bytes) -> None:
    """Temp file, fsync, rename, fsync the directory: the file is old or new, never torn."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)


def remove_durably(path: Path) -> None:
    if path.exists():
        path.unlink()
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
