"""trace_summary: host cost per decode step and per DDTREE stage from a Chrome trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ddtree_overlay.bench.trace_summary import load_trace, summarize_trace

STAGES = ("draft", "topk", "tree", "verify", "accept", "commit")


def ev(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def ddtree_trace(rounds: int) -> list[dict]:
    """Rounds 1000 us apart. Each stage takes 100 us and launches two kernels from one
    top-level op (with a nested op that must not count); draft and verify replay a graph;
    200 us between rounds hold one scheduler op that launches a kernel and a memcpy."""
    events = [ev("cpu_op", "aten::other_thread", 0, 5000, tid=2), ev("cuda_runtime", "cudaLaunchKernel", 1, 1, tid=2)]
    for r in range(rounds):
        t = 1000.0 * r
        for i, stage in enumerate(STAGES):
            s = t + 100 * i
            events.append(ev("user_annotation", f"ddtree.{stage}", s, 100))
            events.append(ev("cpu_op", f"aten::{stage}_op", s + 10, 50))
            events.append(ev("cpu_op", "aten::nested", s + 20, 10))
            events.append(ev("cuda_runtime", "cudaLaunchKernel", s + 30, 2))
            events.append(ev("cuda_runtime", "cuLaunchKernel", s + 40, 2))
            if stage in ("draft", "verify"):
                events.append(ev("cuda_runtime", "cudaGraphLaunch", s + 60, 5))
        events.append(ev("cpu_op", "scheduler::step", t + 700, 100))
        events.append(ev("cuda_runtime", "cudaLaunchKernel", t + 750, 2))
        events.append(ev("cuda_runtime", "cudaMemcpyAsync", t + 760, 2))
        events.append(ev("cuda_runtime", "cudaStreamSynchronize", t + 770, 2))  # not a launch
    return events


def test_steps_are_counted_between_graph_launches() -> None:
    summary = summarize_trace(ddtree_trace(5))
    steps = summary["steps"]
    assert steps["count"] == 4
    assert steps["host_ms"] == 1.0
    # 6 stages x 2 kernels + 2 graph launches + 2 between-round launches
    assert steps["launches"] == 16.0
    assert steps["graph_launches"] == 2.0


def test_each_stage_gets_its_host_time_launches_and_top_level_ops() -> None:
    stages = summarize_trace(ddtree_trace(5))["stages"]
    assert list(stages) == [*STAGES, "between"]
    assert stages["topk"] == {"rounds": 5, "host_ms": 0.1, "launches": 2.0, "top_ops": [("aten::topk_op", 1.0)]}
    assert stages["verify"]["launches"] == 3.0
    between = stages["between"]
    assert between["rounds"] == 4
    assert between["host_ms"] == 0.4
    assert between["launches"] == 2.0
    assert between["top_ops"] == [("scheduler::step", 1.0)]


def test_plain_decoding_counts_one_graph_per_step() -> None:
    events = []
    for step in range(6):
        t = 500.0 * step
        events.append(ev("cuda_runtime", "cudaGraphLaunch", t, 5))
        events.append(ev("cuda_runtime", "cudaLaunchKernel", t + 100, 2))
    summary = summarize_trace(events, graphs_per_step=1)
    assert summary["steps"] == {"count": 5, "host_ms": 0.5, "launches": 2.0, "graph_launches": 1.0}
    assert "stages" not in summary


def test_load_trace_reads_gzipped_kineto_output_and_keeps_host_events(tmp_path: Path) -> None:
    events = [*ddtree_trace(1), ev("kernel", "gemm", 5, 3), {"ph": "M", "name": "process_name", "pid": 7}]
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    loaded = load_trace(path)
    assert len(loaded) == len(events) - 2
    assert {e["cat"] for e in loaded} == {"cpu_op", "user_annotation", "cuda_runtime"}


def test_a_trace_with_python_stacks_names_the_functions_that_hold_the_host() -> None:
    """Per step: loop (10 us self) calls run_batch (300 us, 100 self) which calls the worker
    (200 us) which recurses once (50 us); then process_result (400 us)."""
    events = []
    for step in range(4):
        t = 1000.0 * step
        events.append(ev("python_function", "loop", t, 710))
        events.append(ev("cuda_runtime", "cudaGraphLaunch", t, 1))
        events.append(ev("cuda_runtime", "cudaGraphLaunch", t + 1, 1))
        events.append(ev("python_function", "run_batch", t + 5, 300))
        events.append(ev("python_function", "worker", t + 10, 200))
        events.append(ev("python_function", "worker", t + 20, 50))
        events.append(ev("python_function", "process_result", t + 305, 400))
    python = summarize_trace(events)["steps"]["python"]
    assert dict(python["self_ms"]) == {
        "process_result": 0.4, "worker": 0.2, "run_batch": 0.1, "loop": 0.01,
    }
    assert dict(python["inclusive_ms"])["worker"] == 0.2  # the recursive frame is not counted twice
    assert dict(python["inclusive_ms"])["loop"] == 0.71


def test_ddtree_between_rounds_gets_its_python_split() -> None:
    events = ddtree_trace(3)
    for r in range(3):
        events.append(ev("python_function", "scheduler.py(1): process_batch_result", 1000.0 * r + 650, 300))
    between = summarize_trace(events)["stages"]["between"]
    assert between["python"]["self_ms"] == [("scheduler.py(1): process_batch_result", 0.3)]
