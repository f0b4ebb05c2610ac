"""The installed release as pip recorded it, and how it compares with what a ledger recorded.

A file whose bytes match the installed RECORD is that release's own, whatever a ledger says:
after an upgrade (or a reinstall) over an applied env this is how the verbs tell the installed
release's files, which they leave alone, from the overlay's, which they remove or restore.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass

from ddtree_overlay.engine.envprobe import SglangInstall


def record_hashes(sglang: SglangInstall) -> Mapping[str, str]:
    """sha256 (hex) per path relative to site-packages, for every RECORD row that has one."""
    try:
        text = (sglang.dist_info / "RECORD").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    hashes: dict[str, str] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 2 or not row[1].startswith("sha256="):
            continue
        encoded = row[1].removeprefix("sha256=")
        try:
            hashes[row[0]] = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()
        except (binascii.Error, ValueError):
            continue
    return hashes


@dataclass(frozen=True)
class ReleaseChange:
    """The installed sglang is not the build the overlay was applied to."""

    applied_version: str
    installed_version: str

    def describe(self) -> str:
        if self.applied_version == self.installed_version:
            return f"sglang {self.installed_version} was reinstalled from another build since the overlay was applied"
        return f"sglang {self.applied_version} was replaced by {self.installed_version} since the overlay was applied"


def release_change(
    applied_version: str,
    applied_record_sha256: str | None,
    pre_images: Mapping[str, str],
    sglang: SglangInstall,
    record: Mapping[str, str],
) -> ReleaseChange | None:
    """None when the installed sglang is the build the overlay was applied to: the same version,
    and RECORD hashing every patched file to the pre-image it had then (``pre_images``). A
    reinstall of the same wheel passes, though its RECORD text may differ (`direct_url.json`);
    without RECORD hashes, the RECORD text itself is compared."""
    same = applied_version == sglang.version and (
        all(record.get(path) == sha256 for path, sha256 in pre_images.items())
        if record
        else applied_record_sha256 == sglang.record.sha256
    )
    return None if same else ReleaseChange(applied_version, sglang.version)
