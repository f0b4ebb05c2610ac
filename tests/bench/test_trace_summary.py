"""trace_summary: host cost per decode step and per DDTREE stage from a Chrome trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ddtree_overlay.bench.engine_paths import SPLIT_KV_KERNEL
from ddtree_overlay.bench.kernel_families import MEMORY, short_kernel_name
from ddtree_overlay.bench.trace_summary import TOP_KERNELS, load_trace, summarize_trace

STAGES = ("draft", "topk", "tree", "verify", "accept", "commit")


def ev(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def ddtree_trace(rounds: int) -> list[dict]:
    """Rounds 1000 us apart. Each stage takes 100 us and launches two kernels from one
    top-level op (with a nested op that must not count); draft and verify replay a graph;
    200 us between rounds hold one scheduler op that launches a kernel and a memcpy, then wait
    80 us for the GPU."""
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
        events.append(ev("cuda_runtime", "cudaStreamSynchronize", t + 770, 80))  # not a launch: a wait
    return events


def test_a_ddtree_traces_steps_are_its_rounds() -> None:
    summary = summarize_trace(ddtree_trace(5))
    steps = summary["steps"]
    assert (steps["count"], steps["unit"]) == (4, "round")
    assert steps["host_ms"] == 1.0
    # 6 stages x 2 kernels + 2 graph launches + 2 between-round launches
    assert steps["launches"] == 16.0
    assert steps["graph_launches"] == 2.0
    assert steps["wait_ms"] == 0.08


def test_each_stage_gets_its_host_time_launches_and_top_level_ops() -> None:
    stages = summarize_trace(ddtree_trace(5))["stages"]
    assert list(stages) == [*STAGES, "between"]
    assert stages["topk"] == {
        "rounds": 5, "host_ms": 0.1, "launches": 2.0, "wait_ms": 0.0, "top_ops": [("aten::topk_op", 1.0)]
    }
    assert stages["verify"]["launches"] == 3.0
    between = stages["between"]
    assert between["rounds"] == 4
    assert between["host_ms"] == 0.4
    assert between["launches"] == 2.0
    assert between["wait_ms"] == 0.08  # of its 0.4 host ms, the host waited 0.08 for the GPU
    assert between["top_ops"] == [("scheduler::step", 1.0)]


def test_plain_decoding_counts_one_graph_per_step() -> None:
    events = []
    for step in range(6):
        t = 500.0 * step
        events.append(ev("cuda_runtime", "cudaGraphLaunch", t, 5))
        events.append(ev("cuda_runtime", "cudaLaunchKernel", t + 100, 2))
    summary = summarize_trace(events, graphs_per_step=1)
    assert summary["steps"] == {
        "count": 5, "unit": "step", "host_ms": 0.5, "launches": 2.0, "graph_launches": 1.0, "wait_ms": 0.0
    }
    assert "stages" not in summary


def test_load_trace_reads_gzipped_kineto_output_and_keeps_host_and_gpu_events(tmp_path: Path) -> None:
    kineto = [*dflash_trace(3).events, *ddtree_gpu_trace(1).events]
    events = [*ddtree_trace(1), *kineto, {"ph": "M", "name": "process_name", "pid": 7}]
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    loaded = load_trace(path)
    flows = sum(e["ph"] in ("s", "f") for e in kineto)
    assert flows and len(loaded) == len(events) - flows - 2  # the metadata and the GPU-side annotation
    assert {e["cat"] for e in loaded} == {
        "cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset",
    }


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


# --- the GPU side -------------------------------------------------------------------------------

GEMM_DRAFT = "nvjet_tst_128x8_64x3_1x1_v_bz_TNN"
GEMM_VERIFY = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
RMSNORM = "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)"
ARGMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4> >"
    "(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>)"
)
TOPK = "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int)"
INDEX = "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl<at::native::OpaqueType<2> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_put_kernel_impl<at::native::OpaqueType<2> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1}>(long, at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl<at::native::OpaqueType<2> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_put_kernel_impl<at::native::OpaqueType<2> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1})"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, std::array<char*, 1ul> >(int, at::native::FillFunctor<long>, std::array<char*, 1ul>)"
H2D = "Memcpy HtoD (Pinned -> Device)"
D2H = "Memcpy DtoH (Device -> Pinned)"


class KinetoTrace:
    """Events shaped as torch.profiler's Chrome trace writes them: host launches (``cuda_runtime``,
    pid/tid of the process and thread) with a ``correlation``, and their GPU events (pid the
    device, tid the stream) carrying the same ``correlation``, tied by an ``ac2g`` flow; the
    kernels of a graph replay all carry the ``cudaGraphLaunch``'s correlation and a ``graph id``."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.correlation = 100

    def host(self, cat: str, name: str, ts: float, dur: float, tid: int = 1) -> None:
        self.events.append(ev(cat, name, ts, dur, tid))

    def launch(self, api: str, ts: float, gpu: list[tuple], *, tid: int = 1, graph: int | None = None) -> None:
        """``gpu``: (name, GPU start, duration[, category[, stream]]) per event it brings."""
        self.correlation += 1
        corr = self.correlation
        self.events.append(
            ev("cuda_runtime", api, ts, 3, tid) | {"args": {"External id": corr + 5000, "cbid": 311, "correlation": corr}}
        )
        self.events.append({"ph": "s", "id": corr, "pid": 7, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"})
        for node, (name, start, dur, *rest) in enumerate(gpu):
            cat, stream = (rest + ["kernel", 7][len(rest):])[:2]
            args = {"External id": corr + 5000, "device": 0, "context": 1, "stream": stream, "correlation": corr}
            if graph is not None:
                args |= {"graph id": graph, "graph node id": 1000 * graph + node}
            self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start, "dur": dur, "args": args})
            self.events.append(
                {"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": start, "cat": "ac2g", "name": "ac2g", "bp": "e"}
            )


