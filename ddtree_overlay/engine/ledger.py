"""State kept outside site-packages, one directory per env: ledger, journal, backups.

    <state dir>/envs/<sha256(real site-packages path)[:16]>/
        ledger.json      what is applied now (absent when pristine); "ledger_version": 1
        journal.json     present only while a transaction is in flight or was interrupted
        blobs/<sha256>   content-addressed backups of every pre- and post-image
        saved-edits/     user edits that `rollback --force` set aside
        lock.owner       names the run that holds the env's lock (`envlock`)

None of it is needed to go back: without a ledger the state is rebuilt from the env's files and
the patch set (`images`); a ledger or journal that does not parse is set aside, never trusted.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import platformdirs

from ddtree_overlay.engine import errors, settings
from ddtree_overlay.engine.files import (
    remove_durably,
    remove_stray_temp_files,
    sha256_hex,
    write_bytes_durably,
    write_json_durably,
)
from ddtree_overlay.engine.settings import STATE_DIR_ENV  # noqa: F401 - where the state dir is set

LEDGER_VERSION = 1
JOURNAL_VERSION = 1


class Unreadable(ValueError):
    """A state file that does not parse or has the wrong shape (`site` turns it into an error
    naming the env, or sets the file aside)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


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
        """Raises TypeError, KeyError or ValueError on a wrong shape (`shaped` reports them)."""
        fields = {key: value for key, value in raw.items() if key != "ledger_version"}
        files = tuple(LedgerFile(**entry) for entry in fields.pop("files"))
        ledger = cls(files=files, new_dirs=tuple(fields.pop("new_dirs")), **fields)
        strings = (ledger.patch_set_id, ledger.version, ledger.site_packages, *ledger.new_dirs)
        entries_ok = all(
            isinstance(f.path, str) and isinstance(f.post_sha256, str) and isinstance(f.mode, int)
            and (f.pre_sha256 is None or isinstance(f.pre_sha256, str))
            for f in ledger.files
        )
        if not all(isinstance(text, str) for text in strings) or not entries_ok:
            raise ValueError("a field has the wrong type")
        return ledger


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

    def remove_stray_temp_files(self) -> None:
        """Temp files a killed run left here (the caller holds the env's lock)."""
        for directory in (self.root, self.blobs_dir):
            remove_stray_temp_files(directory)
        if self.saved_edits_dir.is_dir():
            for directory in self.saved_edits_dir.rglob("*"):
                remove_stray_temp_files(directory)


def state_home() -> Path:
    return settings.state_dir_override() or Path(platformdirs.user_state_dir("ddtree-overlay"))


def env_state(site_packages: Path) -> EnvState:
    key = sha256_hex(str(site_packages.resolve()).encode())[:16]
    return EnvState(state_home() / "envs" / key)


def read_ledger(state: EnvState) -> Ledger | None:
    """The ledger, None when there is none; raises `Unreadable`, or `state_version_unknown`."""
    raw = _read_versioned(state.ledger_path, "ledger_version", LEDGER_VERSION)
    return None if raw is None else shaped(state.ledger_path, Ledger.from_json, raw)


def write_ledger(state: EnvState, ledger: Ledger | None) -> None:
    if ledger is None:
        remove_durably(state.ledger_path)
    else:
        write_json_durably(state.ledger_path, ledger.to_json())


def read_journal(state: EnvState) -> Mapping[str, Any] | None:
    return _read_versioned(state.journal_path, "journal_version", JOURNAL_VERSION)


def shaped(path: Path, build: Any, raw: Mapping[str, Any]) -> Any:
    """``build(raw)``, with a wrong shape reported as `Unreadable` for ``path``."""
    try:
        return build(raw)
    except (TypeError, KeyError, ValueError, AttributeError) as error:
        raise Unreadable(path, f"wrong shape ({type(error).__name__}: {error})") from error


def set_aside(path: Path) -> Path:
    """Rename an unreadable state file out of the way, keeping it for a post-mortem."""
    aside = path.with_name(f"{path.name}.unreadable-{now_utc().replace(':', '')}-{os.getpid()}")
    os.replace(path, aside)
    return aside


def store_blob(state: EnvState, data: bytes) -> str:
    digest = sha256_hex(data)
    path = state.blobs_dir / digest
    if not _blob_intact(path, digest):
        write_bytes_durably(path, data)
    return digest


def find_blob(state: EnvState, digest: str) -> bytes | None:
    """The backup with this sha256, if it is there and intact."""
    path = state.blobs_dir / digest
    return path.read_bytes() if _blob_intact(path, digest) else None


def read_blob(state: EnvState, digest: str, *, reinstall: str) -> bytes:
    """The backup with this sha256; ``reinstall`` is the command the hint offers when it is gone."""
    data = find_blob(state, digest)
    if data is None:
        raise errors.backup_unreadable(state.blobs_dir / digest, reinstall)
    return data


def _blob_intact(path: Path, digest: str) -> bool:
    return path.is_file() and not path.is_symlink() and sha256_hex(path.read_bytes()) == digest


def _read_versioned(path: Path, key: str, known: int) -> Mapping[str, Any] | None:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise Unreadable(path, str(error)) from error
    if not isinstance(raw, dict):
        raise Unreadable(path, f"expected a JSON object, found {type(raw).__name__}")
    if raw.get(key) != known:
        if isinstance(raw.get(key), int) and raw[key] > known:
            raise errors.state_version_unknown(path, key, raw.get(key), known)
        raise Unreadable(path, f"{key} is {raw.get(key)!r}, not {known}")
    return raw


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

