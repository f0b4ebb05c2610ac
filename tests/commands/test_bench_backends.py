"""The attention backend of each bench arm: DDTREE's `--attention-backend`, every other arm's
`--baseline-attention-backend` (by default none given, SGLang's own choice), on the command line,
in the dry run, in the records the runner writes against the stand-in sglang (which resolves an
engine given none to fa3, as SGLang does on an H200), and in the report and its re-analysis."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_fa3_env, install_fake_sglang
from overlay_helpers import run_cli

from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench import settings, supervision
from ddtree_overlay.bench.attention import AUTO_TEXT
from ddtree_overlay.commands import bench as bench_module
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import AttentionBackendMissing, ExitCode

DRY = ("bench", "--env", sys.executable, "--dry-run", "--budgets", "8")
BASELINES = ("target-only", "dflash", "dflash-no-overlap")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--baseline-attention-backend", "fa2"],
         "expected backends among auto, triton, flashinfer, fa3, fa4, trtllm_mha, torch_native, got 'fa2'"),
        (["--baseline-attention-backend", "flashinfer,fa2"], "got 'fa2'"),
        (["--baseline-attention-backend", "triton,triton"], "a backend listed twice: 'triton,triton'"),
        (["--attention-backend", "auto"], "expected one of triton, flashinfer, got 'auto'"),
    ],
)
def test_a_backend_outside_the_choices_is_a_usage_error(args: list[str], fragment: str, tmp_path: Path) -> None:
    done = run_cli(*DRY, "--out", str(tmp_path / "out"), *args)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert fragment in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_the_dry_run_names_each_arms_backend() -> None:
    done = run_cli(*DRY)
    assert done.returncode == 0, done.stderr
    assert f"attention backend: {AUTO_TEXT} (target-only, dflash, dflash-no-overlap), triton (ddtree-b8)" in done.stdout
    done = run_cli(*DRY, "--json", "--attention-backend", "flashinfer", "--baseline-attention-backend", "fa3")
    plan = json.loads(done.stdout)["data"]["plan"]
    assert {g["name"]: g["attention_backend"] for g in plan["groups"]} == (
        dict.fromkeys(BASELINES, "fa3") | {"ddtree-b8": "flashinfer"}
    )
    assert [(b["backend"], b["groups"]) for b in plan["attention_backends"]] == [
        ("fa3", list(BASELINES)), ("flashinfer", ["ddtree-b8"])
    ]
    same = run_cli(*DRY, "--baseline-attention-backend", "triton")
    assert "attention backend: triton (target-only, dflash, dflash-no-overlap, ddtree-b8)" in same.stdout


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished run against the stand-in sglang: bench.json, bench.md and records.jsonl."""
    monkeypatch.setenv("PYTHONPATH", str(install_fake_sglang(tmp_path / "fake")))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    setting = settings.make_setting("fixture", scratch=tmp_path / "models")
    config = bp.BenchConfig(budgets=(8,), batch_sizes=(1,), temperatures=(0.0,), max_new_tokens=9,
                            prompts_per_cell=2)
    plan = bp.plan_sweep(setting, config)
    report = supervision.run_bench(Path(sys.executable), plan, tmp_path / "out", context={"gpu": "fake"},
                                   runner_options={"idle_gap_s": 0.01, "health_idle_s": 0.01})
    bench_module._result(report, tmp_path / "out")
    return tmp_path / "out"


def engine_records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "records.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == "engine"]


def reanalysed(out: Path) -> tuple[dict[str, Any], str]:
    report = bench_module.reanalyse(out).data["report"]
    return report, (out / "bench.md").read_text()


def test_each_engine_records_the_backend_it_ran_and_the_report_names_it_per_arm(out: Path, tmp_path: Path) -> None:
    started = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert [e.get("attention_backend") for e in started] == ["triton", None, None, None, "triton"]  # the primer first
    assert {r["arm"]: r["attention_backend"] for r in engine_records(out)} == (
        dict.fromkeys(BASELINES, "fa3") | {"primer": "triton", "ddtree-b8": "triton"}
    )
    report = json.loads((out / "bench.json").read_text())
    assert report["config"]["baseline_attention_backend"] == "auto"
    assert {g["name"]: g["attention_backend"] for g in report["groups"]} == (
        dict.fromkeys(BASELINES, "fa3") | {"ddtree-b8": "triton"}
    )
    text = (out / "bench.md").read_text()
    assert (f"- **Engines**: attention backend `fa3` for target-only and DFLASH ({AUTO_TEXT}), `triton` for DDTREE; "
            "tensor-parallel size 1 for every arm, decode CUDA graphs") in text
    assert "| arm | attention | T=0 bs=1 |" in text and "| DFLASH | fa3 | " in text and "| DDTREE B=8 | triton | " in text
    assert "Attention: DFLASH on fa3, DDTREE on triton." in text
    assert "| engine | status | start s | warm-up s | requests at once | health | attention |" in text
    assert all(r["warm_up_s"] >= 0 for r in engine_records(out) if r["ok"])  # the untimed waves after the start
    assert "| primer (untimed): ddtree-b8 | ok |" in text and "| dflash | ok | " in text
    assert "| ok | fa3 |" in text and "| ok | triton |" in text
    again, again_text = reanalysed(out)
    assert again["groups"] == report["groups"] and again_text.split("## Issues")[0] == text.split("## Issues")[0]


