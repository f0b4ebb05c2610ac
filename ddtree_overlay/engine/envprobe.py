"""Everything about a target env, read by running that env's own interpreter."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtree_overlay.engine import errors, ledger
from ddtree_overlay.engine.elfdeps import needed_libraries
from ddtree_overlay.engine.target import IN_TARGET, run_script

_PROBE_TIMEOUT_S = 300


@dataclass(frozen=True)
class RecordCheck:
    present: bool
    sha256: str | None = None
    files: int = 0
    modified: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unhashed: int = 0
    top_level: tuple[str, ...] = ()
    hashed: int = 0  # files read and hashed by this probe (the rest kept their cached hash)


@dataclass(frozen=True)
class SglangInstall:
    version: str
    installed_copies: int
    site_packages: Path
    dist_info: Path
    origin: str | None
    location: Path | None
    install_kind: str
    commit: str | None
    editable_checkout: str | None
    record: RecordCheck


@dataclass(frozen=True)
class Component:
    version: str
    location: str | None
    cuda: str | None = None
    cudart: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvInfo:
    requested: Path
    python: Path
    python_version: str
    prefix: Path
    is_venv: bool
    externally_managed: bool
    sglang: SglangInstall | None
    torch: Component | None
    sgl_kernel: Component | None
    driver_cuda: str | None


def resolve_python(env: Path) -> Path:
    """`--env` accepts a venv root or a python executable."""
    if env.is_dir():
        for candidate in (env / "bin" / "python", env / "Scripts" / "python.exe"):
            if candidate.exists():
                return candidate
        raise errors.no_interpreter(env)
    if env.is_file() and os.access(env, os.X_OK):
        return env
    raise errors.env_missing(env)


def probe_env(env: Path, *, record: str = "cached") -> EnvInfo:
    """``record``: "cached" reuses the hash of each RECORD file whose size and times are
    unchanged since the last probe; "full" hashes every file again."""
    python = resolve_python(env)
    raw = _run_probe(python, record)
    try:
        return _env_info(env, python, raw)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        problem = f"missing {error}" if isinstance(error, KeyError) else str(error)
        raise errors.probe_answer_malformed(python, IN_TARGET / "env_probe.py", problem) from error


def _env_info(env: Path, python: Path, raw: Any) -> EnvInfo:
    info = _table(raw, "python")
    return EnvInfo(
        requested=env,
        python=python,
        python_version=_text(info, "version"),
        prefix=_path(info, "prefix"),
        is_venv=_flag(info, "is_venv"),
        externally_managed=_flag(info, "externally_managed"),
        sglang=_sglang(_table(raw, "sglang", optional=True)),
        torch=_component(_table(raw, "torch", optional=True)),
        sgl_kernel=_sgl_kernel(_table(raw, "sgl_kernel", optional=True)),
        driver_cuda=driver_cuda_version(),
    )


def driver_cuda_version() -> str | None:
    """The CUDA version the driver supports, from `nvidia-smi`'s banner, if it exists."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"CUDA Version:\s*([0-9.]+)", done.stdout)
    return found.group(1) if found else None


def _run_probe(python: Path, record: str) -> Any:
    args = ["--record", record, "--hash-cache", ledger.state_home() / "record-hashes"]
    done = run_script(python, "env_probe", args, timeout=_PROBE_TIMEOUT_S)
    if done.malformed:
        raise errors.probe_answer_malformed(python, IN_TARGET / "env_probe.py", done.problem or "")
    if done.problem is not None:
        raise errors.interpreter_unusable(python, f"failed to describe itself: {done.problem}")
    return done.result


# The probe's answer is read as untrusted input: every field is checked for its type here, so a
# wrong answer is one error (`probe_answer_malformed`) and never a traceback further on.


def _table(raw: Any, key: str, *, optional: bool = False) -> Any:
    value = _field(raw, key)
    if (value is None and optional) or isinstance(value, dict):
        return value
    raise TypeError(f"`{key}` is {type(value).__name__}, expected an object")


