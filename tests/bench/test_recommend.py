"""bench.recommend: what to serve per concurrency, from synthetic report cells."""

from __future__ import annotations

from typing import Any

import pytest

from ddtree_overlay.bench.arms import DDTREE, DFLASH, EAGLE3, NEXTN, TARGET_ONLY, Arm, BudgetPolicy
from ddtree_overlay.bench.recommend import markdown_section, recommend, summary_lines
from ddtree_overlay.bench.settings import qwen3_6_27b_configs
from ddtree_overlay.bench.target_config import TargetConfig, target_config

PLAIN = TargetConfig(mtp_layers=0, gated_deltanet=None)
HYBRID = target_config(qwen3_6_27b_configs()[0])  # Qwen3.6-27B's
MIB = 1 << 20


def cell(arm: Arm, bs: int, tok_per_s: float, *, temperature: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {"group": arm.name, **arm.row(), "batch_size": bs, "temperature": temperature, "status": "ok",
            "tok_per_s": tok_per_s} | extra


def report(cells: list[dict[str, Any]], baseline_backend: str = "triton", **config: Any) -> dict[str, Any]:
    """The cells' report, DDTREE's engines on triton, the others' on ``baseline_backend``."""
    arms = {c["group"]: Arm.of_row(c) for c in cells}
    return {
        "setting": {"name": "custom", "target": "/models/qwen", "draft": "/models/dflash", "real_weights": True,
                    "eagle3_draft": "/models/eagle3"},
        "config": {"attention_backend": "triton", "tp_size": 1} | config,
        "groups": [{"name": name, **arm.row(), "attention_backend": "triton" if arm.algorithm == DDTREE else baseline_backend}
                   for name, arm in arms.items()],
        "cells": cells,
    }


def baselines(bs: int, target: float, dflash: float, nextn: float) -> list[dict[str, Any]]:
    return [cell(Arm(TARGET_ONLY), bs, target), cell(Arm(DFLASH), bs, dflash), cell(Arm(NEXTN), bs, nextn)]


def mixed() -> list[dict[str, Any]]:
    """DDTREE wins at bs 1 (B=64) and 4 (B=32); at bs 16 NEXTN beats every budget."""
    return [
        *baselines(1, 100, 300, 250), *baselines(4, 380, 1000, 900), *baselines(16, 1200, 2500, 2600),
        cell(Arm.ddtree(64), 1, 420), cell(Arm.ddtree(32), 1, 400),
        cell(Arm.ddtree(64), 4, 1100), cell(Arm.ddtree(32), 4, 1200),
        cell(Arm.ddtree(64), 16, 2000), cell(Arm.ddtree(32), 16, 2450),
    ]


def test_ddtree_is_served_where_it_is_faster_and_the_best_baseline_elsewhere() -> None:
    rec = recommend(report(mixed()), PLAIN)
    assert rec is not None
    assert rec["ddtree"]["policy"] == "schedule 1:64,4:32" and not rec["ddtree"]["measured"]
    assert [(s["algorithm"], s["from_batch_size"], s["to_batch_size"]) for s in rec["serve"]] == [
        (DDTREE, 1, 15), (NEXTN, 16, None)
    ]
    bs1 = rec["per_batch_size"][0]
    assert bs1["ddtree"]["arm"] == "DDTREE B=64"
    assert bs1["speedup"] == {TARGET_ONLY: 4.2, DFLASH: 1.4, NEXTN: 1.68}
    bs16 = rec["per_batch_size"][2]
    assert bs16["serve"]["algorithm"] == NEXTN and bs16["speedup"][NEXTN] < 1
    commands = [launch["command"] for launch in rec["launch"]]
    assert "--speculative-ddtree-budget-schedule 1:64,4:32" in commands[0]
    assert "--speculative-algorithm DDTREE \\\n    --speculative-draft-model-path /models/dflash" in commands[0]
    assert commands[1].splitlines()[2:] == [
        "    --speculative-algorithm NEXTN \\", "    --speculative-draft-model-path /models/qwen \\",
        "    --speculative-num-steps 3 \\", "    --speculative-eagle-topk 1 \\",
        "    --speculative-num-draft-tokens 4 \\", "    --attention-backend triton",
    ]


def attention_flags(command: str) -> list[str]:
    words = command.split()
    return [f"{w} {words[i + 1]}" for i, w in enumerate(words) if w == "--attention-backend"]


@pytest.mark.parametrize(("ran", "flags"), [("fa3", ["--attention-backend fa3"]), ("auto", [])])
def test_a_baseline_is_launched_on_the_backend_its_engine_ran_and_ddtree_on_its_own(ran: str, flags: list[str]) -> None:
    rec = recommend(report(mixed(), baseline_backend=ran, baseline_attention_backend="auto"), PLAIN)
    assert rec is not None
    ddtree, nextn = (attention_flags(launch["command"]) for launch in rec["launch"])
    assert ddtree == ["--attention-backend triton"]
    # "auto": SGLang chose and no record names it, so the command leaves the choice to SGLang again
    assert nextn == flags


def test_a_ddtree_that_never_beats_a_baseline_is_never_recommended() -> None:
    cells = [*baselines(1, 100, 300, 250), *baselines(8, 700, 1500, 1400),
             cell(Arm.ddtree(16), 1, 300), cell(Arm.ddtree(16), 8, 1200)]
    rec = recommend(report(cells), PLAIN)
    assert rec is not None
    assert [(s["algorithm"], s["from_batch_size"]) for s in rec["serve"]] == [(DFLASH, 1)]
    assert [launch["algorithm"] for launch in rec["launch"]] == [DFLASH]
    assert "not faster" in "\n".join(markdown_section(rec))


def test_a_budget_that_left_target_only_is_not_a_candidate() -> None:
    cells = [*baselines(1, 100, 300, 250), cell(Arm.ddtree(64), 1, 500, lossless={"passed": False}),
             cell(Arm.ddtree(16), 1, 350, lossless={"passed": True}), cell(Arm.ddtree(8), 1, 900, status="failed")]
    rec = recommend(report(cells), PLAIN)
    assert rec is not None and rec["ddtree"]["policy"] == "B=16"
    assert "--speculative-ddtree-budget 16" in rec["launch"][0]["command"]


def test_a_measured_adaptive_arm_that_beats_the_fixed_budgets_is_served() -> None:
    adaptive = Arm.ddtree(BudgetPolicy(adaptive=(16, 64)))
    cells = [*mixed(), cell(adaptive, 1, 430), cell(adaptive, 4, 1250), cell(adaptive, 16, 2700)]
    rec = recommend(report(cells), PLAIN)
    assert rec is not None and rec["ddtree"]["policy"] == "adaptive 16/64" and rec["ddtree"]["measured"]
    assert [s["algorithm"] for s in rec["serve"]] == [DDTREE]
    assert "--speculative-ddtree-adaptive-budgets 16,64" in rec["launch"][0]["command"]


def test_one_scheduling_mode_per_server() -> None:
    cells = [*baselines(1, 100, 300, 250), *baselines(4, 380, 1000, 900),
             cell(Arm.ddtree(32), 1, 400), cell(Arm.ddtree(32), 4, 1050),
             cell(Arm.ddtree(32, overlap=False), 1, 450), cell(Arm.ddtree(32, overlap=False), 4, 1100)]
    rec = recommend(report(cells, tp_size=2, batch_sizes=[1, 4]), PLAIN)
    assert rec is not None and rec["ddtree"]["overlap"] is False
    command = rec["launch"][0]["command"]
    assert "--tp-size 2" in command and "--disable-overlap-schedule" in command


def hybrid_cells() -> list[dict[str, Any]]:
    """DDTREE B=256 at bs 1, NEXTN at bs 64 (EAGLE-3 is not faster there)."""
    return [*baselines(1, 100, 300, 250), *baselines(64, 3000, 6000, 6500),
            cell(Arm.ddtree(256), 1, 500), cell(Arm.ddtree(32), 64, 6000),
            cell(Arm(EAGLE3), 64, 6100)]


@pytest.mark.parametrize("config", [{}, {"hybrid_state": "snapshot"}])  # {}: a report from before the flat state
def test_a_snapshot_state_run_recommends_ddtree_with_its_switch_and_the_snapshot_memory(config) -> None:
    rec = recommend(report(hybrid_cells(), **config), HYBRID)
    assert rec is not None
    state = rec["recurrent_state"]
    assert state["ddtree_state"] == "snapshot"
    per_node = (48 * 48 * 128 * 128 * 4 + 48 * (2 * 16 * 128 + 48 * 128) * 3 * 2)  # state + conv window
    assert {e["config"]: (e["state"], e["verify_tokens"], e["bytes"]) for e in state["per_request"]} == {
        "DDTREE B=32": ("snapshot", 33, 33 * per_node),
        "DDTREE B=256": ("snapshot", 257, 257 * per_node),
        "NEXTN": ("snapshot", 4, 4 * per_node),
    }
    ddtree, nextn = rec["launch"]
    # the flat state is the default: the line names the snapshot state the run measured
    assert ddtree["command"].startswith("SGLANG_DDTREE_HYBRID_STATE=snapshot python -m sglang.launch_server \\\n")
    assert "--mamba-radix-cache-strategy extra_buffer \\\n    --max-running-requests 64" in ddtree["command"]
    assert nextn["algorithm"] == NEXTN
    assert "HYBRID_STATE" not in nextn["command"]  # only DDTREE reads the switch
    text = "\n".join(markdown_section(rec))
    assert "DDTREE B=32 (snapshot): 33 x 147 MiB = 4.7 GiB; " in text
    assert "DDTREE's state is snapshot (`SGLANG_DDTREE_HYBRID_STATE`)" in text
    plain = recommend(report(mixed(), **config), PLAIN)  # the switch means nothing there
    assert plain is not None and plain["recurrent_state"] is None
    assert not any("HYBRID_STATE" in launch["command"] for launch in plain["launch"])


def test_the_launch_command_asks_for_no_more_requests_than_its_engines_served_at_once() -> None:
    """A DDTREE server asked for more than its hybrid target's state holds refuses to start; the
    schedule's server runs every budget's width, so the fewest any of its engines served."""
    served = {"ddtree-b256": 20, "ddtree-b32": 38, "nextn": 11, "dflash": 11, "target-only": 200}
    arms = [Arm.ddtree(256), Arm.ddtree(32), Arm(NEXTN), Arm(DFLASH), Arm(TARGET_ONLY), Arm(EAGLE3)]
    groups = [{"name": a.name, **a.row(), "attention_backend": "triton",
               "repeats": [{"repeat": 1, "requests_at_once": served.get(a.name)}]} for a in arms]
    rec = recommend(report(hybrid_cells(), hybrid_state="flat") | {"groups": groups}, HYBRID)
    assert rec is not None and rec["ddtree"]["policy"] == "schedule 1:256,64:32"
    ddtree, nextn = rec["launch"]
    assert ddtree["command"].endswith("--max-running-requests 20") and nextn["command"].endswith("--max-running-requests 11")


def test_an_adaptive_arm_choosing_the_chain_verifies_a_block_there() -> None:
    adaptive = Arm.ddtree(BudgetPolicy(adaptive=("chain", 32)))
    cells = [*baselines(1, 100, 300, 250), cell(adaptive, 1, 500)]
    rec = recommend(report(cells, hybrid_state="snapshot"), HYBRID)
    assert rec is not None and rec["ddtree"]["policy"] == "adaptive chain/32"
    assert rec["ddtree"]["widths"] == [16, 33]  # the chain: DFLASH's block of 16
    per_node = (48 * 48 * 128 * 128 * 4 + 48 * (2 * 16 * 128 + 48 * 128) * 3 * 2)
    assert [(e["config"], e["verify_tokens"], e["bytes"]) for e in rec["recurrent_state"]["per_request"]] == [
        ("DDTREE B=chain", 16, 16 * per_node), ("DDTREE B=32", 33, 33 * per_node),
    ]
    assert "--speculative-ddtree-adaptive-budgets chain,32" in rec["launch"][0]["command"]


def test_a_flat_state_run_recommends_ddtree_without_a_switch_and_states_its_memory() -> None:
    rec = recommend(report(hybrid_cells(), hybrid_state="flat"), HYBRID)
    assert rec is not None
    state = rec["recurrent_state"]
    assert state["ddtree_state"] == "flat"
    per_request = {e["config"]: e for e in state["per_request"]}
    assert per_request["DDTREE B=32"]["state"] == "flat"
    assert per_request["DDTREE B=32"]["bytes"] / MIB == pytest.approx(163.1, abs=0.05)
    assert per_request["NEXTN"]["state"] == "snapshot"  # only DDTREE reads the switch
    ddtree, nextn = rec["launch"]
    assert ddtree["command"].startswith("python -m sglang.launch_server \\\n")  # the default state
    assert "HYBRID_STATE" not in ddtree["command"] + nextn["command"]
    text = "\n".join(markdown_section(rec))
    assert "DDTREE B=32 (flat): 33 x 3.58 MiB + 45 MiB scratch = 163 MiB; " in text
    assert "NEXTN (snapshot): 4 x 147 MiB = 587 MiB" in text
    assert "DDTREE's state is flat (`SGLANG_DDTREE_HYBRID_STATE`)" in text


def test_the_lowest_temperature_measured_is_the_basis() -> None:
    cells = [cell(Arm(DFLASH), 1, 300, temperature=1.0), cell(Arm.ddtree(16), 1, 200, temperature=1.0),
             cell(Arm(DFLASH), 1, 250, temperature=0.6), cell(Arm.ddtree(16), 1, 260, temperature=0.6)]
    rec = recommend(report(cells), PLAIN)
    assert rec is not None and rec["temperature"] == 0.6 and rec["serve"][0]["algorithm"] == DDTREE


def test_random_weights_or_nothing_measured_get_no_recommendation() -> None:
    random = report(mixed())
    random["setting"]["real_weights"] = False
    assert recommend(random, PLAIN) is None
    assert recommend(report([cell(Arm(DFLASH), 1, 300, status="skipped")]), PLAIN) is None
    assert markdown_section(None) == []


def steady(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """A report of continuous-batching cells only: ``cells``' batch sizes as their concurrencies."""
    rows = [{k: v for k, v in c.items() if k != "batch_size"} | {"concurrency": c["batch_size"]} for c in cells]
    return report([]) | {"groups": report(cells)["groups"], "steady": {"rows": rows}}


def test_a_sweep_of_continuous_batching_cells_only_is_recommended_from_them() -> None:
    rec = recommend(steady(mixed()), PLAIN)
    assert rec is not None and rec["cells"] == "continuous batching"
    waves = recommend(report(mixed()), PLAIN)
    assert waves is not None and waves["cells"] == "waves"
    assert rec["serve"] == waves["serve"] and rec["per_batch_size"] == waves["per_batch_size"]
    text = "\n".join(markdown_section(rec))
    assert "From the continuous-batching cells measured at T = 0 that ran (concurrency 1, 4, 16; their outputs" in text
    assert "- 1-15 concurrent requests: serve **DDTREE schedule 1:64,4:32** (measured at concurrency 1, 4)" in text
    assert "| concurrency | serve | DDTREE tok/s |" in text
    # the engines kept the widest concurrency running: so does the server
    assert all(launch["command"].endswith("--max-running-requests 16") for launch in rec["launch"])
    assert not any("--max-running-requests" in launch["command"] for launch in waves["launch"])


def test_waves_cells_when_there_are_any_and_none_that_ran_means_no_recommendation() -> None:
    streams = steady([cell(Arm.ddtree(32), 1, 900)])["steady"]
    rec = recommend(report(baselines(1, 100, 300, 250)) | {"steady": streams}, PLAIN)
    assert rec is not None and rec["cells"] == "waves" and rec["ddtree"] is None  # the stream is not read
    failed = report([cell(Arm(DFLASH), 1, 300, status="failed")]) | {"steady": streams}
    assert recommend(failed, PLAIN) is None


def test_the_terminal_gets_one_line_per_served_range() -> None:
    lines = summary_lines(recommend(report(mixed()), PLAIN))
    assert lines == [
        "recommendation (T = 0; launch commands in bench.md):",
        "  1-15 concurrent requests: serve DDTREE schedule 1:64,4:32 (measured at batch sizes 1, 4)",
        "  16 and more concurrent requests: serve NEXTN (measured at batch size 16); DDTREE was not faster there",
    ]
    assert summary_lines(None) == []


def test_the_chain_control_is_never_served_as_its_budget() -> None:
    """The control runs DFLASH's chain through DDTREE (an env switch, not a budget): its speed
    says nothing about a B = 15 tree, so no schedule step may take it."""
    cells = [*baselines(1, 100, 300, 250), *baselines(16, 1200, 2500, 2600),
             cell(Arm.parse("ddtree-b15-chain"), 1, 600), cell(Arm.ddtree(32), 1, 500),
             cell(Arm.ddtree(32), 16, 3000)]
    rec = recommend(report(cells), PLAIN)
    assert rec is not None and rec["ddtree"]["policy"] == "B=32"
    assert all("chain" not in s["ddtree"]["arm"] for s in rec["per_batch_size"] if s.get("ddtree"))


def test_a_baseline_on_a_second_backend_is_launched_from_its_own_engines() -> None:
    """DFLASH on flashinfer (the first baseline backend, capped at 40) is the faster one at bs 16,
    DFLASH on triton (64 at once) at bs 64: each is a configuration of its own, launched on its
    backend and at its engines' cap, and named with its backend."""
    on_triton = Arm(DFLASH, backend="triton")
    cells = [*baselines(1, 100, 300, 250), *baselines(16, 1200, 2500, 2000), *baselines(64, 3000, 5000, 4000),
             cell(on_triton, 16, 2400), cell(on_triton, 64, 7000), cell(Arm.ddtree(32), 1, 500),
             cell(Arm.ddtree(32), 16, 2000), cell(Arm.ddtree(32), 64, 4000)]
    swept = report(cells, baseline_backend="flashinfer")
    served = {"dflash": 40, "dflash@triton": 64}
    for group in swept["groups"]:
        group["repeats"] = [{"repeat": 1, "requests_at_once": served.get(group["name"])}]
        if group["name"] == on_triton.name:
            group["attention_backend"] = "triton"
    rec = recommend(swept, PLAIN)
    assert rec is not None
    assert [(s["algorithm"], s.get("group"), s["from_batch_size"]) for s in rec["serve"]] == [
        (DDTREE, None, 1), (DFLASH, "dflash", 16), (DFLASH, "dflash@triton", 64)
    ]
    _, flashinfer, triton = rec["launch"]
    assert attention_flags(flashinfer["command"]) == ["--attention-backend flashinfer"]
    assert flashinfer["command"].endswith("--max-running-requests 40")
    assert attention_flags(triton["command"]) == ["--attention-backend triton"]
    assert triton["command"].endswith("--max-running-requests 64")
    text = "\n".join(markdown_section(rec))
    assert "- 16-63 concurrent requests: serve **DFLASH** (measured at batch size 16)" in text
    assert "- 64 and more concurrent requests: serve **DFLASH on triton** (measured at batch size 64)" in text
    assert "\nDFLASH:\n" in text and "\nDFLASH on triton:\n" in text


def judged(cells: list[dict[str, Any]], batch_sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """``cells`` with every speculative cell at ``batch_sizes`` judged lossless against target-only."""
    return [c | {"lossless": {"passed": True}} if c["algorithm"] != TARGET_ONLY and c["batch_size"] in batch_sizes
            else c for c in cells]


@pytest.mark.parametrize(("judged_at", "basis"), [
    ((1, 4, 16), "From the cells measured at T = 0 that ran and kept target-only's greedy output "
                 "(batch sizes 1, 4, 16)."),
    ((), "From the cells measured at T = 0 that ran (batch sizes 1, 4, 16; their greedy outputs were not "
         "judged: no target-only greedy output to judge them against)."),
    ((1, 4), "From the cells measured at T = 0 that ran and, where judged, kept target-only's greedy output "
             "(batch sizes 1, 4, 16; 4 of 12 cells not judged, at batch size 16: no target-only greedy output "
             "to judge them against)."),
])
def test_the_basis_says_which_cells_were_judged_lossless(judged_at: tuple[int, ...], basis: str) -> None:
    """A cell never judged (no target-only output to judge it against) is still served, but the
    text claims no losslessness for it."""
    rec = recommend(report(judged(mixed(), judged_at)), PLAIN)
    assert rec is not None and [s["algorithm"] for s in rec["serve"]] == [DDTREE, NEXTN]
    assert markdown_section(rec)[2].startswith(basis)


def test_sampled_cells_are_never_said_to_keep_the_greedy_output() -> None:
    rec = recommend(report([cell(Arm(DFLASH), 1, 250, temperature=0.6), cell(Arm.ddtree(16), 1, 260, temperature=0.6)]), PLAIN)
    assert rec is not None
    assert markdown_section(rec)[2].startswith(
        "From the cells measured at T = 0.6 that ran (batch size 1; sampled outputs are not judged against target-only's)."
    )
