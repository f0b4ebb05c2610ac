"""Where a decode step's time goes: a torch-profiler trace per arm, and quiet timings.

    python -m ddtree_overlay.bench.round_trace --out DIR [--setting fixture|qwen3-8b-random|...]
        [--arms ddtree-b256,dflash,...] [--prompts-per-arm 8] [--batch-size 1] [--tp-size 2]
        [--prompt-tokens 1024]

For each arm: start an sglang Engine on the bench setting's pair (decode graphs for batch 1 and
--batch-size only), warm up, decode --prompts-per-arm held-out prompts (at least one wave) in
waves of --batch-size at once, once untimed and then --timed-decodes times timed (tok/s; ms per
step, a wave's steps being its longest request's; tokens per step per request; the fastest
timed decode's, every decode's ms per step kept beside it), then trace --trace-tokens more
tokens of one wave with SGLang's own torch profiler and reduce the trace with
``ddtree_overlay.bench.trace_summary``: host ms and launches per stage and per step (with
--with-stack also the Python functions that hold the host, per step and between rounds), and GPU
ms per step by kernel family and where the GPU idled (``bench.gpu_idle``), side by side across
arms with each arm's difference from the first. A DDTREE arm's record names the paths its engine ran
(``paths``: the verify's attention, the drafter's and a hybrid's recurrent state, read from the
kernels its trace launched and how often, ``bench.engine_paths``), so an arm left to ``auto``
says what it chose.
The DDTREE stages show in the trace without SGLANG_DDTREE_PROFILE, so the timed decode carries
no instrumentation in any arm.

Arms, named as everywhere in the tool (``ddtree_overlay.bench.arms``): ddtree-b<B>,
ddtree-adaptive-<B1>-<B2>... (a budget per round among B1, B2, ...), ddtree-schedule-<bs>x<B>-...
(a budget per batch size), dflash, nextn (the target's MTP head, as the bench runs it), plain,
each with -no-overlap, every arm on triton unless a baseline arm names its backend (dflash@flashinfer),
and each optionally with environment settings for its engine, e.g.
ddtree-b256@SGLANG_DDTREE_COMMIT_GRAPH=1 (A/B of the payload's switches in one command), or the
drafter's attention backend, ddtree-b32@speculative_draft_attention_backend=flashinfer, or a DDTREE
arm's own, ddtree-b32@attention_backend=flashinfer (its drafter's with it, as SGLang does). An arm
the setting cannot run (nextn without an MTP head, or with overlap scheduling on a hybrid target
where stock SGLang crashes, `bench.nextn_overlap`; eagle3, which needs a drafter this tool is
not given) stops the command before any engine starts.

Before the measured arms, an untimed primer engine of the first arm decodes the prompts once and
shuts down (``--no-primer``: none): on a fresh machine the first DDTREE engine of a command ran
2.0-2.7x slower per step than later ones (hybrid fixture, B = 32, 2026-12-02;
docs/bench.md#the-primer-engine). Writes DIR/round_trace.json (the primer's record tagged
``primer``, out of the table) and a markdown table to stdout; with random weights and a DFLASH
arm, DDTREE ÷ DFLASH projected on the trace's costs with the DDTree paper's Qwen3-8B curve
(``trace_projection``). Run on the H200 in the interpreter with the patched sglang.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import json
import os
import re
import sys
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

from ddtree_overlay.bench.acceptance_curve import PAPER_QWEN3_8B
from ddtree_overlay.bench.arms import (
    DDTREE,
    EAGLE3,
    NEXTN,
    TARGET_ONLY,
    Arm,
    engine_keywords,
    parse_with_settings,
)
from ddtree_overlay.bench.capacity import asks_for_widest_batch
from ddtree_overlay.bench.engine_paths import paths_text, traced_paths
from ddtree_overlay.bench.kernel_families import FAMILIES, short_kernel_name
from ddtree_overlay.bench.nextn_overlap import crash_reason
from ddtree_overlay.bench.plan import baseline_draft
from ddtree_overlay.bench.settings import SETTINGS, Setting, make_setting
from ddtree_overlay.bench.target_config import read_target_config
from ddtree_overlay.bench.trace_projection import project_trace, trace_projection_lines
from ddtree_overlay.bench.trace_summary import load_trace, summarize_trace
from ddtree_overlay.in_target.engine_runner import BASE_ENGINE, environment, requests_at_once

# Every arm on DDTREE's backend, the baselines too (the bench gives them SGLang's default,
# `bench.attention`): the traces set the arms' kernels side by side on one backend.
BACKEND = "triton"
BASE = {**BASE_ENGINE, "disable_prefill_cuda_graph": True}


def engine_kwargs(arm: Arm, setting: Setting, tp_size: int = 1, batch_size: int = 1) -> dict:
    """The arm's engine as the bench starts it: the pair's drafter for DFLASH and DDTREE, the
    target's own directory for NEXTN (its MTP head, `plan.baseline_draft`)."""
    kwargs = dict(BASE, model_path=str(setting.target), tp_size=tp_size, **setting.engine)
    if arm.backend is None:  # a baseline arm that names its backend asks for it (`Arm.engine_args`)
        kwargs |= engine_keywords(BACKEND)
    # a wave shrinking as its requests finish pads up to batch_size, a lone request runs at 1
    kwargs["cuda_graph_bs_decode"] = sorted({1, batch_size})
    if asks_for_widest_batch(batch_size, hybrid=setting.hybrid):
        kwargs["max_running_requests"] = batch_size
    if arm.algorithm != TARGET_ONLY:
        kwargs["speculative_draft_model_path"] = str(setting.draft)
    return kwargs | arm.engine_args() | baseline_draft(setting, arm)


