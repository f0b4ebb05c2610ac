"""in_target/engine_runner.py serving bench cells, run by path against a stand-in sglang package."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_sglang

from ddtree_overlay.in_target import engine_runner

RUNNER = Path(engine_runner.__file__)  # run by path, as the tool runs it in the target env
PROMPTS = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11]]


def cell(name: str, bs: int, temperature: float = 0.0, **extra: Any) -> dict[str, Any]:
    sampling = {"temperature": temperature, "max_new_tokens": 6, "ignore_eos": True}
    return {"name": name, "batch_size": bs, "prompts": 5, "sampling": sampling, "est_s": 0.1} | extra


def arm(name: str, engine: dict[str, Any], cells: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "engine": engine, "est_start_s": 0.1, "cells": cells} | extra


def ddtree(budget: int, **extra: Any) -> dict[str, Any]:
    return arm(
        f"ddtree-b{budget}",
        {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": budget},
        [cell(f"ddtree-b{budget}/bs1/t0", 1), cell(f"ddtree-b{budget}/bs2/t0", 2)],
        family="DDTREE",
        profile=True,
        **extra,
    )


# Appended to the stand-in sglang: every engine start also logs these environment variables
# (as "env:NAME", when set), as the engine's scheduler would see them.
LOG_ENV = """
_init_without_env = Engine.__init__
def _init_logging_env(self, **kwargs):
    seen = {{"env:" + name: os.environ[name] for name in {names!r} if name in os.environ}}
    _init_without_env(self, **kwargs, **seen)
