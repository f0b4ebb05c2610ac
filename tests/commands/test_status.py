"""status and --git-checkout on a real install; the JSON envelope contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from overlay_helpers import run_cli, site_packages

from ddtree_overlay.commands.status import status
from ddtree_overlay.engine.envprobe import probe_env
from ddtree_overlay.engine.gitdiverge import compare_trees


def test_status_reports_the_install_and_the_matching_patch_set(sglang_env: Path) -> None:
    done = run_cli("status", "--env", str(sglang_env / "bin" / "python"), "--json")
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    assert sorted(envelope) == ["command", "data", "ddtree_overlay_result_version", "exit_code", "issues", "status"]
    assert envelope["ddtree_overlay_result_version"] == "1"
    data = envelope["data"]
    assert data["sglang"]["version"] == "0.5.14"
    assert data["sglang"]["location"] == str(site_packages(sglang_env) / "sglang")
    assert data["sglang"]["record"]["modified"] == []
    assert data["patch_set"]["id"] == "sglang-0.5.14-ddtree"
    assert data["overlay"]["state"] == "pristine"
    assert data["runtime"]["torch"] is None


def test_status_follows_the_overlay_state(sglang_env: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    assert status(probe_env(sglang_env)).data["overlay"]["state"] == "applied"
    new_module = site_packages(sglang_env) / "sglang/srt/speculative/ddtree_utils.py"
    new_module.write_text("edited\n")
    assert status(probe_env(sglang_env)).data["overlay"]["state"] == "drifted"


def test_error_envelope_carries_the_exit_code_and_issue(tmp_path: Path, state_dir: Path) -> None:
    done = run_cli("status", "--env", str(tmp_path / "missing"), "--json")
    envelope = json.loads(done.stdout)
    assert (envelope["status"], envelope["exit_code"], done.returncode) == ("error", 3, 3)
    assert envelope["issues"][0]["code"] == "env_not_found"


def test_git_checkout_divergence_lists_the_three_kinds(sglang_env: Path, tmp_path: Path) -> None:
    installed = site_packages(sglang_env) / "sglang"
    checkout = tmp_path / "checkout"
    shutil.copytree(installed, checkout / "python" / "sglang")
    package = checkout / "python" / "sglang"
    for dflash in (package / "srt" / "speculative").glob("dflash_*.py"):
        dflash.unlink()
    (package / "srt" / "new_in_checkout.py").write_text("x = 1\n")
    (package / "version.py").write_text("__version__ = 'dev'\n")
    report = compare_trees(installed, checkout)
    assert "srt/speculative/dflash_worker_v2.py" in report["only_installed"]
    assert report["only_in_checkout"] == ["srt/new_in_checkout.py"]
    assert report["differing"] == ["version.py"]
    done = run_cli("status", "--env", str(sglang_env), "--git-checkout", str(checkout))
    assert "only installed: 4" in done.stdout and "srt/speculative/dflash_info.py" in done.stdout