def dflash_trace(steps: int, *, graph_kernels: bool = True) -> KinetoTrace:
    """Steps 1000 us apart: a draft graph (2 kernels), a verify graph (2 kernels), an eager argmax
    and a D2H copy on a second stream that overlaps it; plus a kernel whose launch the trace lost
    and a GPU-side annotation, neither of which may count."""
    trace = KinetoTrace()
    for step in range(steps):
        t = 1000.0 * step
        draft = [(GEMM_DRAFT, t + 300, 30), ("_fwd_grouped_kernel_stage1", t + 330, 20)]
        verify = [(GEMM_VERIFY, t + 400, 100), ("_fwd_kernel", t + 500, 50)]
        trace.launch("cudaGraphLaunch", t + 10, draft if graph_kernels else [], graph=10)
        trace.launch("cudaGraphLaunch", t + 100, verify if graph_kernels else [], graph=11)
        trace.launch("cudaLaunchKernel", t + 200, [(ARGMAX, t + 560, 5)])
        trace.launch("cudaMemcpyAsync", t + 210, [(D2H, t + 560, 3, "gpu_memcpy", 9)])
    trace.events.append({"ph": "X", "cat": "kernel", "name": GEMM_VERIFY, "pid": 0, "tid": 7, "ts": 600, "dur": 999, "args": {"correlation": 1}})
    trace.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "ddtree.verify", "pid": 0, "tid": 7, "ts": 400, "dur": 999})
    return trace


def test_gpu_time_per_step_by_family_and_kernel_with_graph_replays_counted() -> None:
    gpu = summarize_trace(dflash_trace(6).events)["gpu"]
    # 12 graph launches: 5 whole steps, [0, 5000)
    assert (gpu["per"], gpu["count"]) == ("step", 5)
    assert gpu["kernel_ms"] == 0.208  # 30 + 20 + 100 + 50 + 5 + 3 us
    assert gpu["busy_ms"] == 0.205  # the copy runs under the argmax
    assert gpu["span_ms"] == 1.0
    assert gpu["events"] == 6.0
    assert gpu["families"] == {"attention": 0.07, "gemm": 0.13, "sampling/top-k": 0.005, MEMORY: 0.003}
    assert gpu["top_kernels"][:3] == [(GEMM_VERIFY, 0.1, 1.0), ("_fwd_kernel", 0.05, 1.0), (GEMM_DRAFT, 0.03, 1.0)]
    assert gpu["graphs"] == [
        {"graph": "graph 11", "launches": 1.0, "events": 2.0, "kernel_ms": 0.15, "span_ms": 0.15},
        {"graph": "graph 10", "launches": 1.0, "events": 2.0, "kernel_ms": 0.05, "span_ms": 0.05},
    ]
    assert gpu["graph_launches_without_kernels"] == 0


