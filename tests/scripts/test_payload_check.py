"""scripts/gpu/payload_check.py's CPU-side pieces: which budgets an arm's rounds took."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_payload_check():
    spec = importlib.util.spec_from_file_location("payload_check", ROOT / "scripts" / "gpu" / "payload_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_arm_counts_the_budgets_of_the_profile_windows_written_while_its_engine_lived(tmp_path: Path) -> None:
    check = load_payload_check()
    profile = tmp_path / "profile.jsonl"
    def window(t_first: float, budgets: dict[str, int]) -> dict:  # as ddtree_profile writes one
        rounds = sum(budgets.values())
        return {"t_first": t_first, "t_last": t_first + 1.0, "rounds": rounds, "requests": rounds,
                "cuda_graph_rounds": rounds, "ms_sum": {"round": 2.0 * rounds}, "budgets": budgets}

    windows = [
        window(5.0, {"64": 9}),  # the arm before
        window(12.0, {"32": 40, "8": 3}),
        window(15.0, {"32": 10, "128": 2}),
        window(25.0, {"8": 1}),  # the arm after
    ]
    profile.write_text("".join(json.dumps(w) + "\n" for w in windows))
    arm = {"t_start": 10.0, "t_end": 20.0}
    assert check.budgets_used(str(profile), arm) == {"8": 3, "32": 50, "128": 2}
    assert check.budgets_used(None, arm) is None
    assert check.budgets_used(str(profile), {"t_start": 30.0, "t_end": 40.0}) is None
    assert check.budgets_used(str(profile), {}) is None  # a record from before t_start was kept


def test_the_adaptive_preset_checks_lossless_overlap_sync_and_sampling() -> None:
    arms = {arm["name"]: arm for arm in load_payload_check().presets(32, 256)["adaptive"]}
    assert arms["ddtree-adaptive"]["engine"]["speculative_ddtree_adaptive_budgets"] == "8,32,128"
    assert arms["ddtree-adaptive"]["env"] == {"SGLANG_DDTREE_SYNC_DEBUG": "error"}
    assert arms["ddtree-adaptive-no-overlap"]["engine"]["disable_overlap_schedule"] is True
    assert {"plain", "plain-t1", "ddtree-adaptive-t1"} <= set(arms)


def test_the_summary_is_written_after_every_arm_so_a_cut_off_run_keeps_its_verdicts(tmp_path: Path) -> None:
    check = load_payload_check()
    greedy = {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True}

    def record(arm: str, outputs: list[list[int]], **extra) -> dict:
        meta = [{"completion_tokens": len(o), "spec_verify_ct": 2} for o in outputs]
        return {"arm": arm, "ok": True, "sampling": greedy, "outputs": outputs, "meta": meta,
                "tok_per_s": 100.0, **extra}

    results = tmp_path / "arms.jsonl"
    plain = record("plain", [[1, 2, 3, 4], [5, 6, 7, 8]], top2_margins=[[0.5] * 4, [0.5, 0.0, 0.5, 0.5]])
    results.write_text(json.dumps(plain) + "\n")
    assert check.write_summary(results, tmp_path, None)["lossless"] == []
    # the second arm (after which the time box struck) diverges where the target's top two tie
    ddtree = record("ddtree-adaptive", [[1, 2, 3, 4], [5, 9, 7, 8]])
    results.write_text(json.dumps(plain) + "\n" + json.dumps(ddtree) + "\n")
    check.write_summary(results, tmp_path, None)
    (verdict,) = json.loads((tmp_path / "summary.json").read_text())["lossless"]
    assert (verdict["arm"], verdict["identical"], verdict["unexplained"], verdict["passed"]) == (
        "ddtree-adaptive", 1, 0, True,
    )
