"""in_target/fa3_probe.py, run by path against a stand-in sgl_kernel (with FA3 or without) and a
stand-in sglang whose ServerArgs picks the default attention backend by the GPU's capability."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_fa3_env

from ddtree_overlay.engine.target import run_script
from ddtree_overlay.in_target import fa3_probe

ENGINES = {"dflash": {"kwargs": {"speculative_algorithm": "DFLASH"}, "env": {}}}


def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engines: dict[str, Any], **env: str) -> dict[str, Any]:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    done = run_script(Path(sys.executable), "fa3_probe", [json.dumps(engines)], timeout=60, isolated=False)
    assert done.problem is None, done.stderr
    return done.result


def test_where_flash_ops_is_there_nothing_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_fa3_env(tmp_path / "site", flash_ops=True)
    # sgl_kernel's own import raises here: it is looked for, never imported
    assert probe(tmp_path, monkeypatch, ENGINES) == {"flash_ops": True, "backends": {}, "errors": {}}


@pytest.mark.parametrize(("capability", "backend"), [("9.0", "fa3"), ("8.0", "flashinfer"), ("10.0", "flashinfer")])
def test_without_flash_ops_each_engines_default_is_resolved_as_sglang_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capability: str, backend: str
) -> None:
    install_fake_fa3_env(tmp_path / "site", flash_ops=False)
    result = probe(tmp_path, monkeypatch, ENGINES, FAKE_CAPABILITY=capability)
    assert result == {"flash_ops": False, "backends": {"dflash": backend}, "errors": {}}


def test_an_engines_environment_is_set_while_its_default_is_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_fa3_env(tmp_path / "site", flash_ops=False)
    engines = {"hopper": {"kwargs": {}, "env": {"FAKE_CAPABILITY": "9.0"}}, "other": {"kwargs": {}, "env": {}}}
    result = probe(tmp_path, monkeypatch, engines, FAKE_CAPABILITY="8.0")
    assert result["backends"] == {"hopper": "fa3", "other": "flashinfer"}  # and unset again after it


def test_a_default_that_cannot_be_resolved_is_named_with_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_fa3_env(tmp_path / "site", flash_ops=False)
    result = probe(tmp_path, monkeypatch, ENGINES, FAKE_SERVER_ARGS_ERROR="no config.json in /t")
    assert result == {"flash_ops": False, "backends": {}, "errors": {"dflash": "ValueError: no config.json in /t"}}


def test_an_env_without_sgl_kernel_cannot_tell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_fa3_env(tmp_path / "site", flash_ops=False, sgl_kernel=False)
    assert probe(tmp_path, monkeypatch, ENGINES) == {"flash_ops": None, "backends": {}, "errors": {}}


def test_flash_ops_is_found_without_importing_sgl_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for flash_ops in (True, False):
        root = install_fake_fa3_env(tmp_path / str(flash_ops), flash_ops=flash_ops)
        with monkeypatch.context() as patch:
            patch.syspath_prepend(str(root))
            assert fa3_probe.has_flash_ops() is flash_ops
        assert "sgl_kernel" not in sys.modules
    monkeypatch.setattr(fa3_probe.importlib.util, "find_spec", lambda name: None)  # no sgl_kernel anywhere
    assert fa3_probe.has_flash_ops() is None
