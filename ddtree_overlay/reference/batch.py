"""Offline reference results for `ddtree-overlay bench --reference-dir DIR` on a fixture pair
(`--pair dense` for `bench fixture`, `--pair hybrid` for `bench hybrid`): DFlash and DDTree at
each budget (and with `--eagle3` the dense target's EAGLE-3 chain, for `--eagle3-draft`), T = 0,
fp32 on the CPU, the sweep's prompts (the first N held-out prompts of the pair) and length.
Made beforehand, they spare the GPU host's cores during a sweep.

    python -m ddtree_overlay.reference.batch DIR [--pair hybrid] [--budgets 4,8,...] [--prompts 32] [--max-new-tokens 256] [--eagle3]

A sweep of fewer prompts uses the first ones (the fixture sweep's cells decode 16 by default;
--prompts-per-cell 32 at bs 16 decodes two waves). One process per result, as many at once as
there are cores, each on one thread; each writes DIR/<key>.json and DIR/<key>.log.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ddtree_overlay.fixture_paths import EAGLE3_DRAFT, PAIRS


def jobs(pair: Path, budgets: list[int], *, eagle3: bool) -> dict[str, list[str]]:
    """The reference CLI's drafter and algorithm arguments per result key, as the bench names
    them. EAGLE-3 drafts the CLI's default chain, the one the bench's EAGLE3 arm serves."""
    draft = ["--draft", str(pair / "draft")]
    todo = {"dflash": [*draft, "--algo", "dflash"]}
    todo |= {f"ddtree-b{b}": [*draft, "--algo", "ddtree", "--budget", str(b)] for b in budgets}
    return todo | ({"eagle3": ["--draft", str(EAGLE3_DRAFT), "--algo", "eagle3"]} if eagle3 else {})


def run(key: str, algo: list[str], out: Path, pair: Path, prompts: int, max_new_tokens: int) -> bool:
    command = [
        sys.executable, "-m", "ddtree_overlay.reference",
        "--target", str(pair / "target"),
        "--prompts", str(pair / "heldout_prompts.json"), "--limit", str(prompts),
        "--max-new-tokens", str(max_new_tokens), "--temperature", "0", "--device", "cpu",
        "--dtype", "float32", "--no-baseline", *algo, "--json", str(out / f"{key}.json"),
    ]
    with (out / f"{key}.log").open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False,
                              env=os.environ | {"OMP_NUM_THREADS": "1"})
    print(f"done {key}" if done.returncode == 0 else f"FAILED {key} (see {out / f'{key}.log'})", flush=True)
    return done.returncode == 0


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def budget_list(text: str) -> list[int]:
    """An argparse type: comma-separated budgets, each at least 1."""
    budgets = [positive(b) for b in text.split(",") if b.strip()]
    if not budgets:
        raise argparse.ArgumentTypeError("expected at least one budget")
    return budgets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pair", choices=sorted(PAIRS), default="dense", help="which fixture pair")
    parser.add_argument(
        "--budgets", type=budget_list, default="4,8,16,32,64,128,256", help="DDTREE budgets, comma-separated"
    )
    parser.add_argument("--prompts", type=positive, default=32, help="the first N held-out fixture prompts")
    parser.add_argument("--max-new-tokens", type=positive, default=256)
    parser.add_argument(
        "--eagle3", action="store_true", help="also the EAGLE-3 chain with the dense target's EAGLE-3 drafter"
    )
    args = parser.parse_args()
    if args.eagle3 and args.pair != "dense":
        parser.error("--eagle3: only the dense pair has an EAGLE-3 drafter")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"{args.out} exists and is not a directory")
    args.out.mkdir(parents=True, exist_ok=True)
    todo = jobs(PAIRS[args.pair], args.budgets, eagle3=args.eagle3)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = pool.map(
            lambda item: run(*item, args.out, PAIRS[args.pair], args.prompts, args.max_new_tokens), todo.items()
        )
        return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
