"""Run decode arms through ``sglang.Engine`` inside the target env's own interpreter.

    python engine_runner.py PLAN.json OUT.jsonl

This file is executed by path with the env's python, so it imports only the
standard library at module level (sglang and torch inside functions). PLAN:

    {"target": DIR, "draft": DIR, "prompts": [[ids...], ...],
     "arms": [{"name": str, "engine": {Engine kwargs}, "sampling": {...},
               "repeat": int, "top2": bool}]}

Each arm starts an Engine, warms it up, decodes every prompt at once (repeat
times each, as concurrent requests), checks the engine is still healthy after
going idle (SGLang's strict KV-leak check raises on idle), shuts down, and
appends one JSON line to OUT. A line per arm also goes to stdout, prefixed
``ARM``, so a caller can show progress.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

BASE_ENGINE = {
    "skip_tokenizer_init": True,
    "grammar_backend": "none",
    "mem_fraction_static": 0.45,
    "log_level": "error",
    "random_seed": 0,
}


def _top2_margins(meta: dict) -> list:
    """top1 - top2 log-probability per output token (== the logit margin)."""
    margins = []
    for entry in meta.get("output_top_logprobs") or []:
        values = sorted((float(item[0]) for item in entry), reverse=True)
        margins.append(values[0] - values[1] if len(values) >= 2 else None)
    return margins


def run_arm(plan: dict, arm: dict) -> dict:
    import sglang as sgl

    kwargs = dict(BASE_ENGINE, model_path=plan["target"], **arm.get("engine", {}))
    if kwargs.get("speculative_algorithm"):
        kwargs.setdefault("speculative_draft_model_path", plan["draft"])
    prompts = [p for p in plan["prompts"] for _ in range(int(arm.get("repeat", 1)))]
    sampling = dict({"temperature": 0.0, "max_new_tokens": 64, "ignore_eos": True}, **arm.get("sampling", {}))
    gen_extra = {"return_logprob": True, "top_logprobs_num": 2} if arm.get("top2") else {}

    result = {"arm": arm["name"], "engine": arm.get("engine", {}), "sampling": sampling}
    t0 = time.perf_counter()
    engine = sgl.Engine(**kwargs)
    try:
        result["start_s"] = time.perf_counter() - t0
        warm = dict(sampling, max_new_tokens=min(16, sampling["max_new_tokens"]))
        engine.generate(input_ids=prompts[: min(4, len(prompts))], sampling_params=warm)
        t1 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=sampling, **gen_extra)
        decode_s = time.perf_counter() - t1
        time.sleep(1.0)  # let the scheduler go idle: its KV-leak check runs there
        engine.generate(input_ids=prompts[:1], sampling_params=dict(sampling, max_new_tokens=2))
    finally:
        engine.shutdown()

    tokens = sum(len(o["output_ids"]) for o in outs)
    result.update(
        ok=True,
        decode_s=decode_s,
        tokens=tokens,
        tok_per_s=tokens / decode_s if decode_s > 0 else None,
        outputs=[o["output_ids"] for o in outs],
        meta=[
            {
                k: o["meta_info"].get(k)
                for k in ("completion_tokens", "spec_verify_ct", "spec_accept_length", "finish_reason")
            }
            for o in outs
        ],
    )
    if arm.get("top2"):
        result["top2_margins"] = [_top2_margins(o["meta_info"]) for o in outs]
    return result


def main(argv: list) -> int:
    plan_path, out_path = argv[1], argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    failures = 0
    for arm in plan["arms"]:
        try:
            result = run_arm(plan, arm)
        except Exception as exc:  # one arm failing must not hide the others
            failures += 1
            result = {
                "arm": arm["name"],
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=20),
            }
        with open(out_path, "a") as f:
            f.write(json.dumps(result) + "\n")
        summary = {k: result.get(k) for k in ("arm", "ok", "error", "start_s", "decode_s", "tok_per_s")}
        print("ARM " + json.dumps(summary), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
