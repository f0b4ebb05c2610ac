"""bench.fa3_check: a sweep whose arms would run FA3 in an env whose sgl_kernel lacks it is
refused before any engine starts; the probe's answers stand in for the env's (tests/in_target
runs the probe itself)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import fa3_check, settings
from ddtree_overlay.bench import plan as bp
from ddtree_overlay.engine.errors import AttentionBackendMissing, ExitCode
from ddtree_overlay.engine.target import TargetRun

PYTHON = Path("/srv/venv/bin/python")
BASELINES = ("target-only", "dflash", "dflash-no-overlap")


def sweep(tmp_path: Path, **config: Any) -> bp.SweepPlan:
    setting = settings.make_setting("fixture", scratch=tmp_path)
    return bp.plan_sweep(setting, bp.BenchConfig(**({"budgets": (8,), "batch_sizes": (1,)} | config)))


class Probe:
    """Stands in for in_target/fa3_probe.py: whether sgl_kernel has ``flash_ops``, and without
    it the backend SGLang picks for every engine asking for its default; ``asked`` keeps the
    engines each run was asked about."""

    def __init__(self) -> None:
        self.flash_ops: bool | None = False
        self.default: str | None = "fa3"
        self.errors: dict[str, str] = {}
        self.problem: str | None = None
        self.asked: list[dict[str, Any]] = []

    def __call__(self, python: Path, name: str, args: list[str], **kwargs: Any) -> TargetRun:
        assert (python, name, kwargs["isolated"]) == (PYTHON, "fa3_probe", False)
        engines = json.loads(args[0])
        self.asked.append(engines)
        if self.problem:
            return TargetRun(None, self.problem)
        backends = {e: self.default for e in engines if e not in self.errors} if self.flash_ops is False else {}
        return TargetRun({"flash_ops": self.flash_ops, "backends": backends, "errors": self.errors}, None)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Probe:
    stand_in = Probe()
    monkeypatch.setattr(fa3_check, "run_script", stand_in)
    return stand_in


def test_arms_on_sglangs_default_are_refused_where_it_is_fa3_and_flash_ops_is_missing(
    tmp_path: Path, probe: Probe
) -> None:
    with pytest.raises(AttentionBackendMissing) as refused:
        fa3_check.check_fa3(PYTHON, sweep(tmp_path))
    assert refused.value.exit_code == ExitCode.ATTENTION_BACKEND_MISSING == 15
    assert refused.value.message == (
        "the attention backend of target-only and DFLASH here is fa3 (SGLang's default for this GPU), but "
        f"`sgl_kernel` in `{PYTHON}` has no `flash_ops` (FA3 is not installed): no engine was started"
    )
    assert refused.value.hint == "pass --baseline-attention-backend flashinfer or triton"
    (engines,) = probe.asked
    assert sorted(engines) == sorted(BASELINES)  # DDTREE's engines are not asked about
    assert engines["dflash"]["kwargs"]["speculative_algorithm"] == "DFLASH"
    assert engines["dflash"]["kwargs"]["model_path"].endswith("target")  # the Engine keywords the runner passes
    assert "attention_backend" not in engines["dflash"]["kwargs"]


def test_fa3_asked_for_is_refused_without_resolving_anything(tmp_path: Path, probe: Probe) -> None:
    with pytest.raises(AttentionBackendMissing) as refused:
        fa3_check.check_fa3(PYTHON, sweep(tmp_path, baseline_attention_backend="fa3", only=("dflash", "ddtree-b8")))
    assert refused.value.message.startswith("DFLASH's attention backend here is fa3, but `sgl_kernel`")
    assert probe.asked == [{}]


def test_where_flash_ops_is_there_every_backend_is_allowed(tmp_path: Path, probe: Probe) -> None:
    probe.flash_ops = True
    assert fa3_check.check_fa3(PYTHON, sweep(tmp_path)) == []
    assert fa3_check.check_fa3(PYTHON, sweep(tmp_path, baseline_attention_backend="fa3")) == []


def test_where_sglang_picks_another_default_the_sweep_goes_ahead(tmp_path: Path, probe: Probe) -> None:
    probe.default = "flashinfer"
    assert fa3_check.check_fa3(PYTHON, sweep(tmp_path)) == []


@pytest.mark.parametrize("backend", ["flashinfer", "triton"])
def test_flashinfer_and_triton_baselines_need_no_probe(
    tmp_path: Path, probe: Probe, backend: str
) -> None:
    assert fa3_check.check_fa3(PYTHON, sweep(tmp_path, baseline_attention_backend=backend)) == []
    assert probe.asked == []


def test_ddtree_arms_are_not_checked(tmp_path: Path, probe: Probe) -> None:
    """DDTREE refuses FA3 and runs its own backend: a sweep of DDTREE arms alone asks nothing,
    whatever the baselines' backend would have been."""
    plan = sweep(tmp_path, baseline_attention_backend="fa3", only=("ddtree-b8",))
    assert [g.arm.algorithm for g in plan.groups] == ["DDTREE"]
    assert fa3_check.check_fa3(PYTHON, plan) == []
    assert probe.asked == []
    assert [g.name for g in fa3_check.fa3_candidates(sweep(tmp_path))] == list(BASELINES)


def test_what_the_check_cannot_tell_is_a_note_not_a_refusal(tmp_path: Path, probe: Probe) -> None:
    probe.flash_ops = None  # no sgl_kernel in the env
    assert fa3_check.check_fa3(PYTHON, sweep(tmp_path)) == []
    probe.flash_ops, probe.errors = False, {"dflash": "ValueError: boom"}
    (note,) = fa3_check.check_fa3(PYTHON, sweep(tmp_path, only=("dflash",)))
    assert note.startswith("which attention backend SGLang picks for dflash could not be told") and "boom" in note
    probe.problem = "did not answer within 300 s"
    (note,) = fa3_check.check_fa3(PYTHON, sweep(tmp_path))
    assert note.startswith(f"the FA3 check could not run in `{PYTHON}` (did not answer within 300 s)")
