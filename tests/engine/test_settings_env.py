"""Every environment variable the engine reads: a malformed value is one error line, exit 7,
before anything is written (never a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from overlay_helpers import run_cli, snapshot

from ddtree_overlay.engine import settings
from ddtree_overlay.engine.errors import BadSetting, ExitCode
from ddtree_overlay.engine.settings import FAULT_AT_ENV, LOCK_TIMEOUT_ENV, STATE_DIR_ENV

MALFORMED = [
    (STATE_DIR_ENV, "relative/state", settings.state_dir_override),
    (LOCK_TIMEOUT_ENV, "ten", settings.lock_timeout_s),
    (LOCK_TIMEOUT_ENV, "-1", settings.lock_timeout_s),
    (LOCK_TIMEOUT_ENV, "nan", settings.lock_timeout_s),
    (LOCK_TIMEOUT_ENV, "inf", settings.lock_timeout_s),
    (FAULT_AT_ENV, "file-replaced", settings.fault_spec),
    (FAULT_AT_ENV, "file-replaced:0", settings.fault_spec),
    (FAULT_AT_ENV, "file-replaced:1:BOOM", settings.fault_spec),
]


@pytest.mark.parametrize(("name", "value", "read"), MALFORMED, ids=[f"{n}={v}" for n, v, _ in MALFORMED])
def test_a_malformed_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str, read) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(BadSetting, match=name) as raised:
        read()
    assert raised.value.exit_code == ExitCode.BAD_PATCH_SET


def test_empty_values_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (STATE_DIR_ENV, LOCK_TIMEOUT_ENV, FAULT_AT_ENV):
        monkeypatch.setenv(name, "")
    assert (settings.state_dir_override(), settings.lock_timeout_s(), settings.fault_spec()) == (
        None, settings.DEFAULT_LOCK_TIMEOUT_S, None,
    )


@pytest.mark.parametrize(("name", "value"), [(STATE_DIR_ENV, "state"), (LOCK_TIMEOUT_ENV, "soon"), (FAULT_AT_ENV, "x:y")])
def test_the_cli_stops_on_a_malformed_value_before_writing(sglang_env: Path, state_dir: Path, name: str, value: str) -> None:
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), env_vars={name: value})
    assert done.returncode == ExitCode.BAD_PATCH_SET, done.stderr
    assert done.stderr.startswith(f"error: {name}=") and "Traceback" not in done.stderr
    assert snapshot(sglang_env) == before
    assert not list(state_dir.glob("envs/*/*.json"))


def test_a_state_dir_that_is_a_file_is_refused_up_front(sglang_env: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), env_vars={STATE_DIR_ENV: str(tmp_path / "a-file")})
    assert done.returncode == ExitCode.READ_ONLY and "cannot use the state dir" in done.stderr, done.stderr
    assert snapshot(sglang_env) == before
