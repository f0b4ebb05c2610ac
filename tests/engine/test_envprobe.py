"""The target interpreter is the truth: probing a real install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from overlay_helpers import site_packages

from ddtree_overlay.engine.elfdeps import needed_libraries
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.errors import EnvNotFound


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
