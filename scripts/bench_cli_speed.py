"""How long the everyday commands take: `--help`, `status`, `apply`, `rollback`, wall and CPU.

    python scripts/bench_cli_speed.py [--env ENV] [--runs 7] [--json]

Without --env it builds the env a user has, once, under ~/.cache/ddtree-overlay/bench-cli: a venv
holding stock sglang 0.5.14 installed by pip (`--no-deps`, byte-compiled, so its RECORD lists
the .pyc files too). Each command runs --runs times in a fresh process with a scratch state dir;
the table gives the best and median wall time, the CPU time (user + sys, the command and its
children) of the best run, and the target. `status` runs with the RECORD hash cache warm (the
everyday case) and with `--rehash` (every file hashed again); `apply` and `rollback` alternate,
so each `apply` starts from a pristine env and each `rollback` from an applied one.
The load average is printed with the table: on a busy machine the wall times are the CPU times
plus waiting, so compare CPU times across machines and best wall times against the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SGLANG = "0.5.14"
TARGETS_S = {"--help": 0.3, "status": 1.0, "status --rehash": None, "apply": 2.0, "rollback": None}


def user_env() -> Path:
    """A venv with stock sglang, as `pip install` leaves it (byte-compiled), built once."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    env = Path.home() / ".cache" / "ddtree-overlay" / "bench-cli" / f"sglang-{SGLANG}-{tag}"
    if not (env / ".complete").exists():
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "--python",
             str(env / "bin" / "python"), "install", "--no-deps", f"sglang=={SGLANG}"],
            check=True,
        )
        (env / ".complete").touch()
    return env


def tool() -> list[str]:
    script = Path(sys.executable).with_name("ddtree-overlay")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ddtree_overlay"]


def timed(args: list[str], environ: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run; a failing run stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*tool(), *args], capture_output=True, text=True, env=environ, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"`ddtree-overlay {' '.join(args)}` exited {done.returncode}:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(env: Path, runs: int) -> dict[str, list[tuple[float, float]]]:
    state = Path(tempfile.mkdtemp(prefix="ddtree-bench-cli-"))
    environ = os.environ | {"DDTREE_OVERLAY_STATE_DIR": str(state), "NO_COLOR": "1"}
    on_env = ["--env", str(env)]
    try:
        timed(["status", *on_env], environ)  # fills the RECORD hash cache
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in TARGETS_S}
        for _ in range(runs):
            samples["--help"].append(timed(["--help"], environ))
            samples["status"].append(timed(["status", *on_env], environ))
            samples["status --rehash"].append(timed(["status", "--rehash", *on_env], environ))
            samples["apply"].append(timed(["apply", *on_env], environ))
            samples["rollback"].append(timed(["rollback", *on_env], environ))
        return samples
    finally:
        shutil.rmtree(state, ignore_errors=True)


def table(samples: dict[str, list[tuple[float, float]]]) -> list[dict[str, object]]:
    rows = []
    for name, runs in samples.items():
        best = min(runs)
        target = TARGETS_S[name]
        rows.append({
            "command": name,
            "best_wall_s": round(best[0], 3),
            "median_wall_s": round(statistics.median(w for w, _ in runs), 3),
            "cpu_s": round(best[1], 3),
            "target_s": target,
            "meets_target": None if target is None else best[0] < target,
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", type=Path, help="an env with sglang (default: a stock 0.5.14 one)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    env = args.env or user_env()
    load_before = os.getloadavg()
    rows = table(measure(env, args.runs))
    load = {"cores": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()}
    if args.json:
        print(json.dumps({"env": str(env), "runs": args.runs, "host": load, "rows": rows}, indent=2))
    else:
        print(f"env {env}, {args.runs} runs each; {load['cores']} cores, load average "
              f"{load_before[0]:.1f} before, {load['load_after'][0]:.1f} after")
        print(f"{'command':<16} {'best wall':>10} {'median':>8} {'CPU':>7} {'target':>7}")
        for row in rows:
            target = "-" if row["target_s"] is None else f"< {row['target_s']:g}"
            mark = {True: "ok", False: "MISSED", None: ""}[row["meets_target"]]
            print(f"{row['command']:<16} {row['best_wall_s']:>9.3f}s {row['median_wall_s']:>7.3f}s "
                  f"{row['cpu_s']:>6.3f}s {target:>7} {mark}")
    return 0 if all(row["meets_target"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