def test_the_path_kernels_calls_are_counted_even_when_they_are_not_among_the_busiest() -> None:
    trace = KinetoTrace()
    busy = [(f"gemm_{i}", 100.0 + 10 * i, 9) for i in range(TOP_KERNELS)]  # a dozen kernels longer than the partial kernel
    for step in range(6):
        t = 1000.0 * step
        partials = [(SPLIT_KV_KERNEL, t + 600 + 10 * i, 1) for i in range(3)]
        trace.launch("cudaGraphLaunch", t + 10, [(name, t + start, dur) for name, start, dur in busy] + partials, graph=10)
        trace.launch("cudaGraphLaunch", t + 100, [(GEMM_VERIFY, t + 700, 50)], graph=11)
    gpu = summarize_trace(trace.events)["gpu"]
    assert SPLIT_KV_KERNEL not in {name for name, _ms, _calls in gpu["top_kernels"]}
    assert gpu["path_kernel_calls"] == {SPLIT_KV_KERNEL: 3.0}
    assert summarize_trace(dflash_trace(6).events)["gpu"]["path_kernel_calls"] == {}


def test_graph_launches_without_kernels_are_counted_and_the_span_still_covers_them() -> None:
    gpu = summarize_trace(dflash_trace(6, graph_kernels=False).events)["gpu"]
    assert gpu["kernel_ms"] == 0.008
    assert gpu["graphs"] == [] and gpu["graph_launches_without_kernels"] == 10
    assert gpu["span_ms"] == 1.0


def test_a_graph_without_a_graph_id_is_named_by_its_first_kernel() -> None:
    trace = dflash_trace(6)
    for e in trace.events:
        e.get("args", {}).pop("graph id", None)
    names = [g["graph"] for g in summarize_trace(trace.events)["gpu"]["graphs"]]
    assert names == [f"2 events from {GEMM_VERIFY[:71]}…", f"2 events from {GEMM_DRAFT}"]


def ddtree_gpu_trace(rounds: int) -> KinetoTrace:
    """Rounds 2000 us apart, each stage 200 us of host time, the GPU 500 us behind the host. A
    round replays four graphs (draft, top-K, verify, commit) and launches eager kernels and
    copies; between rounds the decode thread copies the result back while another thread
    launches a kernel (the round's GPU total counts it, no stage does)."""
    trace = KinetoTrace()
    for r in range(rounds):
        t = 2000.0 * r
        g = t + 500
        for i, stage in enumerate(STAGES):
            trace.host("user_annotation", f"ddtree.{stage}", t + 200 * i, 200)
        trace.launch("cudaGraphLaunch", t + 50, [("_draft_block_kernel", g, 10), (GEMM_DRAFT, g + 10, 40)], graph=1)
        trace.launch("cudaGraphLaunch", t + 250, [(TOPK, g + 60, 8)], graph=2)
        trace.launch("cudaLaunchKernel", t + 450, [("_best_first_tree_kernel", g + 80, 6)])
        trace.launch("cudaMemcpyAsync", t + 500, [(H2D, g + 90, 2, "gpu_memcpy")])
        verify = [(GEMM_VERIFY, g + 100, 100), ("_fwd_kernel", g + 200, 60), (RMSNORM, g + 260, 10)]
        trace.launch("cudaGraphLaunch", t + 650, verify, graph=3)
        trace.launch("cudaLaunchKernel", t + 850, [("_accepted_kernel", g + 280, 4)])
        commit = [(INDEX, g + 290, 5), ("Memset (Device)", g + 291, 3, "gpu_memset", 9)]
        trace.launch("cudaGraphLaunch", t + 1050, commit, graph=4)
        trace.launch("cudaMemcpyAsync", t + 1300, [(D2H, t + 1305, 2, "gpu_memcpy")])
        trace.launch("cudaLaunchKernel", t + 1500, [(FILL, t + 1510, 7)], tid=2)
    return trace


def test_a_ddtree_step_is_a_round_whatever_graphs_it_replays() -> None:
    summary = summarize_trace(ddtree_gpu_trace(5).events)
    # host and GPU alike: four rounds from the first draft to the last, four graphs each
    assert {k: summary["steps"][k] for k in ("count", "unit", "host_ms", "graph_launches")} == {
        "count": 4, "unit": "round", "host_ms": 2.0, "graph_launches": 4.0,
    }
    gpu = summary["gpu"]
    assert (gpu["per"], gpu["count"]) == ("round", 4)
    assert gpu["kernel_ms"] == 0.257
    assert gpu["busy_ms"] == 0.254  # the memset runs under the index kernel
    assert gpu["span_ms"] == 2.0
    assert gpu["families"] == {
        "ddtree": 0.02,  # draft block 10, tree 6, accepted 4
        "attention": 0.06,
        "gemm": 0.14,
        "sampling/top-k": 0.008,
        "norm/act/rope/elementwise": 0.022,  # RMSNorm 10, index 5, fill 7
        MEMORY: 0.007,
    }
    assert [g["graph"] for g in gpu["graphs"]] == ["graph 3", "graph 1", "graph 2", "graph 4"]
    assert all(g["launches"] == 1.0 for g in gpu["graphs"])