def _field(raw: Any, key: str) -> Any:
    if not isinstance(raw, dict):
        raise TypeError(f"expected a JSON object, found {type(raw).__name__}")
    return raw[key]


def _typed(raw: Any, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
    value = raw.get(key) if optional else _field(raw, key)
    if (value is None and optional) or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise TypeError(f"`{key}` is {type(value).__name__}")


def _text(raw: Any, key: str) -> str:
    return _typed(raw, key, str)


def _path(raw: Any, key: str, *, optional: bool = False) -> Path | None:
    text = _typed(raw, key, str, optional=optional)
    if text is None or (text == "" and optional):
        return None
    if "\0" in text or not os.path.isabs(text):
        raise ValueError(f"`{key}` is not an absolute path: {text!r}")
    return Path(text)


def _flag(raw: Any, key: str) -> bool:
    return _typed(raw, key, bool)


def _texts(raw: Any, key: str) -> tuple[str, ...]:
    values = _typed(raw, key, list, optional=True) or []
    if not all(isinstance(value, str) for value in values):
        raise TypeError(f"`{key}` holds a non-string")
    return tuple(values)


def _sglang(raw: Mapping[str, Any] | None) -> SglangInstall | None:
    if raw is None:
        return None
    kind, commit, checkout = _install_kind(_typed(raw, "direct_url", dict, optional=True), _texts(raw, "editable_pth"))
    record = _table(raw, "record")
    return SglangInstall(
        version=_text(raw, "version"),
        installed_copies=_typed(raw, "installed_copies", int),
        site_packages=_path(raw, "site_packages"),
        dist_info=_path(raw, "dist_info"),
        origin=_typed(raw, "origin", str, optional=True),
        location=_path(raw, "location", optional=True),
        install_kind=kind,
        commit=commit,
        editable_checkout=checkout,
        record=RecordCheck(
            present=_flag(record, "present"),
            sha256=_typed(record, "sha256", str, optional=True),
            files=_typed(record, "files", int, optional=True) or 0,
            modified=_texts(record, "modified"),
            missing=_texts(record, "missing"),
            unhashed=_typed(record, "unhashed", int, optional=True) or 0,
            top_level=_texts(record, "top_level"),
            hashed=_typed(record, "hashed", int, optional=True) or 0,
        ),
    )


def _install_kind(
    direct_url: Mapping[str, Any] | None, editable_pth: tuple[str, ...]
) -> tuple[str, str | None, str | None]:
    """(kind, vcs commit, editable checkout) from PEP 610 `direct_url.json`."""
    if direct_url is None:
        return ("editable", None, None) if editable_pth else ("regular", None, None)
    url = str(direct_url.get("url", ""))
    if (_typed(direct_url, "dir_info", dict, optional=True) or {}).get("editable"):
        return "editable", None, url.removeprefix("file://")
    if "vcs_info" in direct_url:
        commit = (_typed(direct_url, "vcs_info", dict, optional=True) or {}).get("commit_id")
        return "vcs", commit if isinstance(commit, str) else None, None
    if "archive_info" in direct_url:
        return "archive", None, None
    return "local-dir", None, None


def _component(raw: Mapping[str, Any] | None) -> Component | None:
    if raw is None:
        return None
    return Component(
        version=_text(raw, "version"),
        location=_typed(raw, "location", str, optional=True),
        cuda=_typed(raw, "cuda", str, optional=True),
    )


def _sgl_kernel(raw: Mapping[str, Any] | None) -> Component | None:
    if raw is None:
        return None
    needed = {
        name
        for so_file in _texts(raw, "shared_objects")
        for name in needed_libraries(Path(so_file))
        if name.startswith("libcudart")
    }
    return Component(
        version=_text(raw, "version"),
        location=_typed(raw, "location", str, optional=True),
        cudart=tuple(sorted(needed)),
    )
