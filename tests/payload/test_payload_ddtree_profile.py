"""The DDTREE per-round profiler (overlay/.../ddtree_profile.py), with fake CUDA events.

The module is a whole new file we ship into sglang and imports only the standard library and
its switches (ddtree_envs) at module level, so it is loaded here straight from the overlay tree,
without sglang or a GPU.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from fake_cuda_events import FakeGPU
from payload_modules import load_payload_module

PROFILE_PATH = (
    Path(__file__).resolve().parents[2] / "overlay/sglang/srt/speculative/ddtree_profile.py"
)
STAGES = ("draft", "topk", "tree", "verify", "accept", "commit")


dp = load_payload_module("sglang.srt.speculative.ddtree_profile")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(tmp_path: Path, **kwargs):
    gpu, clock = FakeGPU(), FakeClock()
    profiler = dp.DDTreeProfiler(
        str(tmp_path / "profile.jsonl"),
        new_event=gpu.event,
        is_capturing=kwargs.pop("is_capturing", lambda: False),
        clock=clock,
        host_clock=lambda: gpu.now / 1000.0,  # host time moves with the fake GPU, in seconds
        **kwargs,
    )
    return profiler, gpu, clock


def one_round(
    profiler, gpu: FakeGPU, clock: FakeClock, *, bs: int = 4, graph: bool = True, budget: int = 32
) -> None:
    """Stage i takes i + 1 ms of GPU time, with a 0.5 ms gap before each stage."""
    for i, stage in enumerate(STAGES):
        gpu.now += 0.5
        with profiler.stage(stage):
            gpu.now += i + 1
    clock.t += 0.01
    profiler.round_done(bs, cuda_graph=graph, budget=budget)


def lines(tmp_path: Path) -> list[dict]:
    path = tmp_path / "profile.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_disabled_profiler_is_one_shared_no_op_outside_a_trace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SGLANG_DDTREE_PROFILE", raising=False)
    monkeypatch.setattr(dp, "_PROFILER", None)
    profiler = dp.get_ddtree_profiler()
    assert not profiler.enabled
    first, second = profiler.stage("draft"), profiler.stage("verify")
    assert first is second
    with first:
        pass
    profiler.round_done(16, cuda_graph=True)
    profiler.flush()
    assert list(tmp_path.iterdir()) == []


def test_the_environment_variable_is_read_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dp, "_PROFILER", None)
    monkeypatch.setenv("SGLANG_DDTREE_PROFILE", str(tmp_path / "p.jsonl"))
    profiler = dp.get_ddtree_profiler()
    monkeypatch.delenv("SGLANG_DDTREE_PROFILE")
    assert profiler.enabled and profiler.path == str(tmp_path / "p.jsonl")
    assert dp.get_ddtree_profiler() is profiler


def test_module_import_pulls_in_neither_torch_nor_the_rest_of_sglang() -> None:
    # The overlay's folders as the sglang package: the profile may import only its switches.
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(PROFILE_PATH.parents[3])!r})\n"
        "m = importlib.import_module('sglang.srt.speculative.ddtree_profile')\n"
        "m.get_ddtree_profiler()\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'sglang')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = ["sglang", "sglang.srt", "sglang.srt.speculative"]
    modules += ["sglang.srt.speculative.ddtree_envs", "sglang.srt.speculative.ddtree_profile"]
    assert done.stdout.strip() == repr(modules)


def test_a_full_window_is_one_json_line_of_stage_sums(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=4)
    for _ in range(3):
        one_round(profiler, gpu, clock)
    assert lines(tmp_path) == []
    one_round(profiler, gpu, clock, bs=3, graph=False, budget=64)  # a schedule's other budget
    (window,) = lines(tmp_path)
    assert window["profile_version"] == dp.PROFILE_VERSION
    assert window["rounds"] == 4 and window["requests"] == 4 + 4 + 4 + 3
    assert window["cuda_graph_rounds"] == 3
    assert window["batch_sizes"] == {"4": 3, "3": 1}
    assert window["budgets"] == {"32": 3, "64": 1}
    expected = {stage: 4.0 * (i + 1) for i, stage in enumerate(STAGES)}
    # a round spans its first event to its last: stages plus the five gaps between them
    expected["round"] = 4.0 * (sum(range(1, 7)) + 5 * 0.5)
    assert window["ms_sum"] == pytest.approx(expected)
    assert window["ms_max"] == pytest.approx({stage: ms / 4 for stage, ms in expected.items()})
    assert window["host_ms_sum"] == pytest.approx({stage: 4.0 * (i + 1) for i, stage in enumerate(STAGES)})
    assert window["t_first"] == pytest.approx(1000.01) and window["t_last"] == pytest.approx(1000.04)
    assert gpu.syncs == 0


def test_an_attached_view_is_written_with_every_window(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=2)
    state = {"choice": {"16": 64}}
    profiler.attach("adaptive", lambda: dict(state))
    for _ in range(2):
        one_round(profiler, gpu, clock)
    state["choice"] = {"16": 256}
    for _ in range(2):
        one_round(profiler, gpu, clock)
    assert [w["adaptive"] for w in lines(tmp_path)] == [{"choice": {"16": 64}}, {"choice": {"16": 256}}]
    dp.DDTreeNullProfiler().attach("adaptive", lambda: {})  # the disabled profiler takes it too


def test_every_window_names_the_paths_the_engine_runs(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=2)
    paths = dp.engine_paths(split_kv_verify=True, split_kv_draft=True, hybrid_state="flat")
    profiler.attach("paths", lambda: paths)
    for _ in range(4):
        one_round(profiler, gpu, clock)
    expected = {"verify_attention": "splitkv", "draft_attention": "splitkv", "hybrid_state": "flat"}
    assert [w["paths"] for w in lines(tmp_path)] == [expected, expected]
    # a dense target has no recurrent state to name, a drafter on SGLang's kernel no path of DDTREE's
    assert dp.engine_paths(split_kv_verify=False, split_kv_draft=False, hybrid_state=None) == {"verify_attention": "full-mask"}


def test_rounds_wait_for_their_events_without_a_host_sync(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=2)
    gpu.completed = -1.0  # the GPU has finished nothing yet
    for _ in range(5):
        one_round(profiler, gpu, clock)
    assert lines(tmp_path) == [] and gpu.syncs == 0
    gpu.completed = float("inf")  # the GPU caught up
    one_round(profiler, gpu, clock)
    assert [w["rounds"] for w in lines(tmp_path)] == [6]
    assert gpu.syncs == 0


def test_a_round_after_an_idle_gap_writes_what_was_pending(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=64, idle_gap_s=0.2)
    for _ in range(3):
        one_round(profiler, gpu, clock, bs=16)
    assert lines(tmp_path) == []
    clock.t += 0.1
    one_round(profiler, gpu, clock, bs=16)  # no gap: same window
    assert lines(tmp_path) == []
    clock.t += 5.0  # the engine went idle between two benchmark cells
    one_round(profiler, gpu, clock, bs=1)
    (window,) = lines(tmp_path)
    assert window["rounds"] == 4 and window["batch_sizes"] == {"16": 4}
    profiler.flush()
    assert [w["batch_sizes"] for w in lines(tmp_path)] == [{"16": 4}, {"1": 1}]


def test_nothing_is_recorded_while_a_cuda_graph_is_captured(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=1, is_capturing=lambda: True)
    one_round(profiler, gpu, clock)
    profiler.flush()
    assert gpu.created == 0 and lines(tmp_path) == []


def test_events_are_reused_across_windows(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=8)
    for _ in range(100):
        one_round(profiler, gpu, clock)
    assert len(lines(tmp_path)) == 12
    assert gpu.created == 2 * len(STAGES)  # one round of events, folded and reused every round


def test_an_unwritable_file_logs_one_warning_and_decoding_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gpu, clock = FakeGPU(), FakeClock()
    profiler = dp.DDTreeProfiler(
        str(tmp_path / "missing-dir" / "p.jsonl"),
        window_rounds=1,
        new_event=gpu.event,
        is_capturing=lambda: False,
        clock=clock,
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            one_round(profiler, gpu, clock)
    assert len([r for r in caplog.records if "cannot append" in r.getMessage()]) == 1


def test_window_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="window_rounds"):
        dp.DDTreeProfiler(str(tmp_path / "p"), window_rounds=0)


def test_the_sync_guard_sets_torch_sync_debug_mode_for_a_round_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    guard = dp.RoundSyncGuard("error", set_mode=calls.append)
    with pytest.raises(RuntimeError, match="a sync"), guard:
        assert calls == ["error"]
        raise RuntimeError("a sync inside the round")
    assert calls == ["error", "default"]  # reset even when the round raised
    monkeypatch.delenv("SGLANG_DDTREE_SYNC_DEBUG", raising=False)
    with dp.get_round_sync_guard():  # unset: a no-op that needs no torch
        pass
    monkeypatch.setenv("SGLANG_DDTREE_SYNC_DEBUG", "loud")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_SYNC_DEBUG must be"):
        dp.get_round_sync_guard()


def test_each_stage_is_an_annotated_range_for_torch_profiler_traces(tmp_path: Path) -> None:
    opened: list[str] = []
    closed: list[str] = []

    class Range:
        def __init__(self, name: str) -> None:
            self.name = name

        def __enter__(self):
            opened.append(self.name)

        def __exit__(self, *exc_info) -> None:
            closed.append(self.name)

    profiler, gpu, clock = make(tmp_path, annotate=Range)
    one_round(profiler, gpu, clock)
    assert opened == closed == [f"ddtree.{stage}" for stage in STAGES]


def test_one_round_in_n_is_timed_and_the_others_record_nothing(tmp_path: Path) -> None:
    annotated: list[str] = []

    class Range:
        def __init__(self, name: str) -> None:
            annotated.append(name)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info) -> None:
            return None

    profiler, gpu, clock = make(tmp_path, window_rounds=2, sample_every=4, annotate=Range)
    for _ in range(8):
        one_round(profiler, gpu, clock)
    (window,) = lines(tmp_path)
    assert window["rounds"] == 2  # rounds 0 and 4
    assert gpu.created == 2 * len(STAGES)
    assert annotated == [f"ddtree.{stage}" for stage in STAGES] * 2


def test_an_unsampled_round_after_an_idle_gap_writes_the_last_cells_rounds(tmp_path: Path) -> None:
    profiler, gpu, clock = make(tmp_path, window_rounds=64, sample_every=8, idle_gap_s=0.2)
    for _ in range(10):  # rounds 0 and 8 are timed
        one_round(profiler, gpu, clock, bs=16)
    assert lines(tmp_path) == []
    clock.t += 1.0  # the last cell is over; a short health-check request follows
    for _ in range(3):  # rounds 10..12: none is sampled
        one_round(profiler, gpu, clock, bs=1)
    (window,) = lines(tmp_path)
    assert window["rounds"] == 2 and window["batch_sizes"] == {"16": 2}
    assert window["t_last"] < clock.t - 0.5


def test_the_sampling_rate_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dp, "_PROFILER", None)
    monkeypatch.setenv("SGLANG_DDTREE_PROFILE", str(tmp_path / "p.jsonl"))
    monkeypatch.setenv("SGLANG_DDTREE_PROFILE_EVERY", "8")
    assert dp.get_ddtree_profiler().sample_every == 8
    for bad in ("0", "eight", "-1"):
        monkeypatch.setattr(dp, "_PROFILER", None)
        monkeypatch.setenv("SGLANG_DDTREE_PROFILE_EVERY", bad)
        with pytest.raises(ValueError, match="SGLANG_DDTREE_PROFILE_EVERY"):
            dp.get_ddtree_profiler()


def test_stage_ranges_reach_a_torch_profiler_trace_with_the_profiler_on_or_off(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    assert dp._record_function("ddtree.draft") is dp._NULL_STAGE
    gpu, clock = FakeGPU(), FakeClock()
    timing = dp.DDTreeProfiler(
        str(tmp_path / "p.jsonl"), new_event=gpu.event, is_capturing=lambda: False, clock=clock
    )
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with dp.DDTreeNullProfiler().stage("draft"):
            torch.ones(2) + 1
        with timing.stage("verify"):
            torch.ones(2) + 1
    assert {"ddtree.draft", "ddtree.verify"} <= {event.name for event in prof.events()}
