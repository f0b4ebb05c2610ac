"""`verify`: the applied overlay imports in the env's own interpreter and decodes on its GPU.

Two tiers, both run by the target env's python, never the tool's:
- imports: every module the overlay added or patched, in one fresh interpreter;
- smoke (``--smoke``): target-only, DFLASH and DDTREE decodes of the fixture pair (or
  ``--target/--draft``) through ``sglang.Engine``; each arm must run, DFLASH and DDTREE must
  match target-only greedy output up to bf16 near-ties, and their acceptance is reported.
A machine without a GPU gets ``skipped (no GPU)`` for the smoke tier, distinct from a pass.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ddtree_overlay.bench import decode_compare
from ddtree_overlay.bench.plan import capture_batch_sizes
from ddtree_overlay.engine import errors
from ddtree_overlay.engine.envprobe import EnvInfo
from ddtree_overlay.engine.errors import VerifyFailed
from ddtree_overlay.engine.result import Issue, Result
from ddtree_overlay.engine.site import open_overlay
from ddtree_overlay.engine.target import run_script, runner_events, start_engine_runner

PACKAGE_DIR = Path(__file__).resolve().parents[1]
FIXTURES = PACKAGE_DIR / "fixtures"
IMPORT_TIMEOUT_S = 600
SMOKE_TIMEOUT_S = 1800
SMOKE_PROMPTS, SMOKE_NEW_TOKENS = 8, 64


def verify(
    env: EnvInfo,
    *,
    smoke: bool,
    target: Path | None = None,
    draft: Path | None = None,
    budget: int = 15,
    prompts: int = SMOKE_PROMPTS,
    max_new_tokens: int = SMOKE_NEW_TOKENS,
    on_arm: Callable[[Mapping[str, Any]], None] = lambda _: None,
) -> Result:
    modules = applied_modules(env)
    imports = run_import_check(env.python, modules)
    failed = {name: error for name, error in imports["modules"].items() if error}
    data: dict[str, Any] = {"imports": imports["modules"], "gpu": imports["gpu"]}
    issues = [Issue("import_failed", f"`{name}`: {error}") for name, error in failed.items()]

    if not smoke:
        data["smoke"] = "not requested"
    elif imports["gpu"] is None:
        data["smoke"] = "skipped (no GPU)"
    elif failed:
        data["smoke"] = "skipped (imports failed)"
    else:
        report = run_smoke(
            env.python,
            target=target or FIXTURES / "target",
            draft=draft or FIXTURES / "draft",
            budget=budget,
            prompts=prompts,
            max_new_tokens=max_new_tokens,
            on_arm=on_arm,
        )
        data["smoke"] = "passed" if report["passed"] else "failed"
        data["arms"] = report["arms"]
        issues.extend(Issue("smoke_failed", problem) for problem in report["problems"])

    if issues:
        return Result(("verify",), "failed", data, tuple(issues), exit_code=int(VerifyFailed.exit_code))
    return Result(("verify",), "ok", data)


def applied_modules(env: EnvInfo) -> list[str]:
    """Dotted names of the .py files the applied overlay added or patched, in ledger order."""
    overlay = open_overlay(env)
    overlay.refuse_pending()
    applied, state = overlay.applied_state()
    if applied is None:
        raise errors.nothing_applied(env.requested)
    if state != "applied":
        raise errors.overlay_not_intact(env.requested, state)
    return [
        entry.path[: -len(".py")].replace("/", ".")
        for entry in applied.files
        if entry.path.endswith(".py")
    ]


def run_import_check(python: Path, modules: list[str]) -> dict[str, Any]:
    done = run_script(python, "import_check", modules, timeout=IMPORT_TIMEOUT_S, isolated=False)
    if done.problem is not None:
        raise errors.target_script_failed(python, "import check", done.problem)
    return done.result


def smoke_plan(
    target: Path, draft: Path, budget: int, prompts: list[list[int]], max_new_tokens: int = SMOKE_NEW_TOKENS
) -> dict[str, Any]:
    greedy = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    # Every prompt decodes at once: decode graphs for that batch and the smaller powers of two
    # it shrinks through; prefill graphs off. Both shorten each engine's start.
    backend = {
        "attention_backend": "triton",
        "cuda_graph_bs_decode": capture_batch_sizes([len(prompts)]),
        "disable_prefill_cuda_graph": True,
    }
    return {
        "target": str(target),
        "draft": str(draft),
        "prompts": prompts,
        "arms": [
            {"name": "target-only", "engine": backend, "sampling": greedy, "top2": True},
            {"name": "DFLASH", "engine": backend | {"speculative_algorithm": "DFLASH"}, "sampling": greedy},
            {
                "name": "DDTREE",
                "engine": backend
                | {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": budget},
                "sampling": greedy,
            },
        ],
    }


def run_smoke(
    python: Path,
    *,
    target: Path,
    draft: Path,
    budget: int,
    prompts: int = SMOKE_PROMPTS,
    max_new_tokens: int = SMOKE_NEW_TOKENS,
    on_arm: Callable[[Mapping[str, Any]], None],
) -> dict[str, Any]:
    held_out = json.loads((FIXTURES / "heldout_prompts.json").read_text())
    if prompts > len(held_out):
        raise errors.too_few_prompts(len(held_out), prompts, FIXTURES / "heldout_prompts.json")
    plan = smoke_plan(target, draft, budget, held_out[:prompts], max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="ddtree-verify-") as scratch:
        plan_path, records_path = Path(scratch) / "plan.json", Path(scratch) / "arms.jsonl"
        plan_path.write_text(json.dumps(plan))
        with start_engine_runner(python, plan_path, records_path) as runner:
            assert runner.stdout is not None
            for tag, event in runner_events(runner.stdout):
                if tag == "ARM":
                    on_arm(event)
            runner.wait(timeout=SMOKE_TIMEOUT_S)
        records = [json.loads(line) for line in records_path.read_text().splitlines()] if records_path.exists() else []
    return judge_smoke(records, expected=[arm["name"] for arm in plan["arms"]])


def judge_smoke(records: list[Mapping[str, Any]], *, expected: list[str]) -> dict[str, Any]:
    """Pass when every arm ran and the speculative arms match target-only up to near-ties."""
    by_name = {record["arm"]: record for record in records}
    problems, arms = [], {}
    for name in expected:
        record = by_name.get(name)
        if record is None or not record.get("ok"):
            error = (record or {}).get("error", "did not run")
            problems.append(f"{name}: {error}")
            arms[name] = {"ok": False, "error": error}
            continue
        summary = decode_compare.acceptance_summary(record)
        arms[name] = {
            "ok": True,
            "tok_per_s": record.get("tok_per_s"),
            "acceptance_length": summary["mean_acceptance_length"],
        }
    reference = by_name.get(expected[0])
    for name in expected[1:]:
        if not (arms[name]["ok"] and arms[expected[0]]["ok"]):
            continue
        report = decode_compare.lossless_report(reference, by_name[name])
        arms[name]["identical"] = f"{report['identical']}/{report['prompts']}"
        arms[name]["divergences"] = report["divergences"]
        if not report["passed"]:
            worst = max(d["margin"] or 0.0 for d in report["divergences"] if not d["explained"])
            problems.append(
                f"{name}: {report['unexplained']} divergence(s) from target-only beyond bf16 noise "
                f"(largest top1-top2 margin {worst:.3f})"
            )
    return {"passed": not problems, "problems": problems, "arms": arms}
