"""GPU check of the DDTREE payload: arms through sglang.Engine, then lossless/acceptance analysis.

    python scripts/gpu/payload_check.py --out DIR [--preset NAME] [--target DIR --draft DIR --prompts FILE]

The model pair and prompts default to the fixture pair and its held-out prompts.

Runs on the H200 in the interpreter that has the patched sglang on its path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "ddtree_overlay" / "fixtures"
sys.path.insert(0, str(ROOT))

from ddtree_overlay.bench import decode_compare as dc  # noqa: E402
from ddtree_overlay.bench.report import profile_split  # noqa: E402
from ddtree_overlay.in_target.engine_runner import profile_windows  # noqa: E402

# Decode graphs for the batch sizes these arms reach (32 prompts at once, fewer as they finish);
# prefill graphs off. Both shorten the engine start; neither changes what is measured.
GRAPH = {
    "attention_backend": "triton",
    "cuda_graph_bs_decode": [1, 2, 4, 8, 16, 32],
    "disable_prefill_cuda_graph": True,
}
# The T=1 arms send 512 single-prompt draws; 32 at a time keeps them on the captured graphs.
WAVES = {"max_running_requests": 32}
TORCH_TREE = {"SGLANG_DDTREE_TREE_KERNEL": "torch"}  # the default is the Triton kernels
NO_SYNC = {"SGLANG_DDTREE_SYNC_DEBUG": "error"}


def ddtree(budget, **extra):
    return dict(GRAPH, speculative_algorithm="DDTREE", speculative_ddtree_budget=budget, **extra)


def ddtree_schedule(schedule, **extra):
    return dict(GRAPH, speculative_algorithm="DDTREE", speculative_ddtree_budget_schedule=schedule, **extra)


def ddtree_adaptive(budgets, **extra):
    return dict(GRAPH, speculative_algorithm="DDTREE", speculative_ddtree_adaptive_budgets=budgets, **extra)


# B = 64 up to 8 requests, 32 for 9-16, 8 from 17 (the draft block's width, 16).
SCHEDULE = "1:64,9:32,17:8"
ADAPTIVE = "8,32,128"


def presets(n_prompts, max_new):
    greedy = {"temperature": 0.0, "max_new_tokens": max_new, "ignore_eos": True}
    sampled = {"temperature": 1.0, "max_new_tokens": 4, "ignore_eos": True}
    return {
        "first": [
            {"name": "plain", "engine": GRAPH, "sampling": greedy, "top2": True},
            {"name": "dflash", "engine": dict(GRAPH, speculative_algorithm="DFLASH"), "sampling": greedy},
            {"name": "ddtree-b15", "engine": ddtree(15), "sampling": greedy},
            {"name": "ddtree-b32-eager", "engine": ddtree(32, disable_cuda_graph=True), "sampling": greedy},
            {"name": "ddtree-b32", "engine": ddtree(32), "sampling": greedy},
        ],
        "lossless": [
            {"name": "plain", "engine": GRAPH, "sampling": greedy, "top2": True},
            {"name": "ddtree-b32", "engine": ddtree(32), "sampling": greedy,
             "on_fail": {"name": "ddtree-b32-eager", "engine": ddtree(32, disable_cuda_graph=True), "sampling": greedy}},
            {"name": "dflash", "engine": dict(GRAPH, speculative_algorithm="DFLASH"), "sampling": greedy},
            {"name": "ddtree-b15", "engine": ddtree(15), "sampling": greedy},
            {"name": "ddtree-b32-page16", "engine": ddtree(32, page_size=16), "sampling": greedy},
            {"name": "plain-t1", "engine": dict(GRAPH, **WAVES), "sampling": sampled, "repeat": 512, "prompts": 1},
            {"name": "ddtree-b32-t1", "engine": ddtree(32, **WAVES), "sampling": sampled, "repeat": 512, "prompts": 1},
        ],
        # The tree stage as Triton kernels against the torch ops (same engine settings).
        "kernels": [
            {"name": "plain", "engine": GRAPH, "sampling": greedy, "top2": True},
            {"name": "ddtree-b15-torch", "engine": ddtree(15), "sampling": greedy, "env": TORCH_TREE},
            {"name": "ddtree-b15-triton", "engine": ddtree(15), "sampling": greedy},
            {"name": "ddtree-b32-torch", "engine": ddtree(32), "sampling": greedy, "env": TORCH_TREE},
            {"name": "ddtree-b32-triton", "engine": ddtree(32), "sampling": greedy},
        ],
        # Any host sync inside a DDTREE round raises (torch's CUDA sync debug mode, scoped to
        # the round): the arm fails, naming the operation.
        "syncs": [
            {"name": "ddtree-b32-nosync-torch", "engine": ddtree(32), "sampling": greedy,
             "env": dict(NO_SYNC, **TORCH_TREE)},
            {"name": "ddtree-b32-nosync-triton", "engine": ddtree(32), "sampling": greedy, "env": NO_SYNC},
        ],
        # Tensor parallelism (two GPUs): TP=2 against TP=1 and against DFLASH at TP=2.
        "tp": [
            {"name": "plain", "engine": GRAPH, "sampling": greedy, "top2": True},
            {"name": "ddtree-b32", "engine": ddtree(32), "sampling": greedy},
            {"name": "ddtree-b32-tp2", "engine": ddtree(32, tp_size=2), "sampling": greedy},
            {"name": "dflash-tp2", "engine": dict(GRAPH, speculative_algorithm="DFLASH", tp_size=2), "sampling": greedy},
            {"name": "plain-tp2", "engine": dict(GRAPH, tp_size=2), "sampling": greedy},
        ],
        # A budget per batch size (--speculative-ddtree-budget-schedule): one engine, several
        # verify widths. At most 12 running: waves of 12 (B = 32), then one of 8 (B = 64), so
        # the engine switches width mid-run; 32 at once verify 16 tokens (B = 8).
        "schedule": [
            {"name": "plain", "engine": GRAPH, "sampling": greedy, "top2": True},
            {"name": "ddtree-schedule-waves", "engine": ddtree_schedule(SCHEDULE, max_running_requests=12), "sampling": greedy},
            {"name": "ddtree-schedule-bs32", "engine": ddtree_schedule(SCHEDULE), "sampling": greedy},
            {"name": "ddtree-b64", "engine": ddtree(64), "sampling": greedy},
        ],
        # A budget chosen per round (--speculative-ddtree-adaptive-budgets): lossless whatever
        # the widths chosen; with the profiler on, the windows' `budgets` count the widths used
        # (all three while they are timed, then mostly the chosen one). With overlap and without,
        # and under the sync guard: the policy reads the GPU only through polled events.
        "adaptive": [
            {"name": "plain", "engine": GRAPH, "sampling": greedy, "top2": True},
            {"name": "ddtree-adaptive", "engine": ddtree_adaptive(ADAPTIVE), "sampling": greedy, "env": NO_SYNC},
            {"name": "ddtree-adaptive-no-overlap",
             "engine": ddtree_adaptive(ADAPTIVE, disable_overlap_schedule=True), "sampling": greedy},
            {"name": "ddtree-adaptive-waves", "engine": ddtree_adaptive(ADAPTIVE, max_running_requests=4),
             "sampling": greedy},
            {"name": "ddtree-adaptive-t1", "engine": ddtree_adaptive(ADAPTIVE, **WAVES), "sampling": sampled,
             "repeat": 512, "prompts": 1},
            {"name": "plain-t1", "engine": dict(GRAPH, **WAVES), "sampling": sampled, "repeat": 512, "prompts": 1},
        ],
        "flashinfer": [
            {"name": "plain-flashinfer", "engine": dict(GRAPH, attention_backend="flashinfer"), "sampling": greedy, "top2": True},
            {"name": "ddtree-b32-flashinfer", "engine": dict(ddtree(32), attention_backend="flashinfer"), "sampling": greedy},
        ],
    }


def run_one(args, prompts, arm, out, results_path) -> bool:
    plan = {
        "target": args.target,
        "draft": args.draft,
        "prompts": prompts[: arm.pop("prompts", len(prompts))],
        "arms": [arm],
    }
    plan_path = Path("/tmp") / f"plan-{arm['name']}.json"
    plan_path.write_text(json.dumps(plan))
    done = subprocess.run(
        [sys.executable, str(ROOT / "ddtree_overlay/in_target/engine_runner.py"), str(plan_path), str(results_path)],
        check=False,
    )
    return done.returncode == 0


def reference_for(directory, arm_name):
    """The offline reference run matching an arm's algorithm and budget, if there is one."""
    if not directory:
        return None
    budget = re.match(r"ddtree-b(\d+)", arm_name)
    stem = f"ddtree-b{budget.group(1)}" if budget else "dflash" if arm_name.startswith("dflash") else None
    path = Path(directory) / f"{stem}.json"
    return json.loads(path.read_text()) if stem and path.exists() else None