Engine.__init__ = _init_logging_env
"""


def run_runner(
    tmp_path: Path, plan: dict[str, Any], behaviour: dict[str, Any] | None = None, log_env: tuple[str, ...] = ()
):
    root = install_fake_sglang(tmp_path / "fake")
    if log_env:
        with (root / "sglang" / "__init__.py").open("a") as f:
            f.write(LOG_ENV.format(names=log_env))
    full = {"target": "/t", "draft": "/d", "prompts": PROMPTS, "idle_gap_s": 0.01, "health_idle_s": 0.01} | plan
    plan_path, out = tmp_path / "plan.json", tmp_path / "records.jsonl"
    plan_path.write_text(json.dumps(full))
    env = os.environ | {
        "PYTHONPATH": str(root),
        "FAKE_SGLANG": json.dumps(behaviour or {}),
        "FAKE_SGLANG_LOG": str(tmp_path / "engines.log"),
    }
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(plan_path), str(out)], capture_output=True, text=True, env=env, check=False
    )
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    log = tmp_path / "engines.log"
    engines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, records, engines


def by_arm(records: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {r["arm"]: r for r in records if r.get("kind") == kind}


def test_one_engine_serves_every_cell_in_waves(tmp_path: Path) -> None:
    plan = {
        "profile_path": str(tmp_path / "profile.jsonl"),
        "arms": [
            arm("target-only", {"attention_backend": "triton"},
                [cell("target-only/bs2/t0", 2), cell("target-only/margins", 5, top2=True),
                 cell("target-only/bs2/t1", 2, 1.0)]),
            ddtree(8),
        ],
    }
    profile_env = ("SGLANG_DDTREE_PROFILE", "SGLANG_DDTREE_PROFILE_EVERY")
    done, records, engines = run_runner(tmp_path, plan, log_env=profile_env)
    assert done.returncode == 0, done.stderr
    assert len(engines) == 2 and engines[1]["speculative_ddtree_budget"] == 8
    # the DDTREE engine profiles one round in 8; target-only is not profiled at all
    assert [(e.get("env:SGLANG_DDTREE_PROFILE"), e.get("env:SGLANG_DDTREE_PROFILE_EVERY")) for e in engines] == [
        (None, None), (str(tmp_path / "profile.jsonl"), "8"),
    ]
    cells, engine_records = by_arm(records, "cell"), by_arm(records, "engine")
    wave = cells["target-only/bs2/t0"]
    assert wave["ok"] and len(wave["wave_s"]) == 3 and len(wave["outputs"]) == 5
    assert wave["tokens"] == 30 and wave["tok_per_s"] == pytest.approx(30 / wave["decode_s"])
    assert wave["timed"] and wave["t_start"] <= wave["t_end"] and wave["batch_size"] == 2
    assert cells["target-only/bs2/t1"]["sampling"]["temperature"] == 1.0
    margins = cells["target-only/margins"]
    assert not margins["timed"] and margins["top2_margins"][0] == [pytest.approx(5.0)] * 6
    assert cells["ddtree-b8/bs1/t0"]["meta"][0]["spec_correct_drafts_histogram"][3] > 0
    assert engine_records["target-only"]["health"] == "ok" and engine_records["target-only"]["profile"] == []
    # the backend each engine ran: the one asked for, or the one SGLang resolved (the stand-in's fa3)
    assert [engine_records[a]["attention_backend"] for a in ("target-only", "ddtree-b8")] == ["triton", "fa3"]
    windows = engine_records["ddtree-b8"]["profile"]
    assert len(windows) >= 2 and all(w["t_first"] >= cells["ddtree-b8/bs1/t0"]["t_start"] - 5 for w in windows)
    tags = [line.split(" ", 1)[0] for line in done.stdout.splitlines()]
    assert tags == ["START", "CELL", "CELL", "CELL", "ENGINE", "START", "CELL", "CELL", "ENGINE"]
    assert "SGLANG_DDTREE_PROFILE" not in os.environ


def test_every_engine_records_how_many_requests_its_scheduler_runs_at_once(tmp_path: Path) -> None:
    plain = arm("target-only", {"max_running_requests": 64}, [cell("target-only/bs2/t0", 2)])
    dflash = arm("dflash", {"speculative_algorithm": "DFLASH", "max_running_requests": 64}, [cell("dflash/bs2/t0", 2)])
    done, records, _ = run_runner(tmp_path, {"arms": [plain, dflash, ddtree(32)]}, {"at_once": {"DFLASH": 11}})
    assert done.returncode == 0, done.stderr
    engines = by_arm(records, "engine")
    assert {name: e["requests_at_once"] for name, e in engines.items()} == {"target-only": 64, "dflash": 11, "ddtree-b32": 48}
    assert '"requests_at_once": 11' in next(line for line in done.stdout.splitlines() if '"dflash"' in line and "ENGINE" in line)


@pytest.mark.parametrize(
    ("states", "at_once"),
    [([{"effective_max_running_requests_per_dp": 11}], 11),
     ([{"effective_max_running_requests_per_dp": 8}, {"effective_max_running_requests_per_dp": 8}], 16),
     ([{"last_gen_throughput": 1.0}], None), ([], None)],
)
def test_requests_at_once_sum_sglangs_cap_over_its_data_parallel_groups(states: list, at_once: int | None) -> None:
    class Engine:
        def get_server_info(self) -> dict[str, Any]:
            return {"internal_states": states}

    assert engine_runner.requests_at_once(Engine()) == at_once


def test_a_past_deadline_skips_engines_without_starting_them(tmp_path: Path) -> None:
    plan = {"deadline": time.time() - 1, "arms": [ddtree(8), ddtree(16)]}
    done, records, engines = run_runner(tmp_path, plan)
    assert done.returncode == 0 and engines == []
    assert {r["skipped"] for r in records} == {"time box"} and len(records) == 6


def test_the_time_box_cuts_the_engine_that_would_not_fit(tmp_path: Path) -> None:
    late = ddtree(16, est_start_s=3600)
    _, records, engines = run_runner(tmp_path, {"deadline": time.time() + 60, "arms": [ddtree(8), late]})
    assert len(engines) == 1
    cells = by_arm(records, "cell")
    assert cells["ddtree-b8/bs2/t0"]["ok"] and cells["ddtree-b16/bs1/t0"]["skipped"] == "time box"


def test_the_cold_start_goes_to_whichever_engine_would_start_first(tmp_path: Path) -> None:
    """The first arm is skipped; the second would be the first to start and pay the kernel
    compiles (cold_start_s), which do not fit either: no engine starts only to be cut off."""
    plan = {"deadline": time.time() + 60, "cold_start_s": 3600,
            "arms": [ddtree(8, est_start_s=3600), ddtree(16)]}
    _, records, engines = run_runner(tmp_path, plan)
    assert engines == [] and {r["skipped"] for r in records} == {"time box"}
    plan["cold_start_s"] = 1.0
    _, records, engines = run_runner(tmp_path / "warm", plan)
    assert len(engines) == 1 and by_arm(records, "cell")["ddtree-b16/bs2/t0"]["ok"]


def test_a_cell_that_would_not_fit_is_skipped_and_the_rest_still_run(tmp_path: Path) -> None:
    group = ddtree(8)
    group["cells"].insert(0, cell("ddtree-b8/bs1/t1", 1, 1.0, est_s=3600))
    _, records, _ = run_runner(tmp_path, {"deadline": time.time() + 60, "arms": [group]})
    cells = by_arm(records, "cell")
    assert cells["ddtree-b8/bs1/t1"]["skipped"] == "time box" and cells["ddtree-b8/bs2/t0"]["ok"]


def test_a_failed_start_skips_its_cells_and_repeated_failures_skip_the_family(tmp_path: Path) -> None:
    plan = {"max_family_failures": 1, "arms": [ddtree(8), ddtree(16), arm("dflash", {"speculative_algorithm": "DFLASH"},
                                                                          [cell("dflash/bs1/t0", 1)], family="DFLASH")]}
    done, records, engines = run_runner(tmp_path, plan, {"fail_start_budgets": [8, 16]})
    assert done.returncode == 1
    assert [e.get("speculative_algorithm") for e in engines] == ["DFLASH"]  # B=16 never started
    engine_records = by_arm(records, "engine")
    assert engine_records["ddtree-b8"]["error"] == "RuntimeError: fake start failure at B=8"
    assert engine_records["ddtree-b16"]["skipped"] == "1 earlier DDTREE engines failed"
    cells = by_arm(records, "cell")
    assert cells["ddtree-b8/bs1/t0"]["skipped"] == "engine failed to start"
    assert cells["dflash/bs1/t0"]["ok"]


def test_a_failed_health_check_fails_the_engine_but_keeps_its_cells(tmp_path: Path) -> None:
    done, records, _ = run_runner(tmp_path, {"arms": [ddtree(8)]}, {"fail_health": True})
    assert done.returncode == 1
    engine = by_arm(records, "engine")["ddtree-b8"]
    assert not engine["ok"] and engine["error"] == "RuntimeError: fake KV leak" and "health" not in engine
    assert all(c["ok"] for c in by_arm(records, "cell").values())


def test_plain_arms_keep_their_one_record_format(tmp_path: Path) -> None:
    plan = {"arms": [{"name": "plain", "engine": {}, "sampling": {"max_new_tokens": 3}, "top2": True}]}
    done, records, _ = run_runner(tmp_path, plan)
    assert done.returncode == 0 and [line.split(" ")[0] for line in done.stdout.splitlines()] == ["START", "ARM"]
    (record,) = records
    assert "kind" not in record and record["arm"] == "plain" and len(record["outputs"]) == 5
    assert record["meta"][0]["completion_tokens"] == 3 and len(record["top2_margins"][0]) == 3
    assert record["t_start"] <= record["t_end"]  # the engine's lifetime: its profile windows


def test_an_arms_env_reaches_its_engine_only(tmp_path: Path) -> None:
    plain = {"engine": {}, "sampling": {"max_new_tokens": 3}}
    arms = [
        plain | {"name": "triton-tree", "env": {"SGLANG_DDTREE_TREE_KERNEL": "triton"}},
        plain | {"name": "default-tree"},
    ]
    done, records, engines = run_runner(tmp_path, {"arms": arms})
    assert done.returncode == 0 and [r["arm"] for r in records] == ["triton-tree", "default-tree"]
    assert [e.get("env:SGLANG_DDTREE_TREE_KERNEL") for e in engines] == ["triton", None]


def test_an_sglang_that_cannot_import_fails_each_engine_not_the_runner(tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "sglang"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("import orjson_that_is_missing\n")
    plan_path, out = tmp_path / "plan.json", tmp_path / "records.jsonl"
    plan_path.write_text(json.dumps({"target": "/t", "draft": "/d", "prompts": PROMPTS, "arms": [ddtree(8), ddtree(16)]}))
    env = os.environ | {"PYTHONPATH": str(broken.parent)}
    done = subprocess.run([sys.executable, str(RUNNER), str(plan_path), str(out)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1
    records = [json.loads(line) for line in out.read_text().splitlines()]
    engines = by_arm(records, "engine")
    assert {e["error"] for e in engines.values()} == {"ModuleNotFoundError: No module named 'orjson_that_is_missing'"}
    assert {c["skipped"] for c in by_arm(records, "cell").values()} == {"engine failed to start"}


# --- repeats: the same arm again, once per round --------------------------------------------


def rounds(*budgets: int) -> list[dict[str, Any]]:
    """Two rounds of DDTREE arms, the second reversed, as bench.plan_json.runner_plan lays them out."""
    return [ddtree(b, repeat=1) for b in budgets] + [ddtree(b, repeat=2) for b in reversed(budgets)]


def test_records_carry_their_engines_repeat(tmp_path: Path) -> None:
    done, records, engines = run_runner(tmp_path, {"arms": rounds(8, 16)})
    assert done.returncode == 0, done.stderr
    assert [e["speculative_ddtree_budget"] for e in engines] == [8, 16, 16, 8]  # a fresh engine per run
    assert [(r["arm"], r["repeat"]) for r in records if r["kind"] == "engine"] == [
        ("ddtree-b8", 1), ("ddtree-b16", 1), ("ddtree-b16", 2), ("ddtree-b8", 2),
    ]
    cells = [(r["arm"], r["repeat"]) for r in records if r["kind"] == "cell"]
    assert cells[:2] == [("ddtree-b8/bs1/t0", 1), ("ddtree-b8/bs2/t0", 1)] and len(set(cells)) == 8
    assert all(r["ok"] for r in records)
    started, first = (json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines()[:2])
    assert (started["arm"], started["repeat"]) == ("ddtree-b8", 1)
    assert first["repeat"] == 1 and first["group"] == "ddtree-b8"


def test_the_time_box_skips_the_second_round_before_any_first_run(tmp_path: Path) -> None:
    """Engine starts take 1.5 s here and are estimated at 0.1 s: both first runs start (the
    estimate says they fit); by round 2 the measured start no longer fits the deadline."""
    plan = {"deadline": time.time() + 3.8, "arms": rounds(8, 16)}
    done, records, engines = run_runner(tmp_path, plan, {"start_sleep_s": 1.5})
    assert done.returncode == 0, done.stderr
    assert [e["speculative_ddtree_budget"] for e in engines] == [8, 16]
    by_repeat = {(r["arm"], r["repeat"]): r for r in records}
    assert all(r["ok"] for (_, repeat), r in by_repeat.items() if repeat == 1)
    assert {r.get("skipped") for (_, repeat), r in by_repeat.items() if repeat == 2} == {"time box"}
    assert len(by_repeat) == 12  # 2 engines x 2 repeats, 2 cells each


def test_a_later_repeat_of_a_failed_engine_is_not_started_again(tmp_path: Path) -> None:
    plan = {"max_family_failures": 2, "arms": rounds(8, 16)}
    done, records, engines = run_runner(tmp_path, plan, {"fail_start_budgets": [8]})
    assert done.returncode == 1
    assert [e["speculative_ddtree_budget"] for e in engines] == [16, 16]  # B=8 raised once, in its constructor
    runs = {(r["arm"], r["repeat"]): r for r in records if r["kind"] == "engine"}
    assert runs["ddtree-b8", 1]["error"] == "RuntimeError: fake start failure at B=8"
    assert runs["ddtree-b8", 2]["skipped"] == "an earlier repeat of this engine failed"
    assert runs["ddtree-b16", 1]["ok"] and runs["ddtree-b16", 2]["ok"]
    # a runner restarted after a crash is told which engines failed before it
    done, records, engines = run_runner(tmp_path / "again", {"failed_arms": ["ddtree-b16"], "arms": rounds(8, 16)[2:]})
    assert done.returncode == 0 and [e["speculative_ddtree_budget"] for e in engines] == [8]
    assert by_arm(records, "engine")["ddtree-b16"]["skipped"] == "an earlier repeat of this engine failed"


def test_warm_up_runs_one_wave_per_temperature_and_batch_size_of_the_cells() -> None:
    """A cell at a batch size nobody warmed would time the kernels compiled for it."""
    runner = engine_runner

    class Engine:
        def __init__(self) -> None:
            self.calls: list[tuple[int, float]] = []

        def generate(self, input_ids, sampling_params):
            self.calls.append((len(input_ids), sampling_params["temperature"]))

    cells = [cell("a/bs1/t0", 1), cell("a/bs4/t0", 4), cell("a/margins", 4, top2=True),
             cell("a/bs1/t1", 1, 1.0), cell("a/bs4/t1", 4, 1.0)]
    engine = Engine()
    runner._warm_up(engine, {"prompts": PROMPTS}, arm("a", {}, cells), itertools.count())
    assert engine.calls == [(1, 0.0), (4, 0.0), (1, 1.0), (4, 1.0)]


def test_warm_up_sends_a_short_wave_at_each_streams_concurrency_off_the_streams_own_prompts() -> None:
    """flashinfer compiled through a whole timed window at an engine's first requests (H200,
    2026-12-04): a stream cell's engine warms up too, with prompts no timed request shares."""
    calls = []

    class Engine:
        def generate(self, input_ids, sampling_params):
            calls.append((input_ids, sampling_params))

    stream = {"concurrency": 3, "warmup_s": 1.0, "window_s": 2.0}
    cells = [cell("a/c3/t0", 3) | {"stream": stream}, cell("a/c3/t0/again", 3) | {"stream": stream},
             cell("a/bs2/t0", 2)]
    sent = itertools.count()
    engine_runner._warm_up(Engine(), {"prompts": PROMPTS, "stream_warm_up_tokens": 5}, arm("a", {}, cells), sent)
    (ids, params), (waves_ids, _) = calls
    assert len(ids) == 3 and params["max_new_tokens"] == 5 and params["temperature"] == 0.0
    stream_ids = [i for i, _ in itertools.islice(engine_runner.stream_requests(PROMPTS, itertools.count(), params), 3)]
    assert ids == stream_ids  # the stream's first three requests, salted as every stream request is
    assert next(sent) == 3  # the stream's timed requests continue the sequence: none repeats the wave's
    assert waves_ids == PROMPTS[:2]
    calls.clear()
    engine_runner._warm_up(Engine(), {"prompts": PROMPTS}, arm("a", {}, cells[:1]), itertools.count())
    assert calls == []  # a plan from before the stream warm-up: the stream's own warmup_s only


