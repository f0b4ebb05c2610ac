"""A repeat whose engine was compiling during its timed window (bench.compiling): found in the
window's host record, listed and marked, left out of the cell's median and of every ratio and
worst case, in the continuous-batching cells and the waves cells alike, and through
`--reanalyse` on the records alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_analysis import references, repeats_run
from test_steady import rows_by_name, steady_plan, synthetic

from ddtree_overlay.bench import analysis
from ddtree_overlay.bench import markdown as md
from ddtree_overlay.bench.compiling import COMPILING_CPU_PER_WALL, window_compiler
from ddtree_overlay.bench.supervision import write_report
from ddtree_overlay.commands.bench import reanalyse


def process(pid: int, comm: str, cpu_per_wall: float) -> dict[str, Any]:
    return {"pid": pid, "comm": comm, "cpu_per_wall": cpu_per_wall, "cpus": "0-15", "last_cpu": 3, "core": "0/3"}


def host(*processes: dict[str, Any]) -> dict[str, Any]:
    return {"busy_cores": 10.1, "cpus": 16, "load1": [4.4, 5.7], "others": [], "processes": list(processes)}


# As the 2026-12-04 H200 run recorded DFLASH's first c=1 window: flashinfer's JIT compiling
# (ninja and nvcc waiting, cudafe++ busy), the scheduler idle.
COMPILING = host(
    process(1987, "cudafe++", 1.0), process(1997, "cudafe++", 0.999), process(1519, "sglang::schedul", 0.007),
    process(1877, "ninja", 0.0), process(1899, "nvcc", 0.0),
)


def test_a_busy_compiler_among_the_engines_processes_marks_the_window() -> None:
    assert window_compiler(COMPILING) == {"comm": "cudafe++", "cpu_per_wall": 1.0, "processes": 2}
    assert window_compiler(host(process(7, "sglang::schedul", 1.01), process(8, "python3", 0.04))) is None
    idle = host(process(7, "sglang::schedul", 1.0), process(9, "ninja", 0.0),
                process(10, "nvcc", COMPILING_CPU_PER_WALL / 2))
    assert window_compiler(idle) is None  # compilers waiting, or ending as the window opened
    assert window_compiler(None) is None and window_compiler({"cpus": 16}) is None  # records without host
    elsewhere = host(process(7, "sglang::schedul", 1.0)) | {"others": [{"pid": 31, "comm": "ptxas", "cpu_per_wall": 0.9}]}
    assert window_compiler(elsewhere) is None  # another job's compile is not this engine's


def test_a_streams_compiling_engine_is_listed_but_not_in_the_median_or_the_ratios(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)  # DFLASH at c=1: 200, 260, 180 tok/s; DDTREE B=32: 300, 240, 330
    report = analysis.analyse(plan, *synthetic(plan, **{"dflash/c1/t0#2": {"host": COMPILING}}))
    dflash, ddtree = rows_by_name(report)["dflash/c1/t0"], rows_by_name(report)["ddtree-b32/c1/t0"]
    assert dflash["status"] == "ok" and (dflash["measured_engines"], dflash["compiling_engines"]) == (2, 1)
    assert (dflash["tok_per_s"], dflash["tok_per_s_min"], dflash["tok_per_s_max"]) == (190.0, 180.0, 200.0)
    assert [e["tok_per_s"] for e in dflash["engines"]] == [200.0, 260.0, 180.0]  # every engine still listed
    assert dflash["engines"][1]["compiling"]["comm"] == "cudafe++"
    assert ddtree["vs_dflash"]["ratio"] == pytest.approx(300 / 190)
    assert ddtree["vs_dflash"]["worst"] == pytest.approx(240 / 200)  # DFLASH's fastest engine that did not compile
    assert (
        "dflash/c1/t0 (repeat 2): the engine was compiling during the timed window (cudafe++ at 1.00 CPU s/s, "
        "1 more compiler process busy): its 260 tok/s is left out of the cell's median and of every ratio"
    ) in report["notes"]
    assert not any("fewer engines than planned" in n for n in report["notes"])
    text = md.markdown_report(report)
    assert "| DFLASH | 1 | 0 | 190 | 200, 260 (compiling), 180 |" in text
    assert "| DFLASH | 190 (180\u2013200); x1.90 target" in text


def test_a_stream_cell_whose_every_engine_compiled_has_no_tok_per_s(tmp_path: Path) -> None:
    plan = steady_plan(tmp_path)
    compiled = {f"dflash/c16/t0#{k}": {"host": COMPILING} for k in (1, 2, 3)}
    report = analysis.analyse(plan, *synthetic(plan, **compiled))
    row = rows_by_name(report)["dflash/c16/t0"]
    assert row["status"] == "compiling" and "tok_per_s" not in row and row["measured_engines"] == 0
    assert "dflash/c16/t0: no tok/s: every engine was compiling during its timed window" in report["notes"]
    # DDTREE at c=16 is set against DFLASH in its other scheduling mode, the only one measured
    assert rows_by_name(report)["ddtree-b32/c16/t0"]["vs_dflash"]["base_group"] == "dflash-no-overlap"
    text = md.markdown_report(report)
    assert "| DFLASH | 200 (180\u2013260); x2.00 target (worst x1.64) | compiling |" in text
    assert "| DFLASH | 16 | 0 | compiling: every engine was compiling during its timed window |" in text


def test_a_waves_repeat_that_compiled_is_left_out_of_the_median_and_the_worst_case(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path)  # DFLASH at T=0 bs=1: 150, 210, 200; DDTREE B=8: 300, 340, 320
    cells["dflash/bs1/t0", 2]["host"] = COMPILING
    report = analysis.analyse(plan, cells, engines, references=references())
    rows = {r["name"]: r for r in report["cells"]}
    dflash = rows["dflash/bs1/t0"]
    assert (dflash["tok_per_s"], dflash["measured_repeats"], dflash["compiling_repeats"]) == (175.0, 2, 1)
    assert [bool(e["compiling"]) for e in dflash["repeats"]] == [False, True, False]
    assert rows["ddtree-b8/bs1/t0"]["speedup_vs_dflash"] == pytest.approx(320 / 175)
    bs1 = next(c for c in report["fastest_modes"] if (c["temperature"], c["batch_size"]) == (0.0, 1))
    assert bs1["worst_case"]["dflash_tok_per_s"] == 200.0  # not the compiling repeat's 210
    assert any(n.startswith("dflash/bs1/t0 (repeat 2): the engine was compiling during the timed window")
               for n in report["notes"])
    assert not any("fewer than their planned repeats" in n for n in report["notes"])
    assert "| DFLASH | 1 | 0 | 175 | 150, 210 (compiling), 200 |" in md.markdown_report(report)


def test_a_waves_cell_whose_every_repeat_compiled_has_no_tok_per_s(tmp_path: Path) -> None:
    plan, cells, engines = repeats_run(tmp_path)
    for repeat in (1, 2, 3):
        cells["dflash/bs1/t0", repeat]["host"] = COMPILING
    report = analysis.analyse(plan, cells, engines, references=references())
    row = {r["name"]: r for r in report["cells"]}["dflash/bs1/t0"]
    assert row["status"] == "compiling" and row["tok_per_s"] is None and row["compiling_repeats"] == 3
    assert "dflash/bs1/t0: no tok/s: every repeat's engine was compiling during the timed decode" in report["notes"]
    bs1 = next(c for c in report["fastest_modes"] if (c["temperature"], c["batch_size"]) == (0.0, 1))
    assert bs1["dflash"]["group"] == "dflash-no-overlap"  # the only DFLASH mode with a tok/s there


def test_reanalysis_applies_the_rule_to_old_records(tmp_path: Path) -> None:
    """A run analysed before the rule: its records carry the host, so --reanalyse finds the compile."""
    plan = steady_plan(tmp_path, repeats=2, chain_control=False)
    cells, engines = synthetic(plan, **{"dflash/c1/t0#1": {"host": COMPILING, "tok_per_s": 1.0}})
    run = tmp_path / "run"
    old = analysis.analyse(plan, {k: v | {"host": None} for k, v in cells.items()}, engines)  # as if no rule
    write_report(old, run)
    with (run / "records.jsonl").open("w") as f:
        for record in [*cells.values(), *engines.values()]:
            f.write(json.dumps(record) + "\n")
    assert rows_by_name(old)["dflash/c1/t0"]["tok_per_s"] == pytest.approx((1.0 + 260.0) / 2)
    again = reanalyse(run).data["report"]
    row = rows_by_name(again)["dflash/c1/t0"]
    assert row["tok_per_s"] == 260.0 and row["compiling_engines"] == 1
    assert rows_by_name(again)["ddtree-b32/c1/t0"]["vs_dflash"]["ratio"] == pytest.approx(270 / 260)
    assert any(n.startswith("dflash/c1/t0 (repeat 1): the engine was compiling") for n in again["notes"])
    assert "| DFLASH | 1 | 0 | 260 | 1 (compiling), 260 |" in (run / "bench.md").read_text()
