"""The exit-code table is one table: distinct codes, 2 for usage errors, shown in --help."""

from __future__ import annotations

from overlay_helpers import run_cli

from ddtree_overlay.engine import errors
from ddtree_overlay.engine.errors import EXIT_CODE_MEANINGS, ExitCode, OverlayError


def test_each_failure_class_has_its_own_code() -> None:
    """Usage errors exit 2, whether Typer finds them or the tool does once the env and models are
    known (BadArguments, the one failure class on Typer's code)."""
    classes = [cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, OverlayError)]
    assert [cls.__name__ for cls in classes if cls.exit_code == ExitCode.USAGE] == ["BadArguments"]
    assert set(EXIT_CODE_MEANINGS) == set(ExitCode)


def test_help_lists_the_table_and_usage_errors_exit_2() -> None:
    assert "10  an interrupted transaction" in run_cli("--help").stdout
    assert run_cli("apply", "--no-such-option").returncode == ExitCode.USAGE