def fake_proc(root: Path, *, load1: float, busy: int, idle: int, children: dict[int, int],
              others: dict[int, int] | None = None) -> Path:
    """A /proc with one runner (pid 10, gone from /proc/10/stat: left out) whose children
    (pid -> utime jiffies) sit on CPUs 2-3, and other processes (pid -> utime jiffies)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "loadavg").write_text(f"{load1} 1.0 1.0 2/300 99\n")
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    (root / "10" / "task" / "10").mkdir(parents=True, exist_ok=True)
    (root / "10" / "task" / "10" / "children").write_text(" ".join(map(str, children)) + " ")
    for pid, utime in children.items():
        (root / str(pid) / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "task" / str(pid) / "children").write_text("")
        fields = ["S"] + ["0"] * 10 + [str(utime), "5"] + ["0"] * 23 + ["3"]  # utime, stime; CPU 3
        (root / str(pid) / "stat").write_text(f"{pid} (sglang::sched ler) " + " ".join(fields) + "\n")
        (root / str(pid) / "status").write_text("Name:\tx\nCpus_allowed_list:\t2-3\n")
    for pid, utime in (others or {}).items():
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        fields = ["S"] + ["0"] * 10 + [str(utime), "0"] + ["0"] * 24
        (root / str(pid) / "stat").write_text(f"{pid} (other {pid}) " + " ".join(fields) + "\n")
    return root


def test_the_host_around_a_cell_comes_from_proc(tmp_path: Path) -> None:
    runner = engine_runner
    tick = os.sysconf("SC_CLK_TCK")
    topology = tmp_path / "sys" / "cpu3" / "topology"
    topology.mkdir(parents=True)
    (topology / "physical_package_id").write_text("1\n")
    (topology / "core_id").write_text("9\n")
    sys_cpu = str(tmp_path / "sys")
    others_before = {40: 0, 41: 0, 42: 0, 43: 0, 44: 0, 45: 50}
    others_after = {40: 6 * tick, 41: 2 * tick, 42: 4 * tick, 43: tick, 44: tick // 100, 46: 9 * tick}
    before = runner.host_sample(
        str(fake_proc(tmp_path / "a", load1=0.5, busy=1000, idle=1000, children={20: 100}, others=others_before)),
        10, sys_cpu,
    )
    after = runner.host_sample(
        str(fake_proc(tmp_path / "b", load1=2.5, busy=1300, idle=1100, children={20: 100 + tick, 21: 7},
                      others=others_after)),
        10, sys_cpu,
    )
    assert before["processes"]["20"] == {
        "comm": "sglang::sched ler", "jiffies": 105, "last_cpu": 3, "core": "1/9", "cpus": "2-3",
    }
    host = runner.host_during(before, after, wall_s=2.0)
    assert host["load1"] == [0.5, 2.5]
    assert host["busy_cores"] == pytest.approx(0.75 * host["cpus"], abs=0.01)
    # a process that started during the cell has no "before": left out
    assert host["processes"] == [
        {"pid": 20, "comm": "sglang::sched ler", "cpu_per_wall": 0.5, "cpus": "2-3", "last_cpu": 3, "core": "1/9"},
    ]
    # the busiest three outside the engine; one below 0.05 CPU s/s, one gone and one new are left out
    assert host["others"] == [
        {"pid": 40, "comm": "other 40", "cpu_per_wall": 3.0},
        {"pid": 42, "comm": "other 42", "cpu_per_wall": 2.0},
        {"pid": 41, "comm": "other 41", "cpu_per_wall": 1.0},
    ]
    assert runner.host_sample(str(tmp_path / "no-proc")) is None
    assert runner.host_during(None, after, 2.0) is None


def test_every_timed_cell_records_the_host(tmp_path: Path) -> None:
    done, records, _ = run_runner(tmp_path, {"arms": [ddtree(8)]})
    assert done.returncode == 0, done.stderr
    for record in by_arm(records, "cell").values():
        host = record["host"]  # busy_cores is None for a cell shorter than a clock tick
        assert host["cpus"] == os.cpu_count() and len(host["load1"]) == 2 and "processes" in host


# --- the bench's untimed primer engine -------------------------------------------------------


def test_the_primer_is_tagged_and_does_not_rescale_the_time_box(tmp_path: Path) -> None:
    """Every decode takes 0.3 s against a primer cell estimated at 0.01 s: counted, that would
    make every later estimate 4x (the most the box rescales), and the next engine's 8 s cell
    would not fit in the 20 s left; the primer's cells are not counted, so it runs."""
    primer = arm("primer", {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 8},
                 [cell("primer/bs5/t0", 5, est_s=0.01)], family="primer", primer=True)
    timed = ddtree(16)
    timed["cells"] = [cell(c["name"], c["batch_size"], est_s=8.0) for c in timed["cells"]]
    plan = {"deadline": time.time() + 20, "arms": [primer, timed]}
    done, records, engines = run_runner(tmp_path, plan, {"sleep_s": 0.3})
    assert done.returncode == 0, done.stderr
    assert [e["speculative_ddtree_budget"] for e in engines] == [8, 16]
    assert {r["arm"] for r in records if r.get("primer")} == {"primer", "primer/bs5/t0"}
    assert all(r["ok"] and r["kind"] in ("cell", "engine") for r in records)
    assert not any("primer" in r for r in records if r.get("group", r["arm"]) == "ddtree-b16")
    # the same engine untagged is measured like any other: the next one no longer fits
    plan["arms"][0] = {k: v for k, v in primer.items() if k != "primer"}
    plan["deadline"] = time.time() + 20
    _, records, engines = run_runner(tmp_path / "untagged", plan, {"sleep_s": 0.3})
    assert [e["speculative_ddtree_budget"] for e in engines] == [8]
    assert by_arm(records, "engine")["ddtree-b16"]["skipped"] == "time box"
