"""The README's commands do what the README shows.

The everyday loop runs, command by command as written, on a real sglang 0.5.14 installed by pip
(`--no-deps`), and each output line the README shows must be one the tool prints. Counts
(files, lines, hunk positions) are compared as "some number" so that a payload change does not
fail this test; env-specific values (paths under the env, the RECORD size, torch) are compared by
their label only. The launch command may name only flags sglang 0.5.14's `ServerArgs` has once
the patch set is applied.
"""

from __future__ import annotations

import re
from pathlib import Path

from overlay_helpers import REPO_ROOT, run_cli, site_packages

from ddtree_overlay.engine.errors import ExitCode

README = REPO_ROOT / "README.md"
README_ENV = "/srv/venv"
# Lines whose value depends on the env the README's outputs came from: compared by label.
ENV_SPECIFIC = ("env:", "sglang:", "RECORD:", "torch:", "sgl_kernel:", "driver CUDA:", "GPU:", "imports:")


def _blocks() -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", README.read_text(), re.S | re.M)


def _shown_runs() -> list[tuple[list[str], list[str]]]:
    """(command words, output lines) of every README block that starts with `$ ddtree-overlay`."""
    runs = []
    for block in _blocks():
        lines = block.rstrip("\n").splitlines()
        if lines and lines[0].startswith("$ ddtree-overlay "):
            runs.append((lines[0].split()[2:], lines[1:]))
    return runs


def _shape(line: str) -> str:
    return re.sub(r"\d+", "#", line.rstrip())


def _missing_lines(shown: list[str], printed: str, env: Path) -> list[str]:
    printed_shapes = {_shape(line) for line in printed.replace(str(env), README_ENV).splitlines()}
    printed_labels = {line.split(":")[0] + ":" for line in printed.splitlines() if ":" in line}
    missing = []
    for line in shown:
        if line.strip() == "…":
            continue
        if line.startswith(ENV_SPECIFIC):
            if line.split(":")[0] + ":" not in printed_labels:
                missing.append(line)
        elif _shape(line) not in printed_shapes:
            missing.append(line)
    return missing


def test_the_everyday_loop_runs_as_the_readme_shows(sglang_env: Path) -> None:
    runs = _shown_runs()
    assert [words[0] for words, _ in runs] == ["status", "apply", "verify", "diff", "rollback"]
    for words, shown in runs:
        args = [str(sglang_env) if word == README_ENV else word for word in words]
        done = run_cli(*args)
        if words[0] == "verify":
            # This env is a --no-deps install without torch: verify blames sglang's missing
            # dependencies, not the overlay (the README's env had CPU torch: 15/15, exit 0).
            assert done.returncode == ExitCode.SGLANG_DEPENDENCIES_MISSING, (done.stdout, done.stderr)
            assert "own dependencies are missing" in done.stderr
            continue
        assert done.returncode == ExitCode.OK, (words, done.stdout, done.stderr)
        assert not _missing_lines(shown, done.stdout, sglang_env), (words, done.stdout)
    status = run_cli("status", "--env", str(sglang_env))
    assert "overlay:      pristine" in status.stdout and ", 0 modified, 0 missing" in status.stdout


def test_the_launch_command_names_only_flags_the_patched_server_args_has(sglang_env: Path) -> None:
    launch = next(block for block in _blocks() if "sglang.launch_server" in block)
    flags = re.findall(r"--([a-z][a-z0-9-]*)", launch)
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    server_args = (site_packages(sglang_env) / "sglang" / "srt" / "server_args.py").read_text()
    fields = set(re.findall(r"^    ([a-z_][a-z0-9_]*)\s*:", server_args, re.M))
    unknown = [flag for flag in flags if flag.replace("-", "_") not in fields]
    assert flags and not unknown, unknown
    budget_flags = set(re.findall(r"`--(speculative-ddtree-[a-z-]+)", README.read_text()))
    assert budget_flags == {f.replace("_", "-") for f in fields if f.startswith("speculative_ddtree_")}
