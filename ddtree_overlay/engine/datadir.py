"""Where the patch sets live: inside the wheel, or at the repo root in a checkout."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def data_root() -> Path:
    """The directory holding `manifests/`, `patches/` and `overlay/`."""
    bundled = _PACKAGE_DIR / "_data"
    if (bundled / "manifests").is_dir():
        return bundled
    return _PACKAGE_DIR.parent


def bundled_manifests() -> tuple[Path, ...]:
    return tuple(sorted((data_root() / "manifests").glob("*.toml")))


def bundled_releases() -> tuple[str, ...]:
    """The releases the bundled manifests are for (`manifests/<release>.toml`), oldest first."""
    return tuple(sorted((path.stem for path in bundled_manifests()), key=Version))