def refusal(arm: Arm, setting: Setting, sglang_version: str | None) -> str | None:
    """Why this setting cannot run the arm here; None when it can."""
    if arm.algorithm == EAGLE3:
        return "eagle3 needs an EAGLE-3 drafter: `ddtree-overlay bench --eagle3-draft DIR` runs it"
    if arm.algorithm == NEXTN and not setting.nextn:
        return f"nextn needs a target with an MTP head; {setting.target} has none"
    if arm.algorithm == NEXTN and arm.overlap:
        backend = arm.backend or BACKEND
        why = crash_reason(hybrid=setting.hybrid, attention_backend=backend, sglang_version=sglang_version)
        return f"{why}; ask for {Arm(NEXTN, overlap=False, backend=arm.backend).name}" if why else None
    return None


class TracedArm(NamedTuple):
    name: str  # as given, settings included: the record's "arm"
    arm: Arm
    env: dict  # the arm's environment as the bench sets it, the name's settings over it
    engine: dict  # engine keywords the name adds (`arms.ENGINE_SETTINGS`)


def parse_arms(text: str, setting: Setting, sglang_version: str | None) -> list[TracedArm]:
    """One per comma-separated arm; a bad name, or an arm the setting cannot run, stops before
    any engine starts."""
    arms = []
    for name in (a for a in text.split(",") if a):
        try:
            arm, env, engine = parse_with_settings(name)
        except ValueError as error:
            raise SystemExit(f"round_trace: {error}") from None
        why = refusal(arm, setting, sglang_version)
        if why:
            raise SystemExit(f"round_trace: {name}: {why}")
        arms.append(TracedArm(name, arm, arm.engine_env(hybrid=setting.hybrid) | env, engine))
    return arms


