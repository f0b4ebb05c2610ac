"""Reduce a torch-profiler Chrome trace of decode steps to host cost per step and per stage.

A decode step of DFLASH or EAGLE launches two CUDA graphs (draft, target verify) and a plain
decode step one, so their steady-state steps are counted between graph launches. DDTREE rounds
carry ``ddtree.<stage>`` annotations (``ddtree_profile`` adds them whenever a trace is being
taken) and replay up to four graphs (draft, tree, verify, commit), so a DDTREE step is a round,
from one round's draft to the next's, on the host as on the GPU; for each stage the host time,
the launches and the busiest top-level ops are reported, and ``between`` is what the host does
from one round's commit to the next round's draft. ``wait_ms`` (per step and per stage) is the
host time inside blocking CUDA calls (``WAIT_CALLS``): of a stage's host ms, what it spent
waiting for the GPU rather than working.

A trace taken with Python stacks adds, per step (and for DDTREE's ``between``), the Python
functions with the most self time (their own code and the torch ops they call directly) and the
most inclusive time.

The GPU side (``gpu``): the kernels, copies and memsets a steady-state step launched, each tied
to its launch by the ``correlation`` in its args; a DDTREE step is a round (from one
``ddtree.draft`` to the next: a round replays up to four graphs, so graph launches do not count
its rounds). Per step: kernel ms (the sum of their durations), busy ms (the union of their
intervals), span ms (from the step's first GPU event to the next step's: busy plus the GPU's idle
time), ms by kernel family (``kernel_families``), the busiest kernels with their calls, and the
CUDA graphs replayed. CUPTI reports each kernel of a graph replay as its own event, correlated to
the ``cudaGraphLaunch`` (with ``graph id`` and ``graph node id`` in its args), so a graph's
kernels count like eager ones; a graph launch that brought no GPU event into the trace is counted
in ``graph_launches_without_kernels``, its time is then missing from kernel and busy ms and shows
only in span ms. For DDTREE each stage also gets the GPU ms, span and families of what its host
range launched (its graph's kernels under the graph launch's correlation). ``idle``: where the GPU
sat idle, by what it waited for and, for DDTREE, by stage (``gpu_idle``).
"""

from __future__ import annotations

import gzip
import itertools
import json
from bisect import bisect_left
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from ddtree_overlay.bench.engine_paths import PATH_KERNELS
from ddtree_overlay.bench.gpu_idle import idle_split
from ddtree_overlay.bench.kernel_families import FAMILIES, kernel_family, short_kernel_name

