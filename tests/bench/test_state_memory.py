"""bench.state_memory: what a hybrid target's verify keeps per request in each of DDTREE's two
modes, the mode read from the environment, and the dry run's and report's view of it.

The oracle is the arithmetic written out by hand at Qwen3.6-27B's shape (48 GDN layers, 48 value
and 16 key heads of 128, conv kernel 4, fp32 state, bf16 activations) and the per-request figures
scripts/gpu/gdn_flat_state.py printed on an H200 (2026-12-02). That these formulas are the
payload's own is tests/payload/test_payload_ddtree_gdn_tree.py's check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import analysis, plan_json, reanalysis, settings, state_memory
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench.arms import DDTREE, DFLASH, NEXTN
from ddtree_overlay.bench.markdown import markdown_report
from ddtree_overlay.bench.state_memory import FLAT, HYBRID_STATE_ENV, SNAPSHOT
from ddtree_overlay.bench.target_config import target_config
from ddtree_overlay.engine.errors import BadSetting, ExitCode
from ddtree_overlay.fixture_paths import PAIRS

MIB = 1 << 20
GDN = target_config(settings.qwen3_6_27b_configs()[0]).gated_deltanet
CONV = 48 * (2 * 16 * 128 + 48 * 128) * 3 * 2  # a conv window per node: 2.81 MiB
SSM = 48 * 48 * 128 * 128 * 4  # a recurrent state: 144 MiB
STASH = 48 * ((16 * 128 + 48 * 128) * 2 + 2 * 48 * 4)  # k, v bf16; g, beta fp32: 0.77 MiB
SLOT = 48 * 128 * 128 * 4  # one layer's state: 3 MiB


def plan_for(tmp_path: Path, setting: str = "qwen3.6-27b-random", **config: Any) -> bp.SweepPlan:
    made = settings.make_setting(setting, scratch=tmp_path, write=False)
    defaults: dict[str, Any] = {"budgets": (15, 32), "temperatures": (0.0,), "primer": False, "batch_sizes": (),
                                "concurrencies": (1, 16)}
    return bp.plan_sweep(made, bp.BenchConfig(**(defaults | config)))


def test_a_snapshot_node_holds_the_state_and_a_conv_window() -> None:
    assert GDN is not None
    assert state_memory.recurrent_state_bytes(GDN) == SSM == 144 * MIB
    assert state_memory.conv_window_bytes(GDN) == CONV
    entry = state_memory.verify_state(GDN, SNAPSHOT, verify_width=33)
    assert (entry["per_node_bytes"], entry["scratch_bytes"]) == (SSM + CONV, 0)
    assert entry["per_request_bytes"] / MIB == pytest.approx(4844.8, abs=0.05)
    assert state_memory.verify_state(GDN, SNAPSHOT, verify_width=65)["per_request_bytes"] / MIB == pytest.approx(
        9542.8, abs=0.05
    )
    assert entry["per_request_text"] == "33 x 147 MiB = 4.7 GiB"


@pytest.mark.parametrize(("width", "slots", "mib"), [(16, 7, None), (33, 15, 163.1), (65, 15, 277.7)])
def test_a_flat_node_holds_a_conv_window_and_its_inputs_and_a_request_one_layers_scratch(
    width: int, slots: int, mib: float | None
) -> None:
    assert GDN is not None
    assert state_memory.stash_bytes_per_node(GDN) == STASH
    assert state_memory.branch_slots(width, 16) == slots
    entry = state_memory.verify_state(GDN, FLAT, verify_width=width)
    assert entry["per_node_bytes"] == CONV + STASH
    assert entry["scratch_bytes"] == slots * SLOT
    assert entry["per_request_bytes"] == width * (CONV + STASH) + slots * SLOT
    if mib is not None:
        assert entry["per_request_bytes"] / MIB == pytest.approx(mib, abs=0.05)


def test_the_branch_slots_are_the_open_branch_nodes_and_at_least_one() -> None:
    assert [state_memory.branch_slots(w, 16) for w in (1, 2, 3, 5, 31, 32, 257)] == [1, 1, 1, 2, 15, 15, 15]
    assert state_memory.branch_slots(33, 4) == 3


def test_tp_splits_every_part_over_the_ranks() -> None:
    assert GDN is not None
    for state in (SNAPSHOT, FLAT):
        one = state_memory.verify_state(GDN, state, verify_width=33)
        two = state_memory.verify_state(GDN, state, verify_width=33, tp_size=2)
        assert two["per_request_bytes"] == one["per_request_bytes"] // 2


def test_a_memory_line_says_the_mode_the_pool_and_the_live_states() -> None:
    assert GDN is not None
    snapshot = state_memory.memory_entry(GDN, SNAPSHOT, verify_width=33, concurrency=16)
    assert snapshot["total_bytes"] == 17 * snapshot["per_request_bytes"]  # and the pool's spare slot
    assert snapshot["live_bytes"] == 16 * (SSM + CONV)
    assert snapshot["text"] == (
        "snapshot: 33 x 147 MiB = 4.7 GiB per request, 80.4 GiB at concurrency 16 (+ 2.3 GiB live)"
    )
    flat = state_memory.memory_entry(GDN, FLAT, verify_width=33, concurrency=16)
    assert flat["live_bytes"] == snapshot["live_bytes"]  # the requests' own states are the same
    assert flat["text"] == (
        "flat: 33 x 3.58 MiB + 45 MiB scratch = 163 MiB per request, 2.7 GiB at concurrency 16 (+ 2.3 GiB live)"
    )


def test_the_mode_comes_from_the_environment_as_the_payload_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HYBRID_STATE_ENV, raising=False)
    assert state_memory.hybrid_state_from_env() == FLAT  # the payload's default
    assert bp.BenchConfig().hybrid_state == FLAT
    monkeypatch.setenv(HYBRID_STATE_ENV, "snapshot")
    assert state_memory.hybrid_state_from_env() == SNAPSHOT
    monkeypatch.setenv(HYBRID_STATE_ENV, "flat")
    assert state_memory.hybrid_state_from_env() == FLAT
    for bad in ("dense", "", "FLAT"):  # the payload refuses an empty value too
        monkeypatch.setenv(HYBRID_STATE_ENV, bad)
        with pytest.raises(BadSetting, match=f"{HYBRID_STATE_ENV}={bad!r} is not `flat` or `snapshot`") as raised:
            state_memory.hybrid_state_from_env()
        assert raised.value.exit_code == ExitCode.BAD_PATCH_SET


def test_only_ddtree_takes_the_mode() -> None:
    assert state_memory.state_of(DDTREE, FLAT) == FLAT
    assert state_memory.state_of(DFLASH, FLAT) == state_memory.state_of(NEXTN, FLAT) == SNAPSHOT


@pytest.mark.parametrize("state", [SNAPSHOT, FLAT])
def test_a_dry_run_shows_each_speculative_arm_in_the_mode_it_runs(tmp_path: Path, state: str) -> None:
    plan = plan_for(tmp_path, hybrid_state=state)
    described = plan_json.describe_plan(plan)
    memory = described["state_memory"]
    assert described["hybrid_state"] == state
    assert set(memory) == {"dflash", "dflash-no-overlap", "ddtree-b15", "ddtree-b32"}  # not target-only
    assert [e["concurrency"] for e in memory["ddtree-b32"]] == [1, 16]
    assert {e["state"] for e in memory["dflash"] + memory["dflash-no-overlap"]} == {SNAPSHOT}
    assert {e["state"] for e in memory["ddtree-b15"] + memory["ddtree-b32"]} == {state}
    assert {e["verify_width"] for e in memory["dflash"]} == {16}
    wide = memory["ddtree-b32"][1]
    assert wide["verify_width"] == 33
    assert wide["per_request_bytes"] / MIB == pytest.approx(163.1 if state == FLAT else 4844.8, abs=0.05)


def test_a_plain_target_has_no_state_memory(tmp_path: Path) -> None:
    described = plan_json.describe_plan(plan_for(tmp_path, "qwen3-8b-random", hybrid_state=FLAT))
    assert described["state_memory"] is None and described["hybrid_state"] is None


def test_a_custom_hybrid_pair_is_read_from_its_config(tmp_path: Path) -> None:
    hybrid = PAIRS["hybrid"]
    made = settings.make_setting("fixture", scratch=tmp_path, target=hybrid / "target", draft=hybrid / "draft",
                                 prompts=hybrid / "heldout_prompts.json")
    shape = made.facts.gated_deltanet
    config = json.loads((hybrid / "target" / "config.json").read_text())["text_config"]
    assert shape is not None and shape.layers == config["layer_types"].count("linear_attention")
    assert state_memory.recurrent_state_bytes(shape) == 6 * 6 * 64 * 64 * 4
    small = state_memory.memory_entry(shape, SNAPSHOT, verify_width=16, concurrency=1)
    assert small["text"] == "snapshot: 16 x 0.58 MiB = 9.35 MiB per request, 19 MiB at concurrency 1 (+ 0.58 MiB live)"


def test_the_report_records_the_mode_and_reanalysis_keeps_it(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, hybrid_state=FLAT)
    report = json.loads(json.dumps(analysis.analyse(plan, {}, {})))
    assert report["config"]["hybrid_state"] == FLAT
    assert reanalysis.config_from_report(report["config"]).hybrid_state == FLAT
    older = {k: v for k, v in report["config"].items() if k != "hybrid_state"}
    assert reanalysis.config_from_report(older).hybrid_state == SNAPSHOT  # runs from before the switch
    assert "DDTREE's Gated-DeltaNet verify state: flat (`SGLANG_DDTREE_HYBRID_STATE`)" in markdown_report(report)
    assert "concurrency is.\n" in markdown_report(report)  # the setting's note ends its own sentence
    plain = json.loads(json.dumps(analysis.analyse(plan_for(tmp_path, "qwen3-8b-random"), {}, {})))
    assert "verify state" not in markdown_report(plain)
