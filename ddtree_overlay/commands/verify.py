"""`verify`: the applied overlay imports in the env's own interpreter and decodes on its GPU.

Two tiers, both run by the target env's python, never the tool's:
- imports: every module the overlay added or patched, in one fresh interpreter;
- smoke (``--smoke``): target-only, DFLASH and DDTREE decodes of a bundled fixture pair
  (``--pair dense``, a Qwen3 target, or ``--pair hybrid``, a Qwen3.5-layout Gated-DeltaNet
  hybrid) or of ``--target/--draft`` through ``sglang.Engine``; each arm must run, DFLASH and DDTREE must
  match target-only greedy output up to bf16 near-ties, and their acceptance is reported.
  With ``--preset``, the GPU acceptance presets of `bench.checks` run instead, their records
  and verdicts written to ``--out``.
A machine without a GPU gets ``skipped (no GPU)`` for the smoke tier, distinct from a pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.errors import VerifyFailed
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.fixture_paths import PAIRS

if TYPE_CHECKING:
    from ddtree_overlay.engine.envprobe import EnvInfo

# The CLI reads the smoke's defaults below when it starts (`--help` included), so the engine
# modules that open an env or run its interpreter are imported where they are used.

IMPORT_TIMEOUT_S = 600
SMOKE_PROMPTS, SMOKE_NEW_TOKENS = 8, 64


@dataclass(frozen=True)
class GpuChecks:
    """What ``verify --smoke`` decodes: the smoke, or the arms of ``presets``."""

    pair: str = "dense"  # the bundled pair: its prompts, and its models unless target/draft
    target: Path | None = None
    draft: Path | None = None
    budget: int = 15  # the smoke's DDTREE budget
    prompts: int = SMOKE_PROMPTS
    max_new_tokens: int = SMOKE_NEW_TOKENS
    presets: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    out: Path | None = None  # where the presets' records and summary go
    reference_dir: Path | None = None


def verify(
    env: EnvInfo,
    *,
    smoke: bool,
    gpu: GpuChecks = GpuChecks(),
    on_arm: Callable[[Mapping[str, Any]], None] = lambda _: None,
) -> Result:
    if smoke:
        _refuse_presets_out_of_reach(env, gpu)
    modules = applied_modules(env)
    imports = run_import_check(env.python, modules)
    failed = {name: error for name, error in imports["modules"].items() if error}
    data: dict[str, Any] = {"imports": imports["modules"], "gpu": imports["gpu"]}
    _refuse_missing_dependencies(env, imports, data)
    issues = [Issue("import_failed", f"`{name}`: {error}") for name, error in failed.items()]

    if not smoke:
        data["smoke"] = "not requested"
    elif imports["gpu"] is None:
        data["smoke"] = "skipped (no GPU)"
    elif failed:
        data["smoke"] = "skipped (imports failed)"
    else:
        report = run_gpu_checks(env.python, gpu, on_arm)
        data["smoke"] = "passed" if report["passed"] else "failed"
        data |= {key: report[key] for key in ("arms", "out", "summary") if key in report}
        issues.extend(Issue("smoke_failed", problem) for problem in report["problems"])

    if issues:
        return Result(("verify",), "failed", data, tuple(issues), exit_code=int(VerifyFailed.exit_code))
    return Result(("verify",), "ok", data)


def _refuse_presets_out_of_reach(env: EnvInfo, gpu: GpuChecks) -> None:
    """Before any engine starts: a preset whose requests the env's release refuses, or whose
    judge needs the fixtures' byte vocabulary when the target is one's own."""
    from packaging.version import Version

    from ddtree_overlay.bench.check_presets import BYTE_VOCABULARY_PRESETS, PRESET_RELEASES

    installed = env.sglang.version if env.sglang else None
    for preset in gpu.presets:
        release = PRESET_RELEASES.get(preset)
        if release and installed and Version(installed) < Version(release):
            raise errors.preset_needs_release(preset, release, installed)
        if preset in BYTE_VOCABULARY_PRESETS and (gpu.target or gpu.draft):
            raise errors.preset_needs_fixture_pair(preset)


def _refuse_missing_dependencies(env: EnvInfo, imports: Mapping[str, Any], data: Mapping[str, Any]) -> None:
    """A patched module that fails because a module outside sglang is not installed says
    nothing about the overlay: the env lacks sglang's own dependencies (e.g. an sglang
    installed with `--no-deps`)."""
    missing: dict[str, list[str]] = {}
    for module, absent in imports.get("missing", {}).items():
        top = absent.split(".")[0]
        if top != "sglang":
            missing.setdefault(top, []).append(module)
    if not missing:
        return
    blocked = {module for modules in missing.values() for module in modules}
    others = [f"`{name}`: {error}" for name, error in imports["modules"].items() if error and name not in blocked]
    assert env.sglang is not None  # applied_modules found the overlay applied to it
    raise errors.sglang_dependencies_missing(
        env.requested, env.python, env.sglang.version, missing, others, dict(data, missing_dependencies=missing)
    )


def applied_modules(env: EnvInfo) -> list[str]:
    """Dotted names of the .py files the applied overlay added or patched, in ledger order."""
    from ddtree_overlay.engine.fingerprint import installed_patch_set
    from ddtree_overlay.engine.site import open_overlay

    overlay = open_overlay(env)
    overlay.refuse_pending()
    applied, _ = overlay.applied_overlay(installed_patch_set(env))
    if applied is None:
        raise errors.nothing_applied(env.requested)
    if applied.state != "applied":
        raise errors.overlay_not_intact(env.requested, applied.state)
    return [
        file.path[: -len(".py")].replace("/", ".")
        for file in applied.files
        if file.path.endswith(".py")
    ]


def run_import_check(python: Path, modules: list[str]) -> dict[str, Any]:
    from ddtree_overlay.engine.target import run_script

    done = run_script(python, "import_check", modules, timeout=IMPORT_TIMEOUT_S, isolated=False)
    if done.problem is not None:
        raise errors.target_script_failed(python, "import check", done.problem)
    return done.result


def run_gpu_checks(
    python: Path, gpu: GpuChecks, on_arm: Callable[[Mapping[str, Any]], None]
) -> dict[str, Any]:
    """The smoke's verdict, or the presets': ``passed``, ``problems``, ``arms`` (and for the
    presets ``out`` and the ``summary``)."""
    # the GPU tier only: `--import-only` stays light
    from ddtree_overlay.bench import check_presets, checks

    pair = PAIRS[gpu.pair]
    held_out_path = pair / "heldout_prompts.json"
    held_out = json.loads(held_out_path.read_text())
    if gpu.prompts > len(held_out):
        raise errors.too_few_prompts(len(held_out), gpu.prompts, held_out_path)
    target, draft = gpu.target or pair / "target", gpu.draft or pair / "draft"
    if not gpu.presets:
        return checks.run_smoke(
            python,
            target=target,
            draft=draft,
            budget=gpu.budget,
            prompts=held_out[: gpu.prompts],
            max_new_tokens=gpu.max_new_tokens,
            on_arm=on_arm,
        )
    out = gpu.out or Path("verify-results")
    summary = checks.run_checks(
        python,
        check_presets.preset_arms(gpu.presets, gpu.only),
        out=out,
        target=target,
        draft=draft,
        prompts=held_out[: gpu.prompts],
        max_new_tokens=gpu.max_new_tokens,
        reference_dir=gpu.reference_dir,
        on_arm=on_arm,
    )
    problems = summary["problems"]
    return {
        "passed": not problems,
        "problems": problems,
        "arms": checks.arms_view(summary),
        "out": str(out),
        "summary": {
            key: summary[key] for key in ("lossless", "parity", "tp", "distribution", "sampling", "sampling_combined", "grammar", "logprobs")
        },
    }
