"""engine.target: in-target scripts run by the env's python, one result line each."""

from __future__ import annotations

import sys
from pathlib import Path

from ddtree_overlay.engine.target import (
    IN_TARGET,
    RESULT_MARK,
    read_result,
    run_script,
    runner_events,
)

PYTHON = Path(sys.executable)


def test_every_in_target_script_but_the_runner_prints_the_one_result_mark() -> None:
    # the runner streams its events; grammar_check and logprob_check are part of matrix_checks,
    # which loads them by path
    libraries = {"__init__", "engine_runner", "grammar_check", "logprob_check"}
    scripts = sorted(p.stem for p in IN_TARGET.glob("*.py") if p.stem not in libraries)
    assert scripts == [
        "byte_compile", "chat_template", "env_probe", "fa3_probe", "gpu_probe", "import_check", "matrix_checks"
    ]
    for name in scripts:
        assert RESULT_MARK.strip() in (IN_TARGET / f"{name}.py").read_text(), name


def test_in_target_scripts_import_nothing_of_the_tool() -> None:
    for script in IN_TARGET.glob("*.py"):
        imports = [line for line in script.read_text().splitlines() if line.lstrip().startswith(("import ", "from "))]
        assert not [line for line in imports if "ddtree_overlay" in line], script.name


def test_the_result_is_the_last_mark_line_whatever_else_is_printed() -> None:
    stdout = f"warning from an import\n{RESULT_MARK}{{\"a\": 1}}\nnoise\n{RESULT_MARK}[2]\ntrailer\n"
    assert read_result(stdout) == (True, [2])
    assert read_result("no result here\n") == (False, None)


def test_a_script_that_runs_gives_its_result() -> None:
    done = run_script(PYTHON, "import_check", ["json", "no_such_module_here"], timeout=120, isolated=False)
    assert done.problem is None
    assert done.result["modules"]["json"] is None
    assert done.result["modules"]["no_such_module_here"].startswith("ModuleNotFoundError")


def test_a_script_that_fails_says_why_with_its_last_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.py"
    done = run_script(PYTHON, "byte_compile", [missing], timeout=120)
    assert done.result is None
    assert done.problem is not None and done.problem.startswith("exited with 1: FileNotFoundError")
    assert str(missing) in done.tail()[-1]


def test_an_interpreter_that_does_not_exist_cannot_run(tmp_path: Path) -> None:
    done = run_script(tmp_path / "bin" / "python", "gpu_probe", timeout=10)
    assert done.result is None and done.problem is not None and done.problem.startswith("cannot run")


def test_runner_events_keep_the_tagged_lines_only() -> None:
    lines = ['ARM {"arm": "plain", "ok": true}\n', "[2026-11-30] sglang log line\n", 'CELL {"name": "c"}\n']
    assert list(runner_events(lines)) == [("ARM", {"arm": "plain", "ok": True}), ("CELL", {"name": "c"})]