def tp_comparison(tp1, tp2):
    """A TP=2 arm against its TP=1 twin: same outputs, same acceptance, tok/s ratio."""
    same = sum(a == b for a, b in zip(tp1["outputs"], tp2["outputs"]))
    acceptance = [dc.acceptance_summary(r)["mean_acceptance_length"] for r in (tp1, tp2)]
    return {
        "arm": tp2["arm"], "tp1_arm": tp1["arm"], "identical_to_tp1": same, "prompts": len(tp2["outputs"]),
        "acceptance_tp1": acceptance[0], "acceptance_tp2": acceptance[1],
        "tok_per_s_ratio": tp2["tok_per_s"] / tp1["tok_per_s"],
    }


def budgets_used(profile_path, record):
    """Rounds per tree budget in the profile windows written while an arm's engine lived."""
    if record.get("t_start") is None:
        return None
    split = profile_split(profile_windows(profile_path), record["t_start"], record["t_end"])
    return (split or {}).get("budgets") or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=str(FIXTURES / "target"))
    ap.add_argument("--draft", default=str(FIXTURES / "draft"))
    ap.add_argument("--prompts", default=str(FIXTURES / "heldout_prompts.json"))
    ap.add_argument("--n-prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--preset", default="first", help="comma-separated preset names")
    ap.add_argument("--only", default="", help="comma-separated arm names")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--reference-dir",
        help="offline reference JSONs for the same prompts: dflash.json, ddtree-b<B>.json "
        "(python -m ddtree_overlay.reference ... --limit N-PROMPTS --max-new-tokens M --no-baseline)",
    )
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = json.loads(Path(args.prompts).read_text())[: args.n_prompts]
    table = presets(args.n_prompts, args.max_new_tokens)
    arms = [arm for name in args.preset.split(",") for arm in table[name]]
    if args.only:
        keep = set(args.only.split(","))
        arms = [a for a in arms if a["name"] in keep]
    results_path = out / "arms.jsonl"
    results_path.unlink(missing_ok=True)
    ddtree_broken = False
    summary: dict = {}
    for arm in arms:  # one runner process per arm keeps a crash contained
        if ddtree_broken and "ddtree" in arm["name"]:
            print(f"skip {arm['name']}: an earlier DDTREE arm failed", flush=True)
            continue
        on_fail = arm.pop("on_fail", None)
        if not run_one(args, prompts, arm, out, results_path) and "ddtree" in arm["name"]:
            ddtree_broken = True
            if on_fail:
                run_one(args, prompts, on_fail, out, results_path)
        # after every arm: a run cut off by its time box keeps the verdicts it reached
        summary = write_summary(results_path, out, args.reference_dir)
    print(json.dumps(summary, indent=1)[:20000])


