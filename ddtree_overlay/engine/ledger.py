"""State kept outside site-packages, one directory per env: ledger, journal, backups, lock.

    <state dir>/envs/<sha256(real site-packages path)[:16]>/
        ledger.json      what is applied now (absent when pristine); "ledger_version": 1
        journal.json     present only while a transaction is in flight or was interrupted
        blobs/<sha256>   content-addressed backups of every pre- and post-image
        saved-edits/     user edits that `rollback --force` set aside
        lock, lock.owner one writer per env; the owner file names the holder for the error
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import platformdirs

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.files import (
    remove_durably,
    sha256_hex,
    write_bytes_durably,
    write_json_durably,
)

STATE_DIR_ENV = "DDTREE_OVERLAY_STATE_DIR"
LOCK_TIMEOUT_ENV = "DDTREE_OVERLAY_LOCK_TIMEOUT"
LEDGER_VERSION = 1
JOURNAL_VERSION = 1


@dataclass(frozen=True)
class LedgerFile:
    path: str
    pre_sha256: str | None
    post_sha256: str
    mode: int


@dataclass(frozen=True)
class Ledger:
    patch_set_id: str
    patch_set_sha256: str
    distribution: str
    version: str
    record_sha256: str | None
    site_packages: str
    applied_at: str
    files: tuple[LedgerFile, ...]
    new_dirs: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"ledger_version": LEDGER_VERSION} | asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Ledger:
        fields = {key: value for key, value in raw.items() if key != "ledger_version"}
        files = tuple(LedgerFile(**entry) for entry in fields.pop("files"))
        return cls(files=files, new_dirs=tuple(fields.pop("new_dirs")), **fields)


@dataclass(frozen=True)
class EnvState:
    root: Path

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger.json"

    @property
    def journal_path(self) -> Path:
        return self.root / "journal.json"

    @property
    def blobs_dir(self) -> Path:
        return self.root / "blobs"

    @property
    def saved_edits_dir(self) -> Path:
        return self.root / "saved-edits"


def state_home() -> Path:
    override = os.environ.get(STATE_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_state_dir("ddtree-overlay"))


def env_state(site_packages: Path) -> EnvState:
    key = sha256_hex(str(site_packages.resolve()).encode())[:16]
    return EnvState(state_home() / "envs" / key)


@contextmanager
def locked(state: EnvState, command: str) -> Iterator[None]:
    """One writer per env. A second run waits a little, then names the holder."""
    from filelock import FileLock, Timeout  # here: importing filelock costs the read-only verbs ~0.1 s

    state.root.mkdir(parents=True, exist_ok=True)
    timeout = float(os.environ.get(LOCK_TIMEOUT_ENV, "10"))
    lock = FileLock(state.root / "lock", timeout=timeout)
    owner = state.root / "lock.owner"
    try:
        lock.acquire()
    except Timeout as error:
        holder = owner.read_text().strip() if owner.exists() else "unknown process"
        raise errors.env_locked(holder, state.root / "lock") from error
    try:
        owner.write_text(f"pid {os.getpid()} running `{command}` since {now_utc()}\n")
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def read_ledger(state: EnvState) -> Ledger | None:
    raw = _read_versioned(state.ledger_path, "ledger_version", LEDGER_VERSION)
    return None if raw is None else Ledger.from_json(raw)


def write_ledger(state: EnvState, ledger: Ledger | None) -> None:
    if ledger is None:
        remove_durably(state.ledger_path)
    else:
        write_json_durably(state.ledger_path, ledger.to_json())


def read_journal(state: EnvState) -> Mapping[str, Any] | None:
    return _read_versioned(state.journal_path, "journal_version", JOURNAL_VERSION)


def store_blob(state: EnvState, data: bytes) -> str:
    digest = sha256_hex(data)
    path = state.blobs_dir / digest
    if not path.exists():
        write_bytes_durably(path, data)
    return digest


def read_blob(state: EnvState, digest: str, *, reinstall: str) -> bytes:
    """The backup with this sha256; ``reinstall`` is the command the hint offers when it is gone."""
    path = state.blobs_dir / digest
    data = path.read_bytes() if path.is_file() else None
    if data is None or sha256_hex(data) != digest:
        raise errors.backup_unreadable(path, reinstall)
    return data


def _read_versioned(path: Path, key: str, known: int) -> Mapping[str, Any] | None:
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise errors.state_unreadable(path, str(error)) from error
    if raw.get(key) != known:
        raise errors.state_version_unknown(path, key, raw.get(key), known)
    return raw


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
