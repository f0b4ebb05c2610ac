"""The target interpreter is the truth: probing a real install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from overlay_helpers import run_cli, site_packages

from ddtree_overlay.engine.elfdeps import needed_libraries
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import EnvNotFound, ExitCode


def test_probe_reads_version_location_kind_and_record(sglang_env: Path) -> None:
    info = probe_env(sglang_env)
    assert info.sglang is not None
    assert (info.sglang.version, info.sglang.install_kind) == ("0.5.14", "archive")
    assert info.sglang.location == site_packages(sglang_env) / "sglang"
    assert info.sglang.record.files > 3000 and info.sglang.record.modified == ()
    assert info.torch is None and info.sgl_kernel is None


def test_probe_reports_vcs_commit_and_record_drift(sglang_env: Path) -> None:
    dist_info = site_packages(sglang_env) / "sglang-0.5.14.dist-info"
    direct_url = {"url": "https://github.com/sgl-project/sglang", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}
    (dist_info / "direct_url.json").write_text(json.dumps(direct_url))
    (site_packages(sglang_env) / "sglang" / "version.py").write_text("edited\n")
    info = probe_env(sglang_env)
    assert (info.sglang.install_kind, info.sglang.commit) == ("vcs", "abc123")
    assert info.sglang.record.modified == (
        "sglang-0.5.14.dist-info/direct_url.json",
        "sglang/version.py",
    )


def test_a_directory_without_python_is_not_an_env(tmp_path: Path) -> None:
    with pytest.raises(EnvNotFound, match="no python interpreter"):
        probe_env(tmp_path)


def test_elf_needed_entries_match_readelf() -> None:
    import _ssl

    assert "libc.so.6" in needed_libraries(Path(_ssl.__file__))
    assert needed_libraries(Path(__file__)) == ()


def _fake_interpreter(root: Path, prints: str, exit_code: int = 0) -> Path:
    """An "env" whose python answers the probe with ``prints``, whatever it is asked."""
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\ncat <<'ANSWER'\n{prints}\nANSWER\nexit {exit_code}\n")
    python.chmod(0o755)
    return root


_GOOD_PYTHON = {"version": "3.11.7", "prefix": "/srv/venv", "is_venv": True, "externally_managed": False}
NONSENSE = {
    "not-json": "@@DDTREE-OVERLAY-RESULT@@ {python: 3.11",
    "a-list": "@@DDTREE-OVERLAY-RESULT@@ [1, 2, 3]",
    "python-a-number": '@@DDTREE-OVERLAY-RESULT@@ {"python": 3}',
    "no-sglang-key": "@@DDTREE-OVERLAY-RESULT@@ " + json.dumps({"python": _GOOD_PYTHON}),
    "version-a-number": "@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(
        {"python": _GOOD_PYTHON, "torch": None, "sgl_kernel": None,
         "sglang": {"version": 14, "installed_copies": 1, "site_packages": "/srv", "dist_info": "/srv/x",
                    "origin": None, "location": None, "direct_url": None, "editable_pth": [],
                    "record": {"present": False}}}
    ),
    "relative-site-packages": "@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(
        {"python": _GOOD_PYTHON, "torch": None, "sgl_kernel": None,
         "sglang": {"version": "0.5.14", "installed_copies": 1, "site_packages": "../../etc", "dist_info": "/srv/x",
                    "origin": None, "location": None, "direct_url": "file:///x", "editable_pth": [],
                    "record": {"present": False}}}
    ),
}


@pytest.mark.parametrize("answer", list(NONSENSE))
def test_a_nonsense_answer_to_the_probe_is_one_error_and_exit_7(tmp_path: Path, state_dir: Path, answer: str) -> None:
    env = _fake_interpreter(tmp_path / "env", NONSENSE[answer])
    for verb in ("status", "apply", "rollback"):
        done = run_cli(verb, "--env", str(env))
        assert done.returncode == ExitCode.BAD_PATCH_SET, (verb, done.stderr)
        assert done.stderr.startswith("error: ") and "answered the env probe" in done.stderr.splitlines()[0]
        assert "Traceback" not in done.stderr
    assert not state_dir.exists()


def test_an_interpreter_that_fails_is_not_an_env(tmp_path: Path, state_dir: Path) -> None:
    env = _fake_interpreter(tmp_path / "env", "Segmentation fault", exit_code=139)
    done = run_cli("apply", "--env", str(env))
    assert done.returncode == ExitCode.ENV_NOT_FOUND and "failed to describe itself" in done.stderr
