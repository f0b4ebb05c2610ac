"""in_target/engine_runner.py's continuous-batching cells: the stream against a fake engine, the
window's token count, and a stream cell run by path against the stand-in sglang."""

from __future__ import annotations

import asyncio
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

RUNNER = Path(engine_runner.__file__)


class StreamEngine:
    """An engine with SGLang's async surface: each request takes ``request_s`` and emits
    ``tokens``; it records how many requests ran at once and every prompt it was sent."""

    def __init__(self, request_s: float, tokens: int = 8) -> None:
        self.loop = asyncio.new_event_loop()
        self.request_s, self.tokens = request_s, tokens
        self.running = self.most_running = 0
        self.prompts: list[tuple[int, ...]] = []
        self.lengths: list[int] = []

    async def async_generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> dict[str, Any]:
        self.prompts.append(tuple(input_ids))
        self.lengths.append(sampling_params["max_new_tokens"])
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(self.request_s)
        self.running -= 1
        n = sampling_params["max_new_tokens"]
        return {"output_ids": [0] * n, "meta_info": {"completion_tokens": n, "spec_verify_ct": n // 4}}


def stream_cell(concurrency: int, warmup_s: float, window_s: float, prompts: int = 3) -> dict[str, Any]:
    return {
        "name": f"dflash/c{concurrency}/t0",
        "batch_size": concurrency,
        "prompts": prompts,
        "sampling": {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True},
        "stream": {"concurrency": concurrency, "warmup_s": warmup_s, "window_s": window_s},
    }


PLAN = {"prompts": [[5, 6, 7], [8, 9], [10, 11, 12, 13]], "idle_gap_s": 0.0}


def test_the_stream_keeps_the_concurrency_and_counts_the_windows_tokens() -> None:
    engine = StreamEngine(request_s=0.05)
    record = engine_runner.run_stream_cell(engine, PLAN, {"name": "dflash"}, stream_cell(4, 0.1, 0.5), itertools.count())
    assert engine.most_running == 4
    assert record["ok"] and record["concurrency"] == 4 and record["decode_s"] == pytest.approx(0.5)
    # 4 clients x 8 tokens (on average) per 0.05 s request = 640 tok/s, less the gaps between requests
    assert 450 < record["tok_per_s"] < 700
    assert record["mean_running"] == pytest.approx(4, rel=0.15)
    assert record["requests_total"] > record["requests_in_window"] >= 32
    assert len(record["meta"]) == record["requests_in_window"] == len(record["requests"])
    assert record["wall_s"] >= 0.6 and record["t_end"] - record["t_start"] == pytest.approx(0.5)


def test_no_two_requests_share_a_prompt_across_the_engines_cells() -> None:
    engine = StreamEngine(request_s=0.01)
    sent = itertools.count()
    for _ in range(2):
        engine_runner.run_stream_cell(engine, PLAN, {"name": "dflash"}, stream_cell(2, 0.0, 0.1), sent)
    assert len(engine.prompts) > 2 * len(PLAN["prompts"])
    assert len(set(engine.prompts)) == len(engine.prompts)
    assert {p[2:] for p in engine.prompts} == {tuple(p[2:]) for p in PLAN["prompts"]}  # only two tokens vary
    assert {len(p) for p in engine.prompts} == {len(p) for p in PLAN["prompts"]}


def test_a_straddling_request_counts_its_share_inside_the_window() -> None:
    def request(start: float, end: float, tokens: int = 100) -> dict[str, Any]:
        return {"t_submit": start, "t_done": end, "meta": {"completion_tokens": tokens}}

    requests = [request(0, 10), request(8, 12), request(11, 20), request(20, 30), request(-5, 1)]
    tokens, busy = engine_runner.window_tokens(requests, 10.0, 20.0)
    assert tokens == pytest.approx(50 + 100 + 0)  # half of [8, 12], all of [11, 20]
    assert busy == pytest.approx(2 + 9)


def test_a_stream_cell_runs_by_path_with_its_host_and_profile(tmp_path: Path) -> None:
    root = install_fake_sglang(tmp_path / "fake")
    arm = {
        "name": "ddtree-b8",
        "family": "DDTREE",
        "engine": {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 8},
        "est_start_s": 0.1,
        "profile": True,
        "cells": [stream_cell(2, 0.1, 0.4) | {"name": "ddtree-b8/c2/t0", "est_s": 1.0, "prompts": 3}],
    }
    plan = {"target": "/t", "draft": "/d", "prompts": PLAN["prompts"], "idle_gap_s": 0.01, "health_idle_s": 0.01,
            "profile_path": str(tmp_path / "profile.jsonl"), "arms": [arm]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = os.environ | {"PYTHONPATH": str(root), "FAKE_SGLANG": json.dumps({"request_s": 0.02}),
                        "FAKE_SGLANG_LOG": str(tmp_path / "engines.log")}
    started = time.time()
    done = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "plan.json"), str(tmp_path / "out.jsonl")],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    cell, engine = records
    assert cell["kind"] == "cell" and cell["ok"] and cell["tok_per_s"] > 0
    assert started < cell["t_start"] < cell["t_end"]
    assert cell["host"] is None or cell["host"]["cpus"] >= 1
    assert cell["meta"][0]["spec_verify_ct"] > 0
    assert engine["kind"] == "engine" and engine["ok"] and engine["profile"]


def test_request_lengths_spread_around_the_cells_so_requests_do_not_finish_in_lockstep() -> None:
    sampling = {"temperature": 0.0, "max_new_tokens": 100, "ignore_eos": True}
    requests = engine_runner.stream_requests(PLAN["prompts"], itertools.count(), sampling)
    lengths = [params["max_new_tokens"] for _, params in itertools.islice(requests, 200)]
    assert min(lengths) >= 50 and max(lengths) <= 150
    assert sum(lengths) / len(lengths) == pytest.approx(100, abs=1.5)
    assert len(set(lengths[:16])) == 16  # 16 requests started together end apart
    assert sampling["max_new_tokens"] == 100  # the cell's own params untouched


def test_a_failed_request_stops_every_client_of_the_stream() -> None:
    class FailingEngine(StreamEngine):
        async def async_generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> dict[str, Any]:
            if len(self.prompts) == 5:
                raise RuntimeError("fake scheduler crash")
            return await super().async_generate(input_ids, sampling_params)

    engine = FailingEngine(request_s=0.01)
    with pytest.raises(RuntimeError, match="fake scheduler crash"):
        engine_runner.run_stream_cell(engine, PLAN, {"name": "dflash"}, stream_cell(3, 0.0, 5.0), itertools.count())
    sent = len(engine.prompts)
    engine.loop.run_until_complete(asyncio.sleep(0.1))  # the loop runs again (as for a health check)
    assert len(engine.prompts) == sent  # no client sends any more
