"""The GPU acceptance presets, kept under their old command line: a thin wrapper over
`ddtree-overlay verify --smoke --preset` for the env whose interpreter runs this script.

    python3 scripts/gpu/payload_check.py --preset lossless[,kernels...] [--only ARM,...] --out DIR
        [--n-prompts 32] [--max-new-tokens 256] [--pair dense|hybrid] [--target DIR --draft DIR]
        [--reference-dir DIR]

Run on the H200 in the interpreter that has the patched sglang on its path, after `apply`
(the presets, their arms and the judge are `ddtree_overlay.bench.checks`). DIR receives
arms.jsonl and summary.json after every arm; the exit code is verify's (11: an arm failed or
left target-only's greedy output).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ddtree_overlay.cli import app  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="dense", help="bundled fixture pair: dense or hybrid")
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--n-prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--preset", default="first", help="comma-separated preset names")
    ap.add_argument("--only", default="", help="comma-separated arm names")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reference-dir", help="offline reference JSONs for the same prompts")
    args = ap.parse_args()
    argv = [
        "verify", "--env", sys.executable, "--smoke", "--preset", args.preset, "--only", args.only,
        "--out", args.out, "--prompts", str(args.n_prompts), "--max-new-tokens", str(args.max_new_tokens),
        "--pair", args.pair,
    ]
    for flag, value in (("--target", args.target), ("--draft", args.draft), ("--reference-dir", args.reference_dir)):
        if value:
            argv += [flag, value]
    app(argv, prog_name="ddtree-overlay")


if __name__ == "__main__":
    main()