def write_summary(results_path: Path, out: Path, reference_dir) -> dict:
    """Judge the arms in arms.jsonl so far (lossless against plain, parity, TP, T = 1
    distribution) into summary.json."""
    records = {}
    if results_path.exists():
        records = {r["arm"]: r for r in map(json.loads, results_path.read_text().splitlines())}
    summary = {"arms": {}, "lossless": [], "distribution": [], "parity": [], "tp": []}
    for name, rec in records.items():
        if not rec.get("ok"):
            summary["arms"][name] = {"ok": False, "error": rec.get("error"), "traceback": rec.get("traceback")}
            continue
        summary["arms"][name] = dict(
            dc.acceptance_summary(rec), ok=True, start_s=rec.get("start_s"), decode_s=rec.get("decode_s"),
            budgets=budgets_used(os.environ.get("SGLANG_DDTREE_PROFILE"), rec),
        )
        base = "plain-flashinfer" if name.endswith("-flashinfer") else "plain"
        if name != base and rec["sampling"]["temperature"] == 0 and records.get(base, {}).get("ok"):
            summary["lossless"].append(dc.lossless_report(records[base], rec))
        reference = reference_for(reference_dir, name) if rec["sampling"]["temperature"] == 0 else None
        if reference is not None:
            parity = dc.acceptance_parity(rec, reference)
            summary["parity"].append({k: v for k, v in parity.items() if k != "per_prompt"})
        tp1 = name.removesuffix("-tp2")
        if tp1 != name and records.get(tp1, {}).get("ok"):
            summary["tp"].append(tp_comparison(records[tp1], rec))
        if name.endswith("-t1") and name != "plain-t1" and records.get("plain-t1", {}).get("ok"):
            for pos in (1, 2, 3):
                summary["distribution"].append(dict(dc.distribution_test(records["plain-t1"], rec, pos), arm=name))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