STAGE_PREFIX = "ddtree."
ROUND_STAGE = "draft"  # a DDTREE round starts with its draft
HOST_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Runtime calls that block the host until the GPU has caught up (cudaMemcpy is the synchronous
# copy; the async ones return at once): their time is the host waiting, not working.
WAIT_CALLS = frozenset(
    ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cuStreamSynchronize")
)
TOP_OPS = 6
TOP_FUNCTIONS = 12
TOP_KERNELS = 12


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    keep = HOST_CATEGORIES + GPU_CATEGORIES
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in keep]


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
    """Host ms, launches and graph launches per steady-state step; per-stage split for DDTREE;
    with GPU events in the trace, ``gpu``: GPU ms per step (per round for DDTREE).

    ``graphs_per_step``: CUDA graphs one decode step replays (default 2, a speculative round;
    1 for plain decoding); it sets the host's steps, and the GPU's but for DDTREE.
    """
    by_thread: dict[Any, list[dict]] = defaultdict(list)
    for e in events:
        if e["cat"] in HOST_CATEGORIES:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    # The thread that launches the graphs is the one running the decode loop.
    thread, thread_events = max(by_thread.items(), key=lambda kv: sum(map(_is_graph_launch, kv[1])))
    thread_events.sort(key=lambda e: e["ts"])
    launches = [e["ts"] for e in thread_events if _is_launch(e)]
    waits = [e for e in thread_events if e["cat"] in LAUNCH_CATEGORIES and e["name"] in WAIT_CALLS]
    graphs = [e["ts"] for e in thread_events if _is_graph_launch(e)]
    stages = [e for e in thread_events if e["cat"] == "user_annotation" and e["name"].startswith(STAGE_PREFIX)]
    per_step = graphs_per_step or 2
    summary: dict[str, Any] = {"graphs_per_step": per_step}
    # A DDTREE round replays up to four graphs (draft, tree, verify, commit): its steps are its
    # rounds, from one round's first stage to the next's; other arms' are their graph launches.
    rounds = sorted(s["ts"] for s in stages if s["name"] == STAGE_PREFIX + ROUND_STAGE)
    if len(rounds) > 2:
        steps, start, stop = len(rounds) - 1, rounds[0], rounds[-1]
    elif len(graphs) > 2 * per_step:
        # whole steps only: from the first graph launch to the last step's first graph launch
        steps = (len(graphs) - 1) // per_step
        start, stop = graphs[0], graphs[steps * per_step]
    else:
        steps = 0
    if steps:
        summary["steps"] = {
            "count": steps,
            "unit": "round" if len(rounds) > 2 else "step",
            "host_ms": round((stop - start) / steps / 1000, 3),
            "launches": round(_count_in(launches, start, stop) / steps, 1),
            "graph_launches": round(_count_in(graphs, start, stop) / steps, 2),
            "wait_ms": round(_wait_us(waits, [(start, stop)]) / steps / 1000, 3),
        }
    python = [e for e in thread_events if e["cat"] == "python_function"]
    if python and "steps" in summary:
        summary["steps"]["python"] = _python_split(python, [(start, stop)], summary["steps"]["count"])
    if stages:
        spans = _stage_spans(stages)
        ops = _top_level_ops([e for e in thread_events if e["cat"] == "cpu_op"])
        summary["stages"] = _stage_split(spans, ops, launches, waits)
        if python and "between" in spans:
            summary["stages"]["between"]["python"] = _python_split(
                python, spans["between"], len(spans["between"])
            )
    launched = _launched_gpu_events(events)
    if not launched:
        return summary
    if "steps" in summary:
        summary["gpu"] = _gpu_split(events, launched, start, stop, steps, summary["steps"]["unit"], spans if stages else None, thread)
    if stages:
        on_thread = [g for g in launched if g.thread == thread]
        for name, intervals in spans.items():
            summary["stages"][name].update(_stage_gpu(on_thread, intervals))
    return summary


class _Launched(NamedTuple):
    """A GPU event and the host launch its ``correlation`` ties it to."""

    at: float  # the launch's host time
    thread: tuple
    correlation: int
    event: dict


def _correlation(event: dict) -> Any:
    return event.get("args", {}).get("correlation")


def _launched_gpu_events(events: list[dict]) -> list[_Launched]:
    """GPU events with their launches, by launch time; events with no launch in the trace are left out."""
    launches = {
        _correlation(e): e for e in events if e["cat"] in LAUNCH_CATEGORIES and _correlation(e) is not None
    }
    launched = []
    for e in events:
        launch = launches.get(_correlation(e)) if e["cat"] in GPU_CATEGORIES else None
        if launch is not None:
            launched.append(_Launched(launch["ts"], (launch.get("pid"), launch.get("tid")), _correlation(e), e))
    launched.sort(key=lambda g: g.at)
    return launched


def _busy_us(events: list[dict]) -> float:
    """The length of the union of the events' GPU intervals."""
    busy, end = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e["ts"]):
        stop = e["ts"] + e.get("dur", 0)
        if stop > end:
            busy += stop - max(e["ts"], end)
            end = stop
    return busy


def _family_ms(events: list[dict], per: int) -> dict[str, float]:
    us: Counter = Counter()
    for e in events:
        us[kernel_family(e["name"], e["cat"])] += e.get("dur", 0)
    return {f: round(us[f] / per / 1000, 3) for f in FAMILIES if us[f]}