def installed_sglang() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def prompt_waves(prompts, batch_size: int, count: int) -> list[list[list[int]]]:
    """At least ``count`` prompts in whole waves of ``batch_size``, the setting's prompts over again
    where it has too few."""
    n = -(-max(count, batch_size) // batch_size) * batch_size
    cycled = [list(prompts[i % len(prompts)]) for i in range(n)]
    return [cycled[i : i + batch_size] for i in range(0, n, batch_size)]


def wave_timing(metas: list[list[dict]], decode_s: float) -> dict:
    """tok/s, ms per step and tokens per step per request of waves decoded in ``decode_s``
    (``metas``: each wave's requests' meta_info); a wave takes as many steps as its longest request."""
    tokens = sum(int(m["completion_tokens"]) for wave in metas for m in wave)
    rounds = [[int(m.get("spec_verify_ct") or m["completion_tokens"]) for m in wave] for wave in metas]
    steps = sum(max(wave) for wave in rounds)
    return {
        "tokens": tokens,
        "tok_per_s": round(tokens / decode_s, 1),
        "step_ms": round(1000 * decode_s / steps, 3),
        "tokens_per_step": round(tokens / sum(map(sum, rounds)), 3),
    }


# Timed decodes of one engine further apart than this are named in the table's notes.
DECODES_APART = 1.2


def fastest_decode(timed: list[dict]) -> dict:
    """The arm's timing: its fastest timed decode's (on 2026-12-06 a fresh machine's DFLASH
    engine ran its one timed decode at three times the step its trace took right after, once;
    a later decode of the same shapes is the arm's step), with every decode's ms per step
    beside it where there were several."""
    fastest = min(timed, key=lambda t: t["step_ms"])
    return fastest | ({"timed_step_ms": [t["step_ms"] for t in timed]} if len(timed) > 1 else {})


def timing_notes(records: list) -> list[str]:
    """A note for each arm whose timed decodes lie more than ``DECODES_APART`` apart."""
    notes = []
    for r in records:
        steps = r.get("timed_step_ms") or []
        if steps and max(steps) > DECODES_APART * min(steps):
            notes.append(
                f"note: {r['arm']}'s timed decodes took {', '.join(f'{ms:g}' for ms in steps)} ms per step; "
                f"its step is the fastest, {min(steps):g}"
            )
    return notes


def waves_of(setting: Setting, args) -> list:
    return prompt_waves(setting.prompts, args.batch_size, args.prompts_per_arm)


def greedy_of(setting: Setting) -> dict:
    return {"temperature": 0.0, "max_new_tokens": setting.max_new_tokens, "ignore_eos": True}


def start_engine(traced: TracedArm, setting: Setting, args):
    """The arm's engine and its start seconds."""
    import sglang as sgl

    t0 = time.perf_counter()
    with environment(traced.env):  # the engine's processes inherit it at start
        engine = sgl.Engine(**(engine_kwargs(traced.arm, setting, args.tp_size, args.batch_size) | traced.engine))
    return engine, round(time.perf_counter() - t0, 1)


def decode_waves(engine, waves: list, greedy: dict) -> list:
    """Each wave's requests' meta_info."""
    return [[out["meta_info"] for out in engine.generate(input_ids=wave, sampling_params=greedy)] for wave in waves]


def prime(traced: TracedArm, setting: Setting, args) -> dict:
    """The first arm's engine started, its decode run once untimed, and shut down: what a
    fresh machine's first engine is slow at is done before anything is measured."""
    engine, start_s = start_engine(traced, setting, args)
    try:
        decode_waves(engine, waves_of(setting, args), greedy_of(setting))
    finally:
        engine.shutdown()
    return {"arm": traced.name, "tp_size": args.tp_size, "start_s": start_s}


def attempt(name: str, call) -> dict:
    """``call()``'s record, or the error it raised: one failing arm must not cost the others' numbers."""
    try:
        return call()
    except Exception as exc:
        return {"arm": name, "error": f"{type(exc).__name__}: {exc}"}


def run_arm(traced: TracedArm, setting: Setting, args, out: Path) -> dict:
    name, arm = traced.name, traced.arm
    waves, greedy = waves_of(setting, args), greedy_of(setting)
    engine, start_s = start_engine(traced, setting, args)
    record = {"arm": name, "tp_size": args.tp_size, "start_s": start_s}
    try:
        record["requests_at_once"] = requests_at_once(engine)  # SGLang's cap: a wave wider than it queues
        decode_waves(engine, waves, greedy)  # the timed decode's own shapes: nothing compiles while timed
        timed = []
        for _ in range(args.timed_decodes):
            t1 = time.perf_counter()
            metas = decode_waves(engine, waves, greedy)
            timed.append(wave_timing(metas, time.perf_counter() - t1))
        record.update(prompts=sum(map(len, waves)), batch_size=args.batch_size, **fastest_decode(timed))
        trace_dir = out / ("trace-" + re.sub(r"[^\w.-]", "_", name))
        engine.start_profile(
            output_dir=str(trace_dir), activities=["CPU", "GPU"], with_stack=args.with_stack, record_shapes=False
        )
        engine.generate(input_ids=waves[0], sampling_params=dict(greedy, max_new_tokens=args.trace_tokens))
        engine.stop_profile()
    finally:
        engine.shutdown()
    traces = sorted(glob.glob(str(trace_dir / "*.trace.json*")))
    if traces:
        events = load_trace(traces[-1])
        record["trace"] = summarize_trace(events, graphs_per_step=1 if arm.algorithm == TARGET_ONLY else 2)
        if arm.algorithm == DDTREE and "gpu" in record["trace"]:
            record["paths"] = traced_paths(
                record["trace"]["gpu"]["path_kernel_calls"],
                hybrid=setting.hybrid,
                target_layers=setting.facts.attention_layers,
                draft_layers=read_target_config(setting.draft).attention_layers,
            )
        if not args.keep_traces:
            for path in traces:
                os.remove(path)
    return record


def table(records: list) -> str:
    lines = [
        "| arm | DDTREE paths | tok/s | ms/step | tokens/step | host ms/step (DDTREE: per round) | of it waiting | launches/step | graph launches/step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        t = r.get("trace", {}).get("steps", {})
        lines.append(
            f"| {r['arm']} | {paths_text(r.get('paths'))} | {r.get('tok_per_s')} | {r.get('step_ms')} | "
            f"{r.get('tokens_per_step')} | {t.get('host_ms')} | {t.get('wait_ms', '')} | {t.get('launches')} | "
            f"{t.get('graph_launches')} |"
        )
    stages = [(r["arm"], r["trace"]["stages"]) for r in records if r.get("trace", {}).get("stages")]
    for r in records:
        python = r.get("trace", {}).get("steps", {}).get("python")
        if python:
            lines += ["", f"{r['arm']}: Python functions, self ms per step", ""]
            lines += [f"- {name}: {ms}" for name, ms in python["self_ms"]]
    lines += gpu_table(records)
    for arm, split in stages:
        lines += ["", f"{arm}: per round, host ms / launches, the GPU ms of what the stage launched, and the busiest ops", ""]
        lines += [
            "| stage | host ms | of it waiting | launches | GPU ms | GPU span ms | GPU ms by family | top ops (calls per round) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, s in split.items():
            ops = ", ".join(f"{op} {n}" for op, n in s["top_ops"])
            families = ", ".join(f"{f} {ms}" for f, ms in s.get("gpu_families", {}).items())
            lines.append(
                f"| {name} | {s['host_ms']} | {s.get('wait_ms', '')} | {s['launches']} | {s.get('gpu_ms', '')} | "
                f"{s.get('gpu_span_ms', '')} | "
                f"{families} | {ops} |"
            )
    return "\n".join(lines)


TOP_KERNEL_LINES = 8
IDLE_ROWS = (
    ("idle_ms", "idle ms"),
    ("inside_graphs_ms", "idle inside graphs"),
    ("launched_late_ms", "idle, launched late"),
    ("queued_ms", "idle, queued"),
)


def gpu_table(records: list) -> list[str]:
    """GPU ms per step, in total and by kernel family, one column per arm and one per arm after
    the first with its difference from the first; then each arm's busiest kernels and graphs."""
    traced = [(r["arm"], r["trace"]["gpu"]) for r in records if r.get("trace", {}).get("gpu")]
    if not traced:
        return []
    arms = [arm for arm, _ in traced]
    lines = [
        "",
        "GPU ms per step (a DDTREE step is a round), by kernel family; Δ: an arm's minus the first's",
        "",
        "| | " + " | ".join(arms) + "".join(f" | Δ {arm}" for arm in arms[1:]) + " |",
        "|---" * (2 * len(arms)) + "|",
    ]

    def row(label: str, values: list, delta: bool = True) -> str:
        cells = ["" if v is None else f"{v:g}" for v in values]
        diffs = [
            f"{v - values[0]:+.3f}" if delta and None not in (v, values[0]) else "" for v in values[1:]
        ]
        return f"| {label} | " + " | ".join(cells + diffs) + " |"

    lines.append(row("steps", [g["count"] for _, g in traced], delta=False))
    for key, label in (("kernel_ms", "kernel ms"), ("busy_ms", "busy ms"), ("span_ms", "span ms")):
        lines.append(row(label, [g.get(key) for _, g in traced]))
    for key, label in IDLE_ROWS:
        lines.append(row(label, [g.get("idle", {}).get(key) for _, g in traced]))
    for family in FAMILIES:
        if any(family in g["families"] for _, g in traced):
            lines.append(row(family, [g["families"].get(family, 0.0) for _, g in traced]))
    lines.append(row("graph launches without kernels", [g["graph_launches_without_kernels"] for _, g in traced], delta=False))
    for arm, g in traced:
        lines += ["", f"{arm}: busiest kernels, ms (calls) per step; graphs replayed", ""]
        lines += [f"- {short_kernel_name(name)}: {ms} ({calls})" for name, ms, calls in g["top_kernels"][:TOP_KERNEL_LINES]]
        lines += [
            f"- {x['graph']}: {x['launches']} per step, {x['kernel_ms']} ms in {x['events']} events, span {x['span_ms']} ms"
            for x in g["graphs"]
        ]
        idle = g.get("idle")
        if idle:
            lines += ["", f"{arm}: the GPU's idle ms (gaps) per step, before the events whose gaps add up to most", ""]
            lines += [f"- {x['before']} ({x['kind']}): {x['ms']} ({x['gaps']})" for x in idle["largest"]]
            if "by_stage" in idle:
                lines.append("- by the stage that launched the event ending the gap: " + ", ".join(f"{stage} {s['idle_ms']}" for stage, s in idle["by_stage"].items()))
    return lines


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arms", default="ddtree-b256,ddtree-b256-no-overlap,dflash,dflash-no-overlap")
    ap.add_argument("--setting", default="fixture", choices=SETTINGS)
    ap.add_argument("--prompts-per-arm", type=int, default=8)
    ap.add_argument(
        "--batch-size", type=int, default=1, help="prompts decoded at once, in the timed decode and the trace"
    )
    ap.add_argument("--tp-size", type=int, default=1, help="tensor-parallel GPUs per engine, every arm alike")
    ap.add_argument("--prompt-tokens", type=int, help="the random-weight settings' prompt length (their default if unset)")
    ap.add_argument(
        "--timed-decodes", type=int, default=2,
        help="timed decodes per engine after the untimed one; the arm's step is the fastest",
    )
    ap.add_argument("--trace-tokens", type=int, default=96)
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument(
        "--with-stack", action="store_true", help="Python stacks in the trace: per-function host ms per step"
    )
    ap.add_argument(
        "--primer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start an untimed engine of the first arm, decode once and drop it, before the measured ones",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the setting and the arms; start no engine")
    args = ap.parse_args(argv)
    if args.batch_size < 1:
        ap.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.timed_decodes < 1:
        ap.error(f"--timed-decodes must be at least 1, got {args.timed_decodes}")
    if args.prompt_tokens is not None and args.prompt_tokens < 1:
        ap.error(f"--prompt-tokens must be at least 1, got {args.prompt_tokens}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        setting = make_setting(args.setting, scratch=out, prompt_tokens=args.prompt_tokens)
    except ValueError as exc:  # prompt tokens for a setting with real prompts
        ap.error(str(exc))
    arms = parse_arms(args.arms, setting, installed_sglang())
    if args.dry_run:
        print(f"round trace of {args.setting}, batch size {args.batch_size}, primer {'on' if args.primer else 'off'}:")
        for traced in arms:
            settings = sorted({**traced.env, **traced.engine}.items())
            print(f"  {traced.name}: {traced.arm.label}" + "".join(f" {key}={value}" for key, value in settings))
        return 0
    records: list = []

    def keep(record: dict) -> None:
        records.append(record)
        print(json.dumps({k: v for k, v in record.items() if k != "trace"}), flush=True)
        (out / "round_trace.json").write_text(json.dumps(records, indent=1))

    if args.primer and arms:
        print(f"== {arms[0].name}: untimed primer", flush=True)
        keep(attempt(arms[0].name, partial(prime, arms[0], setting, args)) | {"primer": True})
    for traced in arms:
        print(f"== {traced.name}", flush=True)
        keep(attempt(traced.name, partial(run_arm, traced, setting, args, out)))
    measured = [r for r in records if not r.get("primer")]
    ok = [r for r in measured if "error" not in r]
    print(table(ok))
    print("\n".join(timing_notes(ok)))
    if not setting.real_weights:
        print("\n".join(trace_projection_lines(project_trace(ok, PAPER_QWEN3_8B), PAPER_QWEN3_8B)))
    return 0 if all("error" not in r for r in measured) else 1


if __name__ == "__main__":
    sys.exit(main())
