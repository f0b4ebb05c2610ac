"""Where a decode step's host time goes: a torch-profiler trace per arm, and quiet bs-1 timings.

    python -m ddtree_overlay.bench.round_trace --out DIR [--setting fixture|qwen3-8b-random]
        [--arms ddtree-b256,dflash,...] [--prompts-per-arm 8] [--tp-size 2]

For each arm: start an sglang Engine on the bench setting's pair (batch-1 decode graphs only), warm up,
decode --prompts-per-arm held-out prompts one at a time (tok/s, ms per step, tokens per round),
then trace --trace-tokens more tokens of one prompt with SGLang's own torch profiler and reduce
the trace with ``ddtree_overlay.bench.trace_summary`` (host ms and launches per stage and per step;
with --with-stack also the Python functions that hold the host, per step and between rounds).
The DDTREE stages show in the trace without SGLANG_DDTREE_PROFILE, so the timed decode carries
no instrumentation in any arm.

Arms, named as everywhere in the tool (``ddtree_overlay.bench.arms``): ddtree-b<B>,
ddtree-adaptive-<B1>-<B2>... (a budget per round among B1, B2, ...), ddtree-schedule-<bs>x<B>-...
(a budget per batch size), dflash, plain, each with -no-overlap, and each optionally with
environment settings for its engine, e.g. ddtree-b256@SGLANG_DDTREE_COMMIT_GRAPH=1 (A/B of the
payload's switches in one command). Writes DIR/round_trace.json
and a markdown table to stdout. Run on the H200 in the interpreter with the patched sglang.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import time
from pathlib import Path

from ddtree_overlay.bench.arms import TARGET_ONLY, Arm, parse_with_env
from ddtree_overlay.bench.settings import SETTINGS, make_setting
from ddtree_overlay.bench.trace_summary import load_trace, summarize_trace
from ddtree_overlay.in_target.engine_runner import BASE_ENGINE, environment

BASE = {
    **BASE_ENGINE,
    "attention_backend": "triton",
    "cuda_graph_bs_decode": [1],
    "disable_prefill_cuda_graph": True,
}
def engine_kwargs(arm: Arm, setting, tp_size: int = 1) -> dict:
    kwargs = dict(BASE, model_path=str(setting.target), tp_size=tp_size, **setting.engine)
    if arm.algorithm != TARGET_ONLY:
        kwargs["speculative_draft_model_path"] = str(setting.draft)
    return kwargs | arm.engine_args()


def parse_arms(text: str) -> list:
    """(name, arm, environment) per comma-separated arm; bad names stop before any engine starts."""
    arms = []
    for name in (a for a in text.split(",") if a):
        try:
            arms.append((name, *parse_with_env(name)))
        except ValueError as error:
            raise SystemExit(f"round_trace: {error}") from None
    return arms


def run_arm(name: str, arm: Arm, env: dict, setting, args, out: Path) -> dict:
    import sglang as sgl

    prompts = [list(p) for p in setting.prompts[: args.prompts_per_arm]]
    greedy = {"temperature": 0.0, "max_new_tokens": setting.max_new_tokens, "ignore_eos": True}
    t0 = time.perf_counter()
    with environment(env):  # the engine's processes inherit it at start
        engine = sgl.Engine(**engine_kwargs(arm, setting, args.tp_size))
    record = {"arm": name, "tp_size": args.tp_size, "start_s": round(time.perf_counter() - t0, 1)}
    try:
        for prompt in prompts:  # the timed decode's own shapes: nothing compiles while timed
            engine.generate(input_ids=[prompt], sampling_params=greedy)
        tokens = rounds = 0
        t1 = time.perf_counter()
        for prompt in prompts:
            meta = engine.generate(input_ids=[prompt], sampling_params=greedy)[0]["meta_info"]
            tokens += int(meta["completion_tokens"])
            rounds += int(meta.get("spec_verify_ct") or meta["completion_tokens"])
        decode_s = time.perf_counter() - t1
        record.update(
            prompts=len(prompts),
            tokens=tokens,
            tok_per_s=round(tokens / decode_s, 1),
            step_ms=round(1000 * decode_s / rounds, 3),
            tokens_per_step=round(tokens / rounds, 3),
        )
        trace_dir = out / ("trace-" + re.sub(r"[^\w.-]", "_", name))
        engine.start_profile(
            output_dir=str(trace_dir), activities=["CPU", "GPU"], with_stack=args.with_stack, record_shapes=False
        )
        engine.generate(input_ids=[prompts[0]], sampling_params=dict(greedy, max_new_tokens=args.trace_tokens))
        engine.stop_profile()
    finally:
        engine.shutdown()
    traces = sorted(glob.glob(str(trace_dir / "*.trace.json*")))
    if traces:
        record["trace"] = summarize_trace(
            load_trace(traces[-1]), graphs_per_step=1 if arm.algorithm == TARGET_ONLY else 2
        )
        if not args.keep_traces:
            for path in traces:
                os.remove(path)
    return record


def table(records: list) -> str:
    lines = [
        "| arm | tok/s | ms/step | tokens/step | host ms/step | launches/step | graph launches/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        t = r.get("trace", {}).get("steps", {})
        lines.append(
            f"| {r['arm']} | {r.get('tok_per_s')} | {r.get('step_ms')} | {r.get('tokens_per_step')} | "
            f"{t.get('host_ms')} | {t.get('launches')} | {t.get('graph_launches')} |"
        )
    stages = [(r["arm"], r["trace"]["stages"]) for r in records if r.get("trace", {}).get("stages")]
    for r in records:
        python = r.get("trace", {}).get("steps", {}).get("python")
        if python:
            lines += ["", f"{r['arm']}: Python functions, self ms per step", ""]
            lines += [f"- {name}: {ms}" for name, ms in python["self_ms"]]
    for arm, split in stages:
        lines += ["", f"{arm}: per round, host ms / launches, and the busiest ops", ""]
        lines += ["| stage | host ms | launches | top ops (calls per round) |", "|---|---|---|---|"]
        for name, s in split.items():
            ops = ", ".join(f"{op} {n}" for op, n in s["top_ops"])
            lines.append(f"| {name} | {s['host_ms']} | {s['launches']} | {ops} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arms", default="ddtree-b256,ddtree-b256-no-overlap,dflash,dflash-no-overlap")
    ap.add_argument("--setting", default="fixture", choices=SETTINGS)
    ap.add_argument("--prompts-per-arm", type=int, default=8)
    ap.add_argument("--tp-size", type=int, default=1, help="tensor-parallel GPUs per engine, every arm alike")
    ap.add_argument("--trace-tokens", type=int, default=96)
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument(
        "--with-stack", action="store_true", help="Python stacks in the trace: per-function host ms per step"
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setting = make_setting(args.setting, scratch=out)
    records = []
    for name, arm, env in parse_arms(args.arms):
        print(f"== {name}", flush=True)
        try:
            records.append(run_arm(name, arm, env, setting, args, out))
        except Exception as exc:  # one failing arm must not cost the others' numbers
            records.append({"arm": name, "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps({k: v for k, v in records[-1].items() if k != "trace"}), flush=True)
        (out / "round_trace.json").write_text(json.dumps(records, indent=1))
    print(table([r for r in records if "error" not in r]))
    return 0 if all("error" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
