"""SGLang releases that have no DDTree patch set, and why (shown when `apply` refuses one)."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

_NO_DFLASH = "it has no DFlash, no speculative-algorithm registry and no plugin hooks"
_V1_ONLY = (
    "it ships only the v1 DFlash worker (no overlap scheduling); the DDTree worker "
    "extends the v2 worker that 0.5.14 introduced"
)

UNSUPPORTED_RELEASES: dict[str, str] = {
    "0.5.10": _NO_DFLASH,
    "0.5.10.post1": _NO_DFLASH,
    "0.5.11": (
        "it has no speculative-algorithm registry (--speculative-algorithm is an argparse "
        "choice list) and only the v1 DFlash worker"
    ),
    "0.5.12": _V1_ONLY,
    "0.5.12.post1": _V1_ONLY,
    "0.5.13": _V1_ONLY,
    "0.5.13.post1": _V1_ONLY,
}


def why_unsupported(version: str) -> str | None:
    """The known reason a release has no patch set, if it is one we have looked at."""
    try:
        public = Version(version).public
    except InvalidVersion:
        return None
    return UNSUPPORTED_RELEASES.get(public)


def version_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")