def test_each_ddtree_stage_gets_the_gpu_time_of_what_it_launched() -> None:
    stages = summarize_trace(ddtree_gpu_trace(5).events)["stages"]
    gpu = {name: {k: v for k, v in s.items() if k.startswith("gpu_")} for name, s in stages.items()}
    assert gpu["draft"] == {
        "gpu_ms": 0.05, "gpu_span_ms": 0.05, "gpu_events": 2.0, "gpu_families": {"ddtree": 0.01, "gemm": 0.04},
    }
    assert gpu["verify"] == {
        "gpu_ms": 0.17, "gpu_span_ms": 0.17, "gpu_events": 3.0,
        "gpu_families": {"attention": 0.06, "gemm": 0.1, "norm/act/rope/elementwise": 0.01},
    }
    assert gpu["tree"]["gpu_ms"] == 0.008 and gpu["tree"]["gpu_span_ms"] == 0.012  # 80 .. 92 us
    assert gpu["commit"]["gpu_ms"] == 0.008 and gpu["commit"]["gpu_span_ms"] == 0.005
    assert gpu["between"] == {"gpu_ms": 0.002, "gpu_span_ms": 0.002, "gpu_events": 1.0, "gpu_families": {MEMORY: 0.002}}
    # the host side is untouched
    assert stages["verify"]["launches"] == 1.0 and stages["verify"]["rounds"] == 5


def test_each_gpu_gap_is_charged_to_the_event_that_ends_it_by_what_it_waited_for() -> None:
    """Steps 1000 us apart: a graph of two kernels 5 us apart, an eager kernel launched after
    the GPU ran dry, one launched early that starts 5 us after the previous ends, and the long
    wait until the next step's graph, whose launch came after the GPU had gone idle."""
    trace = KinetoTrace()
    for step in range(6):
        t = 1000.0 * step
        trace.launch("cudaGraphLaunch", t + 10, [(GEMM_VERIFY, t + 300, 30), ("_fwd_kernel", t + 335, 20)], graph=3)
        trace.launch("cudaLaunchKernel", t + 360, [(ARGMAX, t + 365, 10)])
        trace.launch("cudaLaunchKernel", t + 200, [(RMSNORM, t + 380, 5)])
    gpu = summarize_trace(trace.events, graphs_per_step=1)["gpu"]
    idle = gpu["idle"]
    assert idle["idle_ms"] == round(gpu["span_ms"] - gpu["busy_ms"], 3) == 0.935
    assert (idle["inside_graphs_ms"], idle["launched_late_ms"], idle["queued_ms"]) == (0.005, 0.925, 0.005)
    assert idle["largest"][:2] == [
        {"before": short_kernel_name(GEMM_VERIFY), "kind": "launched_late", "ms": 0.915, "gaps": 1.0},
        {"before": short_kernel_name(ARGMAX), "kind": "launched_late", "ms": 0.01, "gaps": 1.0},
    ]
    assert "by_stage" not in idle


def test_a_ddtree_rounds_gpu_idle_is_split_by_the_stage_that_launched_what_ended_it() -> None:
    idle = summarize_trace(ddtree_gpu_trace(5).events)["gpu"]["idle"]
    assert idle["idle_ms"] == 1.746  # a 2000 us round, 254 us busy
    assert idle["inside_graphs_ms"] == 0.0 and idle["queued_ms"] == 0.026 and idle["launched_late_ms"] == 1.72
    assert idle["by_stage"] == {
        "draft": {"idle_ms": 0.983, "launched_late_ms": 0.983},  # the next round's draft graph
        "between": {"idle_ms": 0.51, "launched_late_ms": 0.51},  # the result's copy back
        "other": {"idle_ms": 0.203, "launched_late_ms": 0.203},  # another thread's kernel
        "tree": {"idle_ms": 0.016, "queued_ms": 0.016},
        "topk": {"idle_ms": 0.01, "queued_ms": 0.01},
        "accept": {"idle_ms": 0.01, "launched_late_ms": 0.01},
        "verify": {"idle_ms": 0.008, "launched_late_ms": 0.008},  # its graph launched 58 us after the copy ended
        "commit": {"idle_ms": 0.006, "launched_late_ms": 0.006},
    }
