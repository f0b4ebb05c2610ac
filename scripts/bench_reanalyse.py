"""Re-analyse a finished bench run from its raw records, without a GPU.

    python scripts/bench_reanalyse.py RUN_DIR [--reference-dir DIR]

RUN_DIR is a `ddtree-overlay bench --out` folder (bench.json, records.jsonl, ...): its plan is
rebuilt from bench.json's setting and config, and bench.json, bench.md and the plots are
rewritten with this checkout's analysis (e.g. after a fix to the correctness judge). The config,
`repeats` included (1 for runs made before `--repeats`), and the context (commit, GPU, start
time) stay the run's own; a note records the re-analysis.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_overlay.bench import plan as bench_plan  # noqa: E402
from ddtree_overlay.bench import report as bench_report  # noqa: E402
from ddtree_overlay.commands.bench import _git_commit, _result, load_references  # noqa: E402


def reanalyse(run: Path, reference_dir: Path | None) -> dict:
    old = json.loads((run / "bench.json").read_text())
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in old["config"].items()}
    setting = bench_plan.make_setting(old["setting"]["name"], scratch=run / "models", write=False)
    plan = bench_plan.plan_sweep(setting, bench_plan.BenchConfig(**config))
    cells, engines = bench_report.read_records(run / "records.jsonl")
    references = load_references(plan, reference_dir) if reference_dir else None
    report = bench_report.analyse(plan, cells, engines, references=references, context=old["context"])
    report["notes"] = [*report["notes"], f"re-analysed from records.jsonl at commit {_git_commit() or 'unknown'}"]
    _result(report, run)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--reference-dir", type=Path)
    args = parser.parse_args()
    report = reanalyse(args.run, args.reference_dir)
    print(bench_report.markdown_report(report))
    return 1 if report["issues"] else 0


if __name__ == "__main__":
    sys.exit(main())
