"""Names that moved into the standard library after Python 3.10."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from typing import assert_never

    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib
    from typing_extensions import assert_never

__all__ = ["assert_never", "tomllib"]
