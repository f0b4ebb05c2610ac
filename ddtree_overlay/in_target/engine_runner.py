"""Run decode arms through ``sglang.Engine`` inside the target env's own interpreter.

    python engine_runner.py PLAN.json OUT.jsonl

This file is executed by path with the env's python, so it imports only the
standard library at module level (sglang and torch inside functions). PLAN:

    {"target": DIR, "draft": DIR, "prompts": [[ids...], ...],
     "arms": [{"name": str, "engine": {Engine kwargs}, "sampling": {...},
               "sampling_cycle": [{...}, ...], "repeat": int, "top2": bool, "env": {NAME: value}}]}

Each arm starts an Engine, warms it up, decodes every prompt at once (repeat
times each, as concurrent requests; request i's sampling is ``sampling``
updated by ``sampling_cycle[i % len]`` where the arm has one, e.g. a regex),
checks the engine is still healthy after going idle (SGLang's strict KV-leak
check raises on idle), shuts down, and appends one JSON line to OUT. ``env``
(here and in cell arms) is set while the arm's engine lives (its scheduler
process inherits it), e.g. ``SGLANG_DDTREE_TREE_KERNEL``. A line per arm also
goes to stdout, prefixed ``ARM``, and one as each engine begins to start
(``START``), so a caller can show progress.

An arm with ``"cells"`` instead serves several measurements from one engine
(engine starts cost ~45 s on an H200, so the bench groups by engine config):

    {"name": str, "repeat": int, "engine": {...}, "est_start_s": float, "profile": bool,
     "cells": [{"name": str, "batch_size": int, "prompts": int,
                "sampling": {...}, "top2": bool, "est_s": float}, ...]}

Here ``repeat`` (default 1) is not a prompt multiplier: it numbers the sweep's
repeat this engine belongs to (``bench --repeats``: the same arm name comes
again, once per repeat, each a fresh engine) and goes into every record the arm
writes, so repeats stay apart.

Each cell decodes the first ``prompts`` prompts in waves of ``batch_size``
concurrent requests, or, with ``"stream": {"concurrency": C, "warmup_s": W,
"window_s": S}``, serves them as a continuous stream (see ``run_stream_cell``),
and appends a ``{"kind": "cell", ...}`` line (``CELL`` on
stdout), with ``host``: what the machine did meanwhile (Linux ``/proc``: load
average, busy cores, and the engine processes' CPU time and CPU sets), since
host-bound arms move far more between engines than between budgets. The engine
appends a ``{"kind": "engine", ...}`` line (``ENGINE``) with its start time, the attention
backend it ran, the requests its scheduler runs at once (``requests_at_once``: SGLang's cap),
health check and, when the plan has ``profile_path`` and
the arm ``profile``, the DDTREE profile windows written while it ran
(``SGLANG_DDTREE_PROFILE``, see ddtree_profile.py). With a plan-level
``deadline`` (unix time), engines and cells that would not finish by then are
recorded as skipped instead of run; arms run strictly in plan order, so with the
bench's rounds the time box cuts later repeats before any arm's first run. An
arm whose name failed before (in this process, or listed in the plan's
``failed_arms``) is skipped: a later repeat of a failed engine is not started
again. With ``max_family_failures``, arms of a ``family`` that failed that often
are skipped. ``idle_gap_s`` (before each cell) and ``health_idle_s`` (before the
health check) override the pauses; ``stream_warm_up_tokens`` is the length of the untimed
wave an engine sends at each stream cell's concurrency before its first cell (`_warm_up`;
none without it). An arm with ``"primer": true`` (the bench's untimed
engine before the timed ones) runs like any other, its records carry ``primer``, and its
cells do not rescale the time box's estimates (a first engine can run slow).

One file past 500 lines on purpose: the tool imports it as
``ddtree_overlay.in_target.engine_runner`` (``PROFILE_ENV``, ``profile_windows``) and the
target env's python executes it by path, and no sibling module imports the same way in both,
so its helpers (the host-load sampling among them) live here, on the standard library only.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
import traceback
from contextlib import contextmanager

BASE_ENGINE = {
    "skip_tokenizer_init": True,
    # Prompts are token ids and the fixtures carry no processor: a vision-language checkpoint
    # (the Qwen3.5-layout hybrid) must not build its multimodal input processing.
    "enable_multimodal": False,
    "grammar_backend": "none",
    "mem_fraction_static": 0.45,
    # warning, not error: DDTREE says here what it could not do (a stage not captured, round
    # kernels not warmed, fewer requests served than asked) and runner.log keeps it
    "log_level": "warning",
    "random_seed": 0,
}


META_KEYS = (
    "completion_tokens",
    "spec_verify_ct",
    "spec_accept_length",
    "spec_correct_drafts_histogram",
    "finish_reason",
    "cached_tokens",  # prompt tokens served from the radix cache
)
PROFILE_ENV = "SGLANG_DDTREE_PROFILE"
# Time one DDTREE round in 8: the split needs a sample, while the timed decode should carry as
# little instrumentation as the DFLASH arms it is compared with (which carry none).
PROFILE_EVERY = {"SGLANG_DDTREE_PROFILE_EVERY": "8"}
IDLE_GAP_S = 0.5  # > ddtree_profile.IDLE_GAP_S: profile windows split at cell boundaries
HEALTH_IDLE_S = 1.0  # let the scheduler go idle before the health check
# After going idle: SGLang's KV-leak check runs, and the profile writes the last cell's rounds.
HEALTH_CHECK = {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True}


def _top2_margins(meta: dict) -> list:
    """top1 - top2 log-probability per output token (== the logit margin)."""
    margins = []
    for entry in meta.get("output_top_logprobs") or []:
        values = sorted((float(item[0]) for item in entry), reverse=True)
        margins.append(values[0] - values[1] if len(values) >= 2 else None)
    return margins


def _decoded(outs: list, decode_s: float, *, top2: bool) -> dict:
    """The record fields of one timed decode: outputs, meta, throughput, margins."""
    tokens = sum(len(o["output_ids"]) for o in outs)
    fields = {
        "ok": True,
        "decode_s": decode_s,
        "tokens": tokens,
        "tok_per_s": tokens / decode_s if decode_s > 0 else None,
        "outputs": [o["output_ids"] for o in outs],
        "meta": [{k: o["meta_info"].get(k) for k in META_KEYS} for o in outs],
    }
    if top2:
        fields["top2_margins"] = [_top2_margins(o["meta_info"]) for o in outs]
        fields["token_logprobs"] = [[entry[0] for entry in o["meta_info"].get("output_token_logprobs") or []] for o in outs]
    return fields


@contextmanager
def environment(overrides: dict):
    """``overrides`` in os.environ for the block (an engine's processes inherit them at start)."""
    saved = {name: os.environ.get(name) for name in overrides}
    os.environ.update({name: str(value) for name, value in overrides.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def requests_at_once(engine) -> int | None:
    """How many requests the engine's scheduler runs at once: SGLang's own cap, --max-running-
    requests as far as the KV cache and, on a hybrid target, the recurrent-state pool hold it,
    summed over the data-parallel groups; None where the release does not report it."""
    states = engine.get_server_info().get("internal_states") or []
    caps = [state.get("effective_max_running_requests_per_dp") for state in states]
    return sum(caps) if caps and None not in caps else None


def engine_kwargs(plan: dict, engine: dict) -> dict:
    """The `sglang.Engine` keywords of an arm whose ``engine`` keywords the plan gives."""
    kwargs = dict(BASE_ENGINE, model_path=plan["target"], **engine)
    if kwargs.get("speculative_algorithm"):
        kwargs.setdefault("speculative_draft_model_path", plan["draft"])
    return kwargs


def run_arm(plan: dict, arm: dict) -> dict:
    with environment(arm.get("env", {})):
        return _run_arm(plan, arm)


def _run_arm(plan: dict, arm: dict) -> dict:
    import sglang as sgl

    kwargs = engine_kwargs(plan, arm.get("engine", {}))
    prompts = [p for p in plan["prompts"] for _ in range(int(arm.get("repeat", 1)))]
    sampling = dict({"temperature": 0.0, "max_new_tokens": 64, "ignore_eos": True}, **arm.get("sampling", {}))
    gen_extra = {"return_logprob": True, "top_logprobs_num": 2} if arm.get("top2") else {}

    cycle = arm.get("sampling_cycle")
    per_prompt = [dict(sampling, **cycle[i % len(cycle)]) for i in range(len(prompts))] if cycle else sampling

    result = {"arm": arm["name"], "engine": arm.get("engine", {}), "sampling": sampling, "t_start": time.time()}
    if cycle:
        result["sampling_cycle"] = cycle
    _emit_start(arm)
    t0 = time.perf_counter()
    engine = sgl.Engine(**kwargs)
    try:
        result["start_s"] = time.perf_counter() - t0
        # The timed decode once untimed: every kernel it compiles on first use (attention
        # backends JIT per shape as sequences grow) and every graph batch size it passes.
        engine.generate(input_ids=prompts, sampling_params=per_prompt)
        t1 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=per_prompt, **gen_extra)
        decode_s = time.perf_counter() - t1
        time.sleep(1.0)  # let the scheduler go idle: its KV-leak check runs there
        engine.generate(input_ids=prompts[:1], sampling_params=dict(sampling, max_new_tokens=2))
    finally:
        engine.shutdown()

    result["t_end"] = time.time()  # profile windows between t_start and t_end are this arm's
    result.update(_decoded(outs, decode_s, top2=arm.get("top2", False)))
    return result


# Warm engine starts of one arm vary between its engines (an H200, 2026-12-04: one DDTREE arm's
# took 23.4 and 25.4 s): a measured start is padded by this much before an engine is started on it.
START_SPREAD = 1.2


class TimeBox:
    """Skip what would end past ``deadline``, judged by what was measured.

    A cell takes what the same cell took in its last measured repeat, else its estimate rescaled
    by what every cell so far took against its estimate. An engine takes, to start and warm up,
    what this arm's last engine took, else what the slowest warm engine of any arm took, padded
    by `START_SPREAD`; the first start (whichever arm it is) compiles kernels, so it is judged by
    the cold-start estimate and the second by its own estimate. An engine starts only if one of
    its cells then fits by the same measure the cells are held to: the runner runs its cells in
    order, each one skipped that no longer fits, so an engine started serves at least one.
    """

    def __init__(self, deadline, cold_start_s=0.0, clock=time.time):
        self.deadline = deadline
        self.cold_start_s = cold_start_s
        self.clock = clock
        self.starts = 0
        self.warm_starts = {}  # arm name -> its last engine's seconds to start and warm up
        self.cell_seconds = {}  # cell name -> its last measured seconds
        self._estimated = 0.0
        self._measured = 0.0

    @property
    def scale(self) -> float:
        if self._estimated <= 0:
            return 1.0
        return min(4.0, max(0.25, self._measured / self._estimated))

    def fits(self, seconds: float) -> bool:
        return self.deadline is None or self.clock() + seconds <= self.deadline

    def engine_s(self, arm: dict) -> float:
        """Seconds ``arm``'s engine will take to start and warm up."""
        estimate = float(arm.get("est_start_s", 0))
        if self.starts == 0:
            return max(estimate, self.cold_start_s)
        measured = self.warm_starts.get(arm["name"], max(self.warm_starts.values(), default=None))
        return estimate if measured is None else measured * START_SPREAD

    def cell_s(self, cell: dict) -> float:
        measured = self.cell_seconds.get(cell["name"])
        return measured if measured is not None else float(cell.get("est_s", 0)) * self.scale

    def fits_engine(self, arm: dict) -> bool:
        cheapest = min((self.cell_s(c) for c in arm["cells"]), default=0.0)
        return self.fits(self.engine_s(arm) + cheapest)  # worth starting if one cell fits

    def fits_cell(self, cell: dict) -> bool:
        return self.fits(self.cell_s(cell))

    def engine_ready(self, arm: dict, seconds: float) -> None:
        """``arm``'s engine started and warmed up in ``seconds``."""
        if self.starts:
            self.warm_starts[arm["name"]] = seconds
        self.starts += 1

    def cell_done(self, cell: dict, seconds: float) -> None:
        self.cell_seconds[cell["name"]] = seconds
        self._estimated += float(cell.get("est_s", 0))
        self._measured += seconds


def _emit(out_path: str, tag: str, record: dict, keys: tuple) -> None:
    with open(out_path, "a") as f:
        f.write(json.dumps(record) + "\n")
    print(tag + " " + json.dumps({k: record.get(k) for k in keys}), flush=True)


def _emit_start(arm: dict) -> None:
    keys = {"arm": arm["name"], "repeat": int(arm.get("repeat", 1)), "est_start_s": arm.get("est_start_s")}
    print("START " + json.dumps(keys), flush=True)


def _emit_cell(out_path: str, record: dict) -> None:
    keys = ("arm", "group", "repeat", "ok", "skipped", "error", "decode_s", "tok_per_s")
    _emit(out_path, "CELL", dict(record, kind="cell"), keys)


def _emit_engine(out_path: str, record: dict) -> None:
    keys = ("arm", "repeat", "ok", "skipped", "error", "start_s", "requests_at_once", "health")
    _emit(out_path, "ENGINE", dict(record, kind="engine"), keys)


def _primer_tag(arm: dict) -> dict:
    return {"primer": True} if arm.get("primer") else {}


def _engine_base(arm: dict) -> dict:
    return {"arm": arm["name"], "repeat": int(arm.get("repeat", 1)), **_primer_tag(arm)}


def host_sample(proc: str = "/proc", pid: int | None = None, sys_cpu: str = "/sys/devices/system/cpu") -> dict | None:
    """Load average, all CPUs' busy and total jiffies, and per engine process (this one, with
    SGLang's tokenizer manager, and its descendants: the schedulers and the detokenizer) its CPU
    jiffies, CPU set, last CPU and that CPU's physical core (two busy processes on one core's
    hyperthreads slow each other); and every other process's name and CPU jiffies (what else
    kept the host busy: another job, an engine still shutting down). None where there is no
    ``/proc``."""
    try:
        with open(f"{proc}/loadavg") as f:
            load1 = float(f.read().split()[0])
        with open(f"{proc}/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    processes = {}
    root = os.getpid() if pid is None else pid
    for child in [root, *_descendants(proc, root)]:  # the runner holds SGLang's tokenizer manager
        try:
            with open(f"{proc}/{child}/stat") as f:
                stat = f.read()
            with open(f"{proc}/{child}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        except OSError:
            continue  # exited meanwhile
        comm, jiffies, rest = _parse_stat(stat)
        last_cpu = int(rest[36])  # field 39
        processes[str(child)] = {
            "comm": comm,
            "jiffies": jiffies,
            "last_cpu": last_cpu,
            "core": _core_of(sys_cpu, last_cpu),
            "cpus": status.get("Cpus_allowed_list", "").strip(),
        }
    others = {}
    for entry in os.listdir(proc):
        if entry.isdigit() and entry not in processes:
            try:
                with open(f"{proc}/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            comm, jiffies, _ = _parse_stat(stat)
            others[entry] = {"comm": comm, "jiffies": jiffies}
    return {"load1": load1, "busy": sum(fields) - idle, "total": sum(fields), "processes": processes, "others": others}


def _parse_stat(stat: str) -> tuple[str, int, list[str]]:
    """A ``/proc/PID/stat`` line: the command name, utime + stime (fields 14 and 15) in jiffies,
    and the fields after the name (field 3 on)."""
    rest = stat[stat.rindex(")") + 2 :].split()
    return stat[stat.index("(") + 1 : stat.rindex(")")], int(rest[11]) + int(rest[12]), rest


def _core_of(sys_cpu: str, cpu: int) -> str | None:
    """``package/core`` of a logical CPU: hyperthreads of one physical core share it."""
    try:
        with open(f"{sys_cpu}/cpu{cpu}/topology/physical_package_id") as f:
            package = f.read().strip()
        with open(f"{sys_cpu}/cpu{cpu}/topology/core_id") as f:
            return f"{package}/{f.read().strip()}"
    except OSError:
        return None


def _descendants(proc: str, pid: int) -> list:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"{proc}/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"{proc}/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


OTHER_BUSY = 0.05  # CPU s per wall s from which another process is worth naming
OTHERS_SHOWN = 3


def host_during(before: dict | None, after: dict | None, wall_s: float) -> dict | None:
    """The host over a cell from two ``host_sample``s: load average at both ends, busy cores
    (all CPUs' busy share x CPU count), each engine process's CPU seconds per wall second,
    busiest first, and the busiest other processes (``others``: the top ``OTHERS_SHOWN`` at
    ``OTHER_BUSY`` CPU s/s or more)."""
    if before is None or after is None or wall_s <= 0:
        return None
    total = after["total"] - before["total"]
    cpus = os.cpu_count() or 1
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    processes = [
        {
            "pid": int(pid),
            "comm": info["comm"],
            "cpu_per_wall": round((info["jiffies"] - before["processes"][pid]["jiffies"]) / tick / wall_s, 3),
            "cpus": info["cpus"],
            "last_cpu": info["last_cpu"],
            "core": info.get("core"),
        }
        for pid, info in after["processes"].items()
        if pid in before["processes"]
    ]
    earlier = before.get("others") or {}
    others = [
        {"pid": int(pid), "comm": info["comm"],
         "cpu_per_wall": round((info["jiffies"] - earlier[pid]["jiffies"]) / tick / wall_s, 3)}
        for pid, info in (after.get("others") or {}).items()
        if pid in earlier
    ]
    others = sorted((o for o in others if o["cpu_per_wall"] >= OTHER_BUSY), key=lambda o: -o["cpu_per_wall"])
    return {
        "load1": [before["load1"], after["load1"]],
        "busy_cores": round((after["busy"] - before["busy"]) / total * cpus, 2) if total > 0 else None,
        "cpus": cpus,
        "processes": sorted(processes, key=lambda p: -p["cpu_per_wall"]),
        "others": others[:OTHERS_SHOWN],
    }


def _cell_base(arm: dict, cell: dict) -> dict:
    sampling = dict({"temperature": 0.0, "max_new_tokens": 64, "ignore_eos": True}, **cell.get("sampling", {}))
    return {
        "arm": cell["name"],
        "group": arm["name"],
        "repeat": int(arm.get("repeat", 1)),
        "batch_size": int(cell["batch_size"]),
        "sampling": sampling,
        "timed": not cell.get("top2", False),
        **_primer_tag(arm),
    }


def run_cell(engine, plan: dict, arm: dict, cell: dict) -> dict:
    """Decode the cell's prompts in waves of ``batch_size`` concurrent requests."""
    record = _cell_base(arm, cell)
    sampling, batch = record["sampling"], record["batch_size"]
    prompts = plan["prompts"][: int(cell.get("prompts", len(plan["prompts"])))]
    gen_extra = {"return_logprob": True, "top_logprobs_num": 2} if cell.get("top2") else {}
    outs, wave_s = [], []
    time.sleep(plan.get("idle_gap_s", IDLE_GAP_S))  # the profile closes the previous cell's window here
    before = host_sample()
    record["t_start"] = time.time()
    for i in range(0, len(prompts), batch):
        t0 = time.perf_counter()
        outs.extend(engine.generate(input_ids=prompts[i : i + batch], sampling_params=sampling, **gen_extra))
        wave_s.append(time.perf_counter() - t0)
    record["t_end"] = time.time()
    record["host"] = host_during(before, host_sample(), record["t_end"] - record["t_start"])
    record.update(_decoded(outs, sum(wave_s), top2=cell.get("top2", False)), wave_s=wave_s)
    return record


def run_stream_cell(engine, plan: dict, arm: dict, cell: dict, sent) -> dict:
    """Keep ``concurrency`` requests running (a finished one is replaced at once, cycling
    through the first ``prompts`` prompts), serve ``warmup_s``, then count the tokens emitted
    during ``window_s``; requests still running at the window's end finish, uncounted beyond it.

    Requests go through ``engine.async_generate`` without streaming: a streamed request makes
    the scheduler send its tokens every step, a host cost that grows with steps per token and
    so would favour the arms that take fewer steps. Tokens are counted from each request's
    submit and finish times instead (`window_tokens`). No request reuses another's prefix from
    the radix cache (every request prefills in full, as distinct users' would), and lengths
    vary around max_new_tokens (`stream_requests`); ``sent`` (an ``itertools.count`` per engine)
    numbers the requests across the engine's cells."""
    record = _cell_base(arm, cell)
    stream = cell["stream"]
    concurrency = int(stream["concurrency"])
    prompts = plan["prompts"][: int(cell.get("prompts", len(plan["prompts"])))]
    time.sleep(plan.get("idle_gap_s", IDLE_GAP_S))  # the profile closes the previous cell's window here
    t_begin = time.time()
    t_open = t_begin + float(stream["warmup_s"])
    t_close = t_open + float(stream["window_s"])
    samples = {}
    requests = engine.loop.run_until_complete(
        serve_stream(engine, stream_requests(prompts, sent, record["sampling"]), concurrency, t_open, t_close, samples)
    )
    wall_s = time.time() - t_begin
    tokens, busy_s = window_tokens(requests, t_open, t_close)
    inside = [r for r in requests if r["t_done"] > t_open and r["t_submit"] < t_close]
    window_s = t_close - t_open
    record.update(
        ok=True,
        t_start=t_open,
        t_end=t_close,
        decode_s=window_s,
        wall_s=wall_s,  # warm-up, window and the last requests' tail
        tokens=tokens,
        tok_per_s=tokens / window_s,
        concurrency=concurrency,
        mean_running=busy_s / window_s,
        requests_in_window=len(inside),
        requests_total=len(requests),
        requests=[{k: r[k] for k in ("t_submit", "t_done")} for r in inside],
        meta=[r["meta"] for r in inside],
        host=host_during(samples.get("open"), samples.get("close"), window_s),
    )
    return record


GOLDEN = 0.6180339887498949  # a low-discrepancy sequence of lengths: k x GOLDEN mod 1


def stream_requests(prompts: list, sent, sampling: dict):
    """Request k (from ``sent``): (token ids, sampling params).

    Its prompt is prompt k mod n with the first two tokens replaced by a pair of the prompts'
    token ids, the next pair each time round the prompts (n x P^2 requests before one repeats,
    for P distinct ids). Its max_new_tokens spread evenly over 0.5-1.5x the cell's (the same
    mean): requests that all emit the same length would finish, and prefill, in lockstep waves
    forever, while a server's requests end at different times."""
    pool = sorted({t for p in prompts for t in p})
    for k in sent:
        prompt = prompts[k % len(prompts)]
        turn = k // len(prompts)
        salt = [pool[turn % len(pool)], pool[turn // len(pool) % len(pool)]]
        length = max(1, round(sampling["max_new_tokens"] * (0.5 + (k * GOLDEN) % 1.0)))
        yield salt[: len(prompt)] + prompt[2:], dict(sampling, max_new_tokens=length)


async def serve_stream(engine, requests, concurrency: int, t_open: float, t_close: float, samples: dict) -> list:
    """``concurrency`` clients, each sending its next request (from ``requests``: ids and
    sampling params) as soon as its last one finished, until ``t_close``; every finished
    request with its submit and finish times and meta. The host is sampled (``samples``:
    "open", "close") when the window opens and closes."""
    finished = []

    async def client() -> None:
        while time.time() < t_close:
            ids, params = next(requests)
            t_submit = time.time()
            out = await engine.async_generate(input_ids=ids, sampling_params=params)
            meta = out["meta_info"]
            finished.append(
                {"t_submit": t_submit, "t_done": time.time(), "meta": {k: meta.get(k) for k in META_KEYS}}
            )

    async def sample_host() -> None:
        await asyncio.sleep(max(0.0, t_open - time.time()))
        samples["open"] = host_sample()
        await asyncio.sleep(max(0.0, t_close - time.time()))
        samples["close"] = host_sample()

    tasks = [asyncio.ensure_future(job) for job in (sample_host(), *(client() for _ in range(concurrency)))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        # one request failed: stop the other clients too, or they would resume sending on the
        # engine's loop whenever it next runs (the health check)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return finished


def window_tokens(requests: list, t_open: float, t_close: float) -> tuple:
    """(tokens emitted in [t_open, t_close], request-seconds inside it). A request's tokens are
    spread evenly over its submit-to-finish time, so one that straddles an edge counts the
    share of its time inside the window (its prefill counted as decode time: a slight
    undercount at the window's start, matched by an overcount at its end in the steady state).
    The request-seconds over the window's length are the mean number of requests running."""
    tokens = busy = 0.0
    for request in requests:
        start, end = request["t_submit"], request["t_done"]
        overlap = min(end, t_close) - max(start, t_open)
        if overlap <= 0 or end <= start:
            continue
        busy += overlap
        tokens += int(request["meta"].get("completion_tokens") or 0) * overlap / (end - start)
    return tokens, busy


def _warm_up(engine, plan: dict, arm: dict, sent) -> None:
    """Untimed, before the first cell: one full-length wave per (temperature, batch size) of the
    arm's waves cells, and one wave of ``stream_warm_up_tokens`` new tokens per (temperature,
    concurrency) of its stream cells. Kernels compiled on first use (some per batch-size
    bucket, some only once sequences grow; flashinfer builds its own at an engine's first
    requests, minutes at the Qwen3.6-27B shape) and the allocator are then warm for every cell,
    so no timed wave or window pays for a compile (a stream's warmup_s is seconds). A stream's
    wave takes its requests from the engine's request sequence (``sent``, `stream_requests`),
    so none shares a prefix with a timed request."""
    seen = set()
    for cell in arm["cells"]:
        sampling = _cell_base(arm, cell)["sampling"]
        stream = "stream" in cell
        key = (stream, sampling["temperature"], int(cell["batch_size"]))
        if key in seen or (stream and not plan.get("stream_warm_up_tokens")):
            continue  # plans from before the stream warm-up: the stream's warmup_s only
        seen.add(key)
        if not stream:
            engine.generate(input_ids=plan["prompts"][: key[2]], sampling_params=sampling)
            continue
        prompts = plan["prompts"][: int(cell.get("prompts", len(plan["prompts"])))]
        wave = [ids for ids, _ in itertools.islice(stream_requests(prompts, sent, sampling), key[2])]
        engine.generate(input_ids=wave, sampling_params=dict(sampling, max_new_tokens=int(plan["stream_warm_up_tokens"])))


def profile_windows(path, since: float = 0.0) -> list:
    """The DDTREE profile windows in ``path`` (SGLANG_DDTREE_PROFILE) that began at ``since`` or later."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        windows = [json.loads(line) for line in f if line.strip()]
    return [w for w in windows if (w.get("t_first") or 0) >= since]


def _skip_cells(out_path: str, arm: dict, cells: list, reason: str) -> None:
    for cell in cells:
        _emit_cell(out_path, dict(_cell_base(arm, cell), ok=False, skipped=reason))


def run_engine(plan: dict, arm: dict, out_path: str, box: TimeBox) -> bool:
    """One engine serving every cell of ``arm``; returns False when something failed."""
    if not box.fits_engine(arm):
        _skip_cells(out_path, arm, arm["cells"], "time box")
        _emit_engine(out_path, dict(_engine_base(arm), ok=False, skipped="time box"))
        return True
    profile_path = plan.get("profile_path") if arm.get("profile") else None
    env = dict(arm.get("env", {}), **({PROFILE_ENV: profile_path, **PROFILE_EVERY} if profile_path else {}))
    with environment(env):
        return _run_engine(plan, arm, out_path, box, profile_path)


def _run_engine(plan: dict, arm: dict, out_path: str, box: TimeBox, profile_path) -> bool:
    kwargs = engine_kwargs(plan, arm.get("engine", {}))
    engine_record = dict(_engine_base(arm), engine=arm.get("engine", {}), ok=False)
    since = time.time()
    pending = list(arm["cells"])
    _emit_start(arm)
    try:
        t0 = time.perf_counter()
        import sglang as sgl  # an env whose sglang cannot import fails here, per engine

        engine = sgl.Engine(**kwargs)
    except Exception as exc:
        _skip_cells(out_path, arm, pending, "engine failed to start")
        engine_record.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=20))
        _emit_engine(out_path, engine_record)
        return False
    ok = True
    try:
        engine_record["start_s"] = time.perf_counter() - t0
        # the parent's ServerArgs resolved the default where the arm asked for no backend
        engine_record["attention_backend"] = engine.server_args.attention_backend
        engine_record["requests_at_once"] = requests_at_once(engine)
        sent = itertools.count()  # stream requests across the engine's cells: none shares a prefix
        _warm_up(engine, plan, arm, sent)
        ready_s = time.perf_counter() - t0
        engine_record["warm_up_s"] = ready_s - engine_record["start_s"]
        box.engine_ready(arm, ready_s)
        while pending:
            cell = pending.pop(0)
            if not box.fits_cell(cell):
                _skip_cells(out_path, arm, [cell], "time box")
                continue
            t_cell = time.perf_counter()
            try:
                if "stream" in cell:
                    record = run_stream_cell(engine, plan, arm, cell, sent)
                else:
                    record = run_cell(engine, plan, arm, cell)
            except Exception as exc:
                ok = False
                record = dict(_cell_base(arm, cell), ok=False, error=f"{type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc(limit=20))
                _emit_cell(out_path, record)
                _skip_cells(out_path, arm, pending, "an earlier cell of this engine failed")
                pending = []
                break
            if not arm.get("primer"):
                box.cell_done(cell, time.perf_counter() - t_cell)
            _emit_cell(out_path, record)
        time.sleep(plan.get("health_idle_s", HEALTH_IDLE_S))  # SGLang's KV-leak check runs when idle
        engine.generate(input_ids=plan["prompts"][:1], sampling_params=HEALTH_CHECK)
        engine_record["health"] = "ok"
        engine_record["ok"] = ok
    except Exception as exc:
        ok = False
        _skip_cells(out_path, arm, pending, "engine failed")
        engine_record.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=20))
    finally:
        engine.shutdown()
    engine_record["profile"] = profile_windows(profile_path, since)
    _emit_engine(out_path, engine_record)
    return ok


def main(argv: list) -> int:
    plan_path, out_path = argv[1], argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    box = TimeBox(plan.get("deadline"), float(plan.get("cold_start_s", 0.0)))
    failures = 0
    failed_arms = set(plan.get("failed_arms", ()))  # engines that failed: not started again
    family_failures: dict = {}
    for arm in plan["arms"]:
        if "cells" in arm:
            family = arm.get("family", arm["name"])
            reason = None
            if arm["name"] in failed_arms:
                reason = "an earlier repeat of this engine failed"
            elif family_failures.get(family, 0) >= plan.get("max_family_failures", 1 << 30):
                reason = f"{family_failures[family]} earlier {family} engines failed"
            if reason is not None:
                _skip_cells(out_path, arm, arm["cells"], reason)
                _emit_engine(out_path, dict(_engine_base(arm), ok=False, skipped=reason))
                continue
            if not run_engine(plan, arm, out_path, box):
                failures += 1
                failed_arms.add(arm["name"])
                family_failures[family] = family_failures.get(family, 0) + 1
            continue
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
