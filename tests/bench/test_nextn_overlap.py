"""NEXTN on a hybrid target (bench.nextn_overlap): which stock releases crash with overlap
scheduling, and the sweep's NEXTN arm without it there."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ddtree_overlay.bench import analysis, settings
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench.arms import NEXTN, Arm
from ddtree_overlay.bench.attention import baseline_backends
from ddtree_overlay.bench.nextn_overlap import crash_reason
from ddtree_overlay.fixture_paths import PAIRS

HYBRID = PAIRS["hybrid"]


@pytest.mark.parametrize(
    ("version", "crashes"),
    [
        ("0.5.14", True), ("0.5.15", True), ("0.5.15.post1", True), ("0.5.16", True),
        ("0.5.17", False), ("0.5.23", False), ("0.6.0", False), (None, True), ("not-a-version", True),
    ],
)
def test_the_crash_is_in_the_releases_before_the_hybrid_backend_forwarded_the_verify_mask(
    version: str | None, crashes: bool
) -> None:
    why = crash_reason(hybrid=True, attention_backend="triton", sglang_version=version)
    assert (why is not None) == crashes
    if version == "0.5.14":
        assert why is not None and why.startswith("in stock sglang 0.5.14 the EAGLE worker with overlap scheduling")
        assert "HybridLinearAttnBackend does not forward get_verify_buffers_to_fill_after_draft" in why
    if version is None:
        assert why is not None and why.startswith("in stock sglang releases before 0.5.17 ")


def test_a_dense_target_or_flashinfer_has_no_such_crash() -> None:
    assert crash_reason(hybrid=False, attention_backend="triton", sglang_version="0.5.14") is None
    assert crash_reason(hybrid=True, attention_backend="flashinfer", sglang_version="0.5.14") is None


def test_the_settings_know_which_targets_are_hybrids(tmp_path: Path) -> None:
    hybrid = settings.make_setting("hybrid", scratch=tmp_path)
    assert hybrid.hybrid and hybrid.nextn
    assert not settings.make_setting("fixture", scratch=tmp_path).hybrid
    assert settings.make_setting("qwen3.6-27b-random", scratch=tmp_path, write=False).hybrid
    assert not settings.make_setting("qwen3-8b-random", scratch=tmp_path, write=False).hybrid


def hybrid_plan(tmp_path: Path, version: str | None, **config) -> bp.SweepPlan:
    """The plan `bench` makes on the hybrid pair: NEXTN's scheduling per baseline backend, as
    `commands.bench` works it out (default baseline backend here: triton)."""
    setting = settings.make_setting("hybrid", scratch=tmp_path)
    defaults = {"budgets": (32,), "batch_sizes": (1, 16), "temperatures": (0.0,), "primer": False,
                "baseline_attention_backend": "triton"}
    config = bp.BenchConfig(**(defaults | config))
    why = {
        backend: reason
        for backend in baseline_backends(config.baseline_attention_backend)
        if (reason := crash_reason(hybrid=setting.hybrid, attention_backend=backend, sglang_version=version))
    }
    return bp.plan_sweep(replace(setting, nextn_without_overlap=why), config)


def test_the_sweep_runs_nextn_without_overlap_where_it_crashes_and_refuses_it_with(tmp_path: Path) -> None:
    crashing = hybrid_plan(tmp_path, "0.5.14")
    nextn = next(g for g in crashing.groups if g.arm.algorithm == NEXTN)
    assert nextn.arm == Arm(NEXTN, overlap=False) and nextn.name == "nextn-no-overlap"
    assert nextn.engine["disable_overlap_schedule"] is True
    assert nextn.engine["speculative_draft_model_path"] == str(HYBRID / "target")
    fixed = hybrid_plan(tmp_path, "0.5.17")
    assert [g.name for g in fixed.groups if g.arm.algorithm == NEXTN] == ["nextn"]
    with pytest.raises(ValueError, match=r"^--only nextn: in stock sglang 0\.5\.14 .*; ask for nextn-no-overlap$"):
        hybrid_plan(tmp_path, "0.5.14", only=("nextn",))
    assert [g.name for g in hybrid_plan(tmp_path, "0.5.14", only=("nextn-no-overlap",)).groups] == ["nextn-no-overlap"]
    with pytest.raises(ValueError, match=r"^--only nextn@triton: in stock .*; ask for nextn-no-overlap@triton$"):
        hybrid_plan(tmp_path, "0.5.14", only=("nextn@triton",), baseline_attention_backend="flashinfer,triton")


def test_nextn_runs_without_overlap_only_on_the_backends_where_it_crashes(tmp_path: Path) -> None:
    # flashinfer hands out no tree-mask buffer: NEXTN keeps overlap there beside triton's no-overlap arm
    both = hybrid_plan(tmp_path, "0.5.14", baseline_attention_backend="flashinfer,triton")
    assert [g.name for g in both.groups if g.arm.algorithm == NEXTN] == ["nextn", "nextn-no-overlap@triton"]
    assert hybrid_plan(tmp_path, "0.5.14", only=("nextn",), baseline_attention_backend="flashinfer,triton").groups
    report = analysis.analyse(both, {}, {})
    assert report["setting"]["nextn_without_overlap"] == {"triton": crash_reason(
        hybrid=True, attention_backend="triton", sglang_version="0.5.14")}
    (note,) = [n for n in report["notes"] if n.startswith("NEXTN")]
    assert note.startswith("NEXTN on triton ran without overlap scheduling: in stock sglang 0.5.14")


def test_the_report_says_why_and_keeps_it_for_reanalysis(tmp_path: Path) -> None:
    report = analysis.analyse(hybrid_plan(tmp_path, "0.5.14"), {}, {})
    assert report["setting"]["hybrid"] and report["setting"]["nextn_without_overlap"]["triton"].startswith(
        "in stock sglang 0.5.14")
    (note,) = [n for n in report["notes"] if n.startswith("NEXTN")]
    assert note.startswith("NEXTN on triton ran without overlap scheduling: in stock sglang 0.5.14 the EAGLE worker")
    assert note.endswith("(docs/bench.md#nextn-on-a-hybrid-target)")
    assert not any(n.startswith("NEXTN") for n in analysis.analyse(hybrid_plan(tmp_path, "0.5.17"), {}, {})["notes"])
