"""bench.round_trace: each arm's engine as the bench starts it, arms a setting cannot run refused
before any engine starts, and the untimed primer engine (against the stand-in sglang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_fakes import install_fake_sglang

from ddtree_overlay.bench import round_trace, settings
from ddtree_overlay.bench.arms import Arm
from ddtree_overlay.fixture_paths import PAIRS

REPO = Path(__file__).resolve().parents[2]
HYBRID = PAIRS["hybrid"]


def test_nextn_gets_the_targets_mtp_head_and_dflash_ddtree_the_pairs_drafter(tmp_path: Path) -> None:
    setting = settings.make_setting("hybrid", scratch=tmp_path)
    nextn = round_trace.engine_kwargs(Arm.parse("nextn-no-overlap"), setting)
    assert nextn["speculative_draft_model_path"] == str(HYBRID / "target")  # not the DFlash drafter
    assert (nextn["speculative_algorithm"], nextn["disable_overlap_schedule"]) == ("NEXTN", True)
    assert nextn["speculative_num_draft_tokens"] == 4
    for name in ("ddtree-b32", "dflash"):
        assert round_trace.engine_kwargs(Arm.parse(name), setting)["speculative_draft_model_path"] == str(HYBRID / "draft")
    assert "speculative_draft_model_path" not in round_trace.engine_kwargs(Arm.parse("plain"), setting)


def test_every_arm_runs_triton_unless_a_baseline_names_its_backend(tmp_path: Path) -> None:
    setting = settings.make_setting("fixture", scratch=tmp_path)
    backend = {name: round_trace.engine_kwargs(Arm.parse(name), setting).get("attention_backend")
               for name in ("dflash", "ddtree-b15", "dflash@flashinfer", "dflash@auto")}
    assert backend == {"dflash": "triton", "ddtree-b15": "triton", "dflash@flashinfer": "flashinfer", "dflash@auto": None}
    hybrid = settings.make_setting("hybrid", scratch=tmp_path)
    assert round_trace.refusal(Arm.parse("nextn@triton"), hybrid, "0.5.14").endswith("ask for nextn-no-overlap@triton")
    assert round_trace.refusal(Arm.parse("nextn@flashinfer"), hybrid, "0.5.14") is None  # flashinfer hands out no buffer


@pytest.mark.parametrize(
    ("setting", "arms", "version", "message"),
    [
        ("hybrid", "dflash,nextn", "0.5.14", "round_trace: nextn: in stock sglang 0.5.14 the EAGLE worker"),
        ("hybrid", "nextn", None, "round_trace: nextn: in stock sglang releases before 0.5.17"),
        ("hybrid", "nextn@triton", "0.5.14", "round_trace: nextn@triton: in stock sglang 0.5.14 the EAGLE worker"),
        ("fixture", "nextn-no-overlap", "0.5.17", "round_trace: nextn-no-overlap: nextn needs a target with an MTP head"),
        ("hybrid", "eagle3", "0.5.17", "round_trace: eagle3: eagle3 needs an EAGLE-3 drafter"),
        ("hybrid", "ddtree-b3x", "0.5.17", "round_trace: unknown arm 'ddtree-b3x'"),
    ],
)
def test_an_arm_the_setting_cannot_run_stops_before_any_engine(
    tmp_path: Path, setting: str, arms: str, version: str | None, message: str
) -> None:
    made = settings.make_setting(setting, scratch=tmp_path)
    with pytest.raises(SystemExit, match="^" + message.replace("(", r"\(")):
        round_trace.parse_arms(arms, made, version)


def test_what_the_setting_runs_is_parsed_with_its_environment_over_the_bench_arms(tmp_path: Path) -> None:
    hybrid = settings.make_setting("hybrid", scratch=tmp_path)
    parsed = round_trace.parse_arms("nextn,ddtree-b32@SGLANG_X=1", hybrid, "0.5.17")
    serve_fewer = {"SGLANG_DDTREE_SERVE_FEWER_REQUESTS": "1"}  # as the bench starts DDTREE on a hybrid
    assert parsed == [
        ("nextn", Arm.parse("nextn"), {}, {}),
        ("ddtree-b32@SGLANG_X=1", Arm.ddtree(32), serve_fewer | {"SGLANG_X": "1"}, {}),
    ]
    assert round_trace.parse_arms("nextn-no-overlap", hybrid, "0.5.14")[0][1] == Arm.parse("nextn-no-overlap")
    dense = settings.make_setting("fixture", scratch=tmp_path)
    (_, _, env, _), = round_trace.parse_arms("ddtree-b15-chain@SGLANG_DDTREE_TREE_SHAPE=tree", dense, "0.5.17")
    assert env == {"SGLANG_DDTREE_TREE_SHAPE": "tree"}  # the name's setting wins over the chain control's
    assert round_trace.parse_arms("ddtree-b15-chain", dense, "0.5.17")[0][2] == {"SGLANG_DDTREE_TREE_SHAPE": "chain"}


def trace(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict], list[dict]]:
    root = install_fake_sglang(tmp_path / "fake")
    log = tmp_path / "engines.log"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(root), str(REPO)]), "FAKE_SGLANG_LOG": str(log)}
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "ddtree_overlay.bench.round_trace", "--out", str(out), "--setting", "hybrid",
         "--prompts-per-arm", "2", "--trace-tokens", "5", *args],
        capture_output=True, text=True, env=env, check=False,
    )
    engines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    records = json.loads((out / "round_trace.json").read_text()) if (out / "round_trace.json").exists() else []
    return done, records, engines


def test_an_untimed_primer_of_the_first_arm_starts_before_the_measured_ones(tmp_path: Path) -> None:
    done, records, engines = trace(tmp_path, "--arms", "nextn-no-overlap,ddtree-b32")
    assert done.returncode == 0, done.stderr
    assert [(e["speculative_algorithm"], e["speculative_draft_model_path"]) for e in engines] == [
        ("NEXTN", str(HYBRID / "target")), ("NEXTN", str(HYBRID / "target")), ("DDTREE", str(HYBRID / "draft")),
    ]
    assert [(r["arm"], r.get("primer", False)) for r in records] == [
        ("nextn-no-overlap", True), ("nextn-no-overlap", False), ("ddtree-b32", False),
    ]
    assert "tok_per_s" not in records[0] and records[0]["start_s"] >= 0
    assert all(len(r["timed_step_ms"]) == 2 and r["step_ms"] == min(r["timed_step_ms"]) for r in records[1:])
    assert records[2]["requests_at_once"] == 1  # --batch-size 1 asked for on a hybrid target
    rows = [line for line in done.stdout.splitlines() if line.startswith("| nextn-no-overlap |")]
    assert len(rows) == 1  # the table lists the measured arm once
    done, records, engines = trace(tmp_path / "without", "--arms", "nextn-no-overlap,ddtree-b32", "--no-primer")
    assert done.returncode == 0, done.stderr
    assert len(engines) == 2 and not any(r.get("primer") for r in records)


def test_an_arms_engine_setting_reaches_its_engine_only(tmp_path: Path) -> None:
    arms = "ddtree-b32@speculative_draft_attention_backend=flashinfer,ddtree-b32,ddtree-b32@attention_backend=flashinfer"
    done, records, engines = trace(tmp_path, "--arms", arms, "--no-primer")
    assert done.returncode == 0, done.stderr
    assert [e.get("speculative_draft_attention_backend") for e in engines] == ["flashinfer", None, None]
    assert [e["attention_backend"] for e in engines] == ["triton", "triton", "flashinfer"]
    assert [r["arm"] for r in records] == arms.split(",")


def test_a_refused_arm_starts_no_engine_at_all(tmp_path: Path) -> None:
    done, records, engines = trace(tmp_path, "--arms", "ddtree-b32,nextn")  # overlap: refused
    assert done.returncode != 0 and "round_trace: nextn: in stock sglang releases before 0.5.17" in done.stderr
    assert engines == [] and records == []


def test_the_script_runs_the_trace_only_as_the_main_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's scheduler starts with spawn, which re-imports the parent's main file as
    `__mp_main__`: that import must not start a trace of its own."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "round_trace.py"
    ran: list = []
    monkeypatch.setattr(runpy, "run_module", lambda name, run_name: ran.append((name, run_name)))
    runpy.run_path(str(script), run_name="__mp_main__")
    assert ran == []
    runpy.run_path(str(script), run_name="__main__")
    assert ran == [("ddtree_overlay.bench.round_trace", "__main__")]
