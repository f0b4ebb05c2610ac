"""What the probed env is, which patch set fits it, and whether it may be written to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import OverlayError
from ddtree_overlay.engine.patchset import PatchSet, bundled_patch_sets, load_patch_set
from ddtree_overlay.engine.releases import version_key, why_unsupported
from ddtree_overlay.engine.site import require_sglang


def select_patch_set(env: EnvInfo, manifest: Path | None) -> PatchSet:
    """The one patch set whose distribution and version range fit the installed sglang."""
    sglang = require_sglang(env)
    candidates = [load_patch_set(manifest)] if manifest else list(bundled_patch_sets())
    version = _public_version(sglang.version)
    fitting = [
        ps
        for ps in candidates
        if ps.distribution == "sglang" and ps.versions.contains(version, prereleases=True)
    ]
    if len(fitting) > 1:
        raise errors.several_patch_sets(sglang.version, [ps.id for ps in fitting])
    if not fitting:
        ordered = sorted(candidates, key=lambda ps: version_key(ps.release))
        raise errors.no_patch_set(
            sglang.version,
            [f"{ps.versions} ({ps.id})" for ps in ordered],
            why_unsupported(sglang.version),
            env.python,
            ordered[-1].release if ordered else None,
        )
    return fitting[0]


def installed_patch_set(env: EnvInfo) -> PatchSet | None:
    """The bundled patch set for the installed release, if there is one: what a lost ledger or
    a lost backup is rebuilt from."""
    try:
        return select_patch_set(env, None)
    except OverlayError:
        return None


def describe_patch_set_match(env: EnvInfo, manifest: Path | None) -> dict[str, Any]:
    """For `status`: the matching patch set, or why there is none (never raises for that)."""
    try:
        patch_set = select_patch_set(env, manifest)
    except OverlayError as error:
        return {"id": None, "reason": error.message}
    return {"id": patch_set.id, "versions": str(patch_set.versions)}


def runtime_warnings(env: EnvInfo) -> tuple[str, ...]:
    """The mismatches that let a server pass its health check and then die."""
    warnings: list[str] = []
    torch_cuda = env.torch.cuda if env.torch else None
    if env.sgl_kernel and torch_cuda:
        majors = {name.split(".so.")[-1].split(".")[0] for name in env.sgl_kernel.cudart if ".so." in name}
        if majors and torch_cuda.split(".")[0] not in majors:
            warnings.append(
                f"sgl_kernel links {', '.join(env.sgl_kernel.cudart)} but torch is built for "
                f"CUDA {torch_cuda}: kernels will fail to load at the first request"
            )
    if env.driver_cuda and torch_cuda and _version_tuple(env.driver_cuda) < _version_tuple(torch_cuda):
        warnings.append(
            f"the driver supports CUDA {env.driver_cuda}, older than torch's CUDA {torch_cuda}"
        )
    if env.sglang and env.sglang.installed_copies > 1:
        warnings.append(f"sglang is installed {env.sglang.installed_copies} times in this env")
    return tuple(warnings)


def fingerprint(env: EnvInfo) -> dict[str, Any]:
    sglang = require_sglang(env)
    public, local = _split_version(sglang.version)
    return {
        "distribution": "sglang",
        "version": sglang.version,
        "public_version": public,
        "local_tag": local,
        "install_kind": sglang.install_kind,
        "commit": sglang.commit,
        "record_sha256": sglang.record.sha256,
        "python": env.python_version,
    }


def _public_version(raw: str) -> str:
    try:
        return Version(raw).public
    except InvalidVersion as error:
        raise errors.version_unparsable(raw) from error


def _split_version(raw: str) -> tuple[str, str | None]:
    try:
        parsed = Version(raw)
    except InvalidVersion:
        return raw, None
    return parsed.public, parsed.local


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())
