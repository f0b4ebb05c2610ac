"""The exit-code table is one table: distinct codes, 2 left to Typer, shown in --help."""

from __future__ import annotations

from overlay_helpers import run_cli

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.errors import EXIT_CODE_MEANINGS, ExitCode, OverlayError


def test_each_failure_class_has_its_own_code() -> None:
    classes = {cls.exit_code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, OverlayError)}
    assert ExitCode.USAGE not in classes
    assert set(EXIT_CODE_MEANINGS) == set(ExitCode)


def test_help_lists_the_table_and_usage_errors_exit_2() -> None:
    assert "10  an interrupted transaction" in run_cli("--help").stdout
    assert run_cli("apply", "--no-such-option").returncode == ExitCode.USAGE