def test_records_without_the_backend_show_the_planned_one(out: Path) -> None:
    records = (out / "records.jsonl").read_text().splitlines()
    stripped = [{k: v for k, v in json.loads(line).items() if k != "attention_backend"} for line in records]
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
    report, text = reanalysed(out)
    assert {g["name"]: g["attention_backend"] for g in report["groups"]} == (
        dict.fromkeys(BASELINES, "auto") | {"ddtree-b8": "triton"}
    )
    assert f"| DFLASH | {AUTO_TEXT} | " in text and "| DDTREE B=8 | triton | " in text
    assert f"attention backend {AUTO_TEXT} for target-only and DFLASH, `triton` for DDTREE;" in text


def test_a_report_from_before_the_option_ran_every_arm_on_one_backend(out: Path) -> None:
    records = (out / "records.jsonl").read_text().splitlines()
    stripped = [{k: v for k, v in json.loads(line).items() if k != "attention_backend"} for line in records]
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
    old = json.loads((out / "bench.json").read_text())
    del old["config"]["baseline_attention_backend"]
    (out / "bench.json").write_text(json.dumps(old))
    report, text = reanalysed(out)
    assert report["config"]["baseline_attention_backend"] == "triton"
    assert {g["attention_backend"] for g in report["groups"]} == {"triton"}
    assert "- **Engines**: attention backend `triton` and tensor-parallel size 1 for every arm," in text
    assert "| arm | T=0 bs=1 |" in text and "attention |" not in text and "Attention:" not in text


@pytest.mark.parametrize(("capability", "refused"), [("9.0", True), ("8.0", False)])
def test_a_sweep_that_would_run_fa3_without_it_stops_before_any_engine_starts(
    sglang_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capability: str, refused: bool
) -> None:
    """The env's sgl_kernel has no flash_ops and SGLang's default for DFLASH is fa3 on Hopper:
    the bench stops with exit 15 before its first engine, leaving no records and no report; on
    another GPU the default is not fa3 and the sweep goes on."""
    monkeypatch.setenv("PYTHONPATH", str(install_fake_fa3_env(tmp_path / "site", flash_ops=False)))
    monkeypatch.setenv("FAKE_CAPABILITY", capability)
    monkeypatch.setattr(bench_module, "probe_gpu", lambda python: {"gpu": "NVIDIA H200", "torch": "2.11", "error": None})

    class SweepStarted(Exception):
        pass

    def run_bench(*args: Any, **kwargs: Any) -> None:
        raise SweepStarted

    monkeypatch.setattr(bench_module, "run_bench", run_bench)
    config = bp.BenchConfig(budgets=(8,), batch_sizes=(1,), temperatures=(0.0,), max_new_tokens=5, prompts_per_cell=1)
    request = bench_module.BenchRequest(config=config, out=tmp_path / "out")
    if not refused:
        with pytest.raises(SweepStarted):
            bench_module.bench(probe_env(sglang_env), request)
        return
    with pytest.raises(AttentionBackendMissing) as stopped:
        bench_module.bench(probe_env(sglang_env), request)
    assert stopped.value.exit_code == ExitCode.ATTENTION_BACKEND_MISSING
    assert stopped.value.message.startswith(
        "the attention backend of target-only and DFLASH here is fa3 (SGLang's default for this GPU), but `sgl_kernel`"
    )
    written = sorted(p.name for p in (tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else []
    assert written in ([], ["models"])  # the fixture's models at most: no plan, records or report


def test_dflash_on_each_listed_backend_and_ddtree_against_the_fastest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(install_fake_sglang(tmp_path / "fake")))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))
    monkeypatch.setattr(supervision, "start_references", lambda *a, **k: None)
    setting = settings.make_setting("fixture", scratch=tmp_path / "models")
    config = bp.BenchConfig(budgets=(8,), batch_sizes=(1,), temperatures=(0.0,), max_new_tokens=9, prompts_per_cell=2,
                            baseline_attention_backend="flashinfer,triton", primer=False,
                            only=("target-only", "dflash", "dflash@triton", "ddtree-b8"))
    plan = bp.plan_sweep(setting, config)
    report = supervision.run_bench(Path(sys.executable), plan, tmp_path / "out", context={"gpu": "fake"},
                                   runner_options={"idle_gap_s": 0.01, "health_idle_s": 0.01})
    bench_module._result(report, tmp_path / "out")
    started = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    assert [e.get("attention_backend") for e in started] == ["flashinfer", "flashinfer", "triton", "triton"]
    report = json.loads((tmp_path / "out" / "bench.json").read_text())
    rows = {r["group"]: r for r in report["cells"]}
    assert rows["dflash@triton"]["backend"] == "triton" and "backend" not in rows["dflash"]
    (column,) = report["fastest_modes"]
    fastest = max(("dflash", "dflash@triton"), key=lambda g: rows[g]["tok_per_s"])
    assert column["dflash"]["group"] == fastest
    assert column["best"]["speedup_vs_dflash"] == pytest.approx(rows["ddtree-b8"]["tok_per_s"] / rows[fastest]["tok_per_s"])
    text = (tmp_path / "out" / "bench.md").read_text()
    assert "| DFLASH on triton | triton | " in text and "| DFLASH | flashinfer | " in text
    assert f"| DFLASH | {rows[fastest]['tok_per_s']:.0f}{' on triton' if fastest != 'dflash' else ''} |" in text
    again, again_text = reanalysed(tmp_path / "out")
    assert again["groups"] == report["groups"] and again["fastest_modes"] == report["fastest_modes"]
    assert "| DFLASH on triton | triton | " in again_text