def _gpu_split(
    events: list[dict],
    launched: list[_Launched],
    start: float,
    stop: float,
    count: int,
    per: str,
    stages: dict[str, list[tuple[float, float]]] | None = None,
    thread: tuple | None = None,
) -> dict[str, Any]:
    """GPU ms per step of what the host launched in [start, stop), ``count`` steps; where the GPU
    idled (``gpu_idle``), by stage given DDTREE's ``stages`` on the decode ``thread``."""
    times = [g.at for g in launched]
    lo, hi = bisect_left(times, start), bisect_left(times, stop)
    inside = launched[lo:hi]
    gpu = [g.event for g in inside]
    later = [g.event["ts"] for g in launched[hi:]]
    kernel_us: Counter = Counter()
    calls: Counter = Counter()
    for e in gpu:
        kernel_us[e["name"]] += e.get("dur", 0)
        calls[e["name"]] += 1
    split: dict[str, Any] = {
        "per": per,
        "count": count,
        "kernel_ms": round(sum(kernel_us.values()) / count / 1000, 3),
        "busy_ms": round(_busy_us(gpu) / count / 1000, 3),
    }
    if gpu and later:
        split["span_ms"] = round((min(later) - min(e["ts"] for e in gpu)) / count / 1000, 3)
    split["events"] = round(len(gpu) / count, 1)
    split["families"] = _family_ms(gpu, count)
    split["top_kernels"] = [
        (name, round(us / count / 1000, 3), round(calls[name] / count, 2))
        for name, us in kernel_us.most_common(TOP_KERNELS)
    ]
    # calls per step of the kernels that tell DDTREE's paths apart (engine_paths.traced_paths),
    # busy or not
    split["path_kernel_calls"] = {name: round(calls[name] / count, 2) for name in sorted(PATH_KERNELS) if calls[name]}
    graph_launches = [
        e for e in events if _is_graph_launch(e) and start <= e["ts"] < stop and _correlation(e) is not None
    ]
    split.update(_graph_split(graph_launches, inside, count))
    after = min(launched[hi:], key=lambda g: g.event["ts"], default=None)
    split["idle"] = idle_split(inside, count, after=after, stages=stages, thread=thread)
    return split


def _graph_split(graph_launches: list[dict], inside: list[_Launched], count: int) -> dict[str, Any]:
    """The graphs replayed: per graph, launches per step and per launch its GPU events, ms and span."""
    by_launch: dict[Any, list[dict]] = defaultdict(list)
    for g in inside:
        by_launch[g.correlation].append(g.event)
    graphs: dict[str, dict[str, float]] = {}
    empty = 0
    for launch in graph_launches:
        replay = by_launch.get(_correlation(launch))
        if not replay:
            empty += 1
            continue
        first = min(replay, key=lambda e: e["ts"])
        graph_id = first.get("args", {}).get("graph id")
        key = f"graph {graph_id}" if graph_id is not None else f"{len(replay)} events from {short_kernel_name(first['name'])}"
        g = graphs.setdefault(key, {"launches": 0, "events": 0, "kernel_us": 0.0, "span_us": 0.0})
        g["launches"] += 1
        g["events"] += len(replay)
        g["kernel_us"] += sum(e.get("dur", 0) for e in replay)
        g["span_us"] += max(e["ts"] + e.get("dur", 0) for e in replay) - first["ts"]
    rows = [
        {
            "graph": key,
            "launches": round(g["launches"] / count, 2),
            "events": round(g["events"] / g["launches"], 1),
            "kernel_ms": round(g["kernel_us"] / g["launches"] / 1000, 3),
            "span_ms": round(g["span_us"] / g["launches"] / 1000, 3),
        }
        for key, g in sorted(graphs.items(), key=lambda kv: -kv[1]["kernel_us"])
    ]
    return {"graphs": rows, "graph_launches_without_kernels": empty}


def _stage_gpu(launched: list[_Launched], intervals: list[tuple[float, float]]) -> dict[str, Any]:
    """Per round: GPU ms, span (first event's start to last one's end) and events of what a
    stage's host range launched, and its ms by family."""
    times = [g.at for g in launched]
    gpu: list[dict] = []
    span_us = 0.0
    for start, stop in intervals:
        events = [g.event for g in launched[bisect_left(times, start) : bisect_left(times, stop)]]
        if events:
            span_us += max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)
        gpu += events
    n = len(intervals)
    return {
        "gpu_ms": round(sum(e.get("dur", 0) for e in gpu) / n / 1000, 3),
        "gpu_span_ms": round(span_us / n / 1000, 3),
        "gpu_events": round(len(gpu) / n, 1),
        "gpu_families": _family_ms(gpu, n),
    }


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


def _wait_us(waits: list[dict], intervals: list[tuple[float, float]]) -> float:
    """Host time of the blocking calls that start inside the intervals (``waits`` sorted by start)."""

    def at(ts: float) -> int:
        return bisect_left(waits, ts, key=lambda w: w["ts"])

    return sum(w.get("dur", 0) for start, stop in intervals for w in waits[at(start) : at(stop)])


def _stage_split(
    spans: dict[str, list[tuple[float, float]]], ops: list[dict], launches: list[float], waits: list[dict]
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
            "wait_ms": round(_wait_us(waits, intervals) / n / 1000, 3),
            "top_ops": [(op, round(c / n, 1)) for op, c in names.most_common(TOP_OPS)],
        }
    return split
