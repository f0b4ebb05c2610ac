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
from ddtree_overlay.engine.target import run_script

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
    info = raw["python"]
    return EnvInfo(
        requested=env,
        python=python,
        python_version=info["version"],
        prefix=Path(info["prefix"]),
        is_venv=info["is_venv"],
        externally_managed=info["externally_managed"],
        sglang=_sglang(raw["sglang"]),
        torch=_component(raw["torch"]),
        sgl_kernel=_sgl_kernel(raw["sgl_kernel"]),
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


def _run_probe(python: Path, record: str) -> Mapping[str, Any]:
    args = ["--record", record, "--hash-cache", ledger.state_home() / "record-hashes"]
    done = run_script(python, "env_probe", args, timeout=_PROBE_TIMEOUT_S)
    if done.problem is not None:
        raise errors.interpreter_unusable(python, f"failed to describe itself: {done.problem}")
    return done.result


def _sglang(raw: Mapping[str, Any] | None) -> SglangInstall | None:
    if raw is None:
        return None
    kind, commit, checkout = _install_kind(raw["direct_url"], raw["editable_pth"])
    record = raw["record"]
    return SglangInstall(
        version=raw["version"],
        installed_copies=raw["installed_copies"],
        site_packages=Path(raw["site_packages"]),
        dist_info=Path(raw["dist_info"]),
        origin=raw["origin"],
        location=Path(raw["location"]) if raw["location"] else None,
        install_kind=kind,
        commit=commit,
        editable_checkout=checkout,
        record=RecordCheck(
            present=record["present"],
            sha256=record.get("sha256"),
            files=record.get("files", 0),
            modified=tuple(record.get("modified", ())),
            missing=tuple(record.get("missing", ())),
            unhashed=record.get("unhashed", 0),
            top_level=tuple(record.get("top_level", ())),
            hashed=record.get("hashed", 0),
        ),
    )


def _install_kind(
    direct_url: Mapping[str, Any] | None, editable_pth: list[str]
) -> tuple[str, str | None, str | None]:
    """(kind, vcs commit, editable checkout) from PEP 610 `direct_url.json`."""
    if direct_url is None:
        return ("editable", None, None) if editable_pth else ("regular", None, None)
    url = str(direct_url.get("url", ""))
    if direct_url.get("dir_info", {}).get("editable"):
        return "editable", None, url.removeprefix("file://")
    if "vcs_info" in direct_url:
        return "vcs", direct_url["vcs_info"].get("commit_id"), None
    if "archive_info" in direct_url:
        return "archive", None, None
    return "local-dir", None, None


def _component(raw: Mapping[str, Any] | None) -> Component | None:
    if raw is None:
        return None
    return Component(version=raw["version"], location=raw["location"], cuda=raw.get("cuda"))


def _sgl_kernel(raw: Mapping[str, Any] | None) -> Component | None:
    if raw is None:
        return None
    needed = {
        name
        for so_file in raw.get("shared_objects", ())
        for name in needed_libraries(Path(so_file))
        if name.startswith("libcudart")
    }
    return Component(version=raw["version"], location=raw["location"], cudart=tuple(sorted(needed)))
