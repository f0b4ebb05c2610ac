"""Every device command the roadmap writes out parses against this checkout: each
`scripts/gpu/on_gpus.sh` job's bench plans in a dry run, its checks name presets and arms that
exist, its round traces parse their arms, and its other scripts take their flags. A device call
that fails on its command line costs ten minutes of a thirty-minute budget."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_overlay.bench.check_presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
ROADMAP = ROOT / "docs" / "sglang-ddtree-roadmap.md"
COMMAND = re.compile(r"`((?:[A-Z_]+=\S+ )*bash scripts/gpu/on_gpus\.sh [^`]+)`", re.S)
# A job written after the command before it, on the same bundle: `… 'JOB'`.
LATER_JOB = re.compile(r"`…\s+('[^`]+')`", re.S)
ASSIGNMENT = re.compile(r"[A-Z_]+=\S*")
# Parses a script's command line with the script's own parser, prints it and stops there.
PARSE_ONLY = """
import argparse, json, runpy, sys
parse = argparse.ArgumentParser.parse_args
def parse_only(self, args=None, namespace=None):
    print(json.dumps(vars(parse(self, args, namespace)), default=str))
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_only
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def roadmap_steps() -> list[list[str]]:
    """Each job step of each on_gpus.sh command in the roadmap (and of each job it writes as
    `… 'JOB'` after one), as words, its leading environment assignments dropped and `$JOB_OUT`
    a scratch folder's name."""
    text = ROADMAP.read_text()
    jobs = []
    for command in COMMAND.findall(text):
        words = shlex.split(re.sub(r"\s*\n\s*", " ", command))
        jobs += words[words.index("scripts/gpu/on_gpus.sh") + 2 :]
    jobs += [shlex.split(re.sub(r"\s*\n\s*", " ", job))[0] for job in LATER_JOB.findall(text)]
    steps = []
    for job in jobs:
        for step in job.split(";"):
            step_words = shlex.split(step.replace("$JOB_OUT", "JOB_OUT"))
            while step_words and ASSIGNMENT.fullmatch(step_words[0]):
                step_words.pop(0)
            steps.append(step_words)
    return steps


STEPS = roadmap_steps()


def test_the_roadmap_writes_out_device_commands_of_every_kind() -> None:
    kinds = {step[0] if step[0] != "python3" else step[1] for step in STEPS}
    assert {"bench", "check", "compare", "scripts/gpu/round_trace.py", "scripts/gpu/payload_check.py"} <= kinds
    assert len(STEPS) >= 20


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.parametrize("step", STEPS, ids=[" ".join(step)[:90] for step in STEPS])
def test_each_roadmap_step_parses(step: list[str], tmp_path: Path) -> None:
    kind, args = step[0], step[1:]
    if kind == "bench":
        setting, rest = args[0], args[1:]
        (tmp_path / ".benchrefs").mkdir()  # made on a CPU before the call (the roadmap says how)
        (tmp_path / "ddtree_overlay").symlink_to(ROOT / "ddtree_overlay")  # repo-relative paths: the fixtures
        done = _run([sys.executable, "-m", "ddtree_overlay", "bench", "--env", sys.executable, "--setting", setting,
                     "--out", str(tmp_path / "bench"), *rest, "--dry-run"], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    elif kind == "check":
        presets, only = args[0].split(","), (args[1].split(",") if len(args) > 1 else [])
        assert set(presets) <= set(PRESETS), presets
        assert set(only) <= {arm.name for preset in presets for arm in PRESETS[preset]}, only
    elif kind == "compare":
        assert (ROOT / args[args.index("--baseline") + 1]).is_file()
    else:
        assert kind == "python3" and args[0].startswith("scripts/"), step
        script, flags = args[0], [word.replace("JOB_OUT", str(tmp_path)) for word in args[1:]]
        if script.endswith("round_trace.py"):
            done = _run([sys.executable, script, *flags, "--dry-run"], ROOT)
            assert done.returncode == 0, done.stdout + done.stderr
            return
        done = _run([sys.executable, "-c", PARSE_ONLY, script, *flags], ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        if script.endswith("payload_check.py"):
            parsed = json.loads(done.stdout.strip().splitlines()[-1])
            presets, only = parsed["preset"].split(","), [a for a in parsed["only"].split(",") if a]
            assert set(presets) <= set(PRESETS), presets
            assert set(only) <= {arm.name for preset in presets for arm in PRESETS[preset]}, only
