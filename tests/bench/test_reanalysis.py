from __future__ import annotations

import json
import shutil
from pathlib import Path

from ddtree_overlay.bench.reanalysis import reanalysed_report

RUN = Path(__file__).resolve().parents[2] / "docs/bench/2026-11-29-stage-graphs-tp2-allgather/bench-fixture-bs1"


def test_without_references_the_runs_own_parity_and_its_issues_stay(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    old = json.loads((run / "bench.json").read_text())
    old["parity"][0] |= {"status": "off", "ratio": 0.5, "sglang_tokens_per_round": 3.0, "reference_tokens_per_round": 6.0}
    (run / "bench.json").write_text(json.dumps(old))
    report = reanalysed_report(run)
    assert report["parity"] == old["parity"]
    group = old["parity"][0]["group"]
    assert f"{group}: tokens per round 3.000 against the offline reference's 6.000 (x0.500, tolerance +-10%)" in report["issues"]
    assert "acceptance parity as the run itself judged it (no --reference-dir)" in report["notes"]
    assert [r["status"] for r in report["cells"]] == [r["status"] for r in old["cells"]]
