"""Reduce a torch-profiler Chrome trace of decode steps to host cost per step and per stage.

A decode step of a speculative arm launches two CUDA graphs (draft, target verify) and a plain
decode step one, so steady-state steps are counted between graph launches. DDTREE rounds carry
``ddtree.<stage>`` annotations (``ddtree_profile`` adds them whenever a trace is being taken);
for those the host time, the launches and the busiest top-level ops of each stage are reported,
and ``between`` is what the host does from one round's commit to the next round's draft.

A trace taken with Python stacks adds, per step (and for DDTREE's ``between``), the Python
functions with the most self time (their own code and the torch ops they call directly) and the
most inclusive time.
"""

from __future__ import annotations

import gzip
import itertools
import json
from bisect import bisect_left
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

STAGE_PREFIX = "ddtree."
HOST_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
TOP_OPS = 6
TOP_FUNCTIONS = 12


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in HOST_CATEGORIES]


def _is_launch(event: dict) -> bool:
    name = event["name"]
    return event["cat"] in LAUNCH_CATEGORIES and ("Launch" in name or "Memcpy" in name or "Memset" in name)


def _is_graph_launch(event: dict) -> bool:
    return event["cat"] in LAUNCH_CATEGORIES and "GraphLaunch" in event["name"]


def _top_level_ops(ops: list[dict]) -> list[dict]:
    """cpu_ops not nested inside another cpu_op of the same thread (ops sorted by start)."""
    top, end = [], float("-inf")
    for op in ops:
        if op["ts"] >= end:
            top.append(op)
            end = op["ts"] + op.get("dur", 0)
    return top


def _count_in(times: list[float], start: float, stop: float) -> int:
    return bisect_left(times, stop) - bisect_left(times, start)


def summarize_trace(events: list[dict], *, graphs_per_step: int | None = None) -> dict[str, Any]:
    """Host ms, launches and graph launches per steady-state step; per-stage split for DDTREE.

    ``graphs_per_step``: CUDA graphs one decode step replays (default 2, a speculative round;
    1 for plain decoding).
    """
    by_thread: dict[Any, list[dict]] = defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    # The thread that launches the graphs is the one running the decode loop.
    _thread, thread_events = max(by_thread.items(), key=lambda kv: sum(map(_is_graph_launch, kv[1])))
    thread_events.sort(key=lambda e: e["ts"])
    launches = [e["ts"] for e in thread_events if _is_launch(e)]
    graphs = [e["ts"] for e in thread_events if _is_graph_launch(e)]
    stages = [e for e in thread_events if e["cat"] == "user_annotation" and e["name"].startswith(STAGE_PREFIX)]
    per_step = graphs_per_step or 2
    summary: dict[str, Any] = {"graphs_per_step": per_step}
    if len(graphs) > 2 * per_step:
        # whole steps only: from the first graph launch to the last step's first graph launch
        steps = (len(graphs) - 1) // per_step
        start, stop = graphs[0], graphs[steps * per_step]
        summary["steps"] = {
            "count": steps,
            "host_ms": round((stop - start) / steps / 1000, 3),
            "launches": round(_count_in(launches, start, stop) / steps, 1),
            "graph_launches": round(_count_in(graphs, start, stop) / steps, 2),
        }
    python = [e for e in thread_events if e["cat"] == "python_function"]
    if python and "steps" in summary:
        summary["steps"]["python"] = _python_split(python, [(start, stop)], summary["steps"]["count"])
    if stages:
        spans = _stage_spans(stages)
        ops = _top_level_ops([e for e in thread_events if e["cat"] == "cpu_op"])
        summary["stages"] = _stage_split(spans, ops, launches)
        if python and "between" in spans:
            summary["stages"]["between"]["python"] = _python_split(
                python, spans["between"], len(spans["between"])
            )
    return summary


def _python_split(functions: list[dict], intervals: list[tuple[float, float]], per: int) -> dict[str, Any]:
    """Self and inclusive ms per ``per`` (steps, rounds) of the Python functions inside intervals.

    Self time is a function's duration less its Python callees'; a name's inclusive time counts
    only its outermost frames, so recursion is not counted twice.
    """
    self_us: Counter = Counter()
    inclusive_us: Counter = Counter()
    starts = [f["ts"] for f in functions]  # functions are sorted by start
    for start, stop in intervals:
        candidates = functions[bisect_left(starts, start) : bisect_left(starts, stop)]
        inside = sorted(
            (f for f in candidates if f["ts"] + f.get("dur", 0) <= stop),
            key=lambda f: (f["ts"], -f.get("dur", 0)),
        )
        stack: list[tuple[dict, float]] = []  # (frame, its end)
        for frame in inside:
            end = frame["ts"] + frame.get("dur", 0)
            while stack and stack[-1][1] <= frame["ts"]:
                stack.pop()
            if stack:
                self_us[stack[-1][0]["name"]] -= frame.get("dur", 0)
            self_us[frame["name"]] += frame.get("dur", 0)
            if all(outer["name"] != frame["name"] for outer, _ in stack):
                inclusive_us[frame["name"]] += frame.get("dur", 0)
            stack.append((frame, end))
    scale = 1000.0 * per
    return {
        "self_ms": [(name, round(us / scale, 3)) for name, us in self_us.most_common(TOP_FUNCTIONS)],
        "inclusive_ms": [(name, round(us / scale, 3)) for name, us in inclusive_us.most_common(TOP_FUNCTIONS)],
    }


def _stage_spans(stages: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Each stage's (start, end) per round, and ``between`` rounds."""
    first_stage = stages[0]["name"]
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in stages:
        spans[s["name"][len(STAGE_PREFIX):]].append((s["ts"], s["ts"] + s["dur"]))
    # between rounds: from the end of a round's last stage to the next round's first stage
    between = [
        (prev["ts"] + prev["dur"], stage["ts"])
        for prev, stage in itertools.pairwise(stages)
        if stage["name"] == first_stage
    ]
    if between:
        spans["between"] = between
    return spans


def _stage_split(
    spans: dict[str, list[tuple[float, float]]], ops: list[dict], launches: list[float]
) -> dict[str, Any]:
    op_times = [op["ts"] for op in ops]
    split = {}
    for name, intervals in spans.items():
        names: Counter = Counter()
        host = n_launch = 0.0
        for start, stop in intervals:
            host += stop - start
            n_launch += _count_in(launches, start, stop)
            lo, hi = bisect_left(op_times, start), bisect_left(op_times, stop)
            names.update(op["name"] for op in ops[lo:hi])
        n = len(intervals)
        split[name] = {
            "rounds": n,
            "host_ms": round(host / n / 1000, 3),
            "launches": round(n_launch / n, 1),
            "top_ops": [(op, round(c / n, 1)) for op, c in names.most_common(TOP_OPS)],
        }
    return split
