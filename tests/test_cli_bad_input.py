"""Every bad input: one clear error line, its own exit code, and nothing written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from overlay_helpers import (
    copy_repo_data,
    run_cli,
    run_cli_read_only,
    site_packages,
    snapshot,
)

from ddtree_overlay.engine.errors import ExitCode

SPEC_INFO = "sglang/srt/speculative/spec_info.py"


def assert_refused(done: subprocess.CompletedProcess[str], code: ExitCode, fragment: str) -> None:
    assert done.returncode == code, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: ") and fragment in first, done.stderr


def assert_untouched(env: Path, before: dict[str, bytes], state: Path) -> None:
    assert snapshot(env) == before
    assert not list(state.glob("envs/*/ledger.json")) and not list(state.glob("envs/*/journal.json"))


def test_unknown_env_path(tmp_path: Path, state_dir: Path) -> None:
    assert_refused(run_cli("apply", "--env", str(tmp_path / "nope")), ExitCode.ENV_NOT_FOUND, "env not found")


def test_env_without_sglang(tmp_path: Path, state_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    done = run_cli("apply", "--env", str(tmp_path / "bare"))
    assert_refused(done, ExitCode.ENV_NOT_FOUND, "sglang is not installed")


def test_unsupported_version_names_the_supported_ones(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    manifest.write_text(manifest.read_text().replace('versions = "==0.5.14"', 'versions = "==0.5.13"'))
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest))
    assert_refused(done, ExitCode.UNSUPPORTED_VERSION, "supported: ==0.5.13")
    assert_untouched(sglang_env, before, state_dir)


def test_editable_install_names_the_checkout(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    checkout = tmp_path / "sglang-checkout"
    (checkout / "python").mkdir(parents=True)
    site = site_packages(sglang_env)
    shutil.move(site / "sglang", checkout / "python" / "sglang")
    (site / "__editable__.sglang-0.5.14.pth").write_text(f"{checkout / 'python'}\n")
    direct_url = {"url": f"file://{checkout}", "dir_info": {"editable": True}}
    (site / "sglang-0.5.14.dist-info" / "direct_url.json").write_text(json.dumps(direct_url))
    done = run_cli("apply", "--env", str(sglang_env))
    assert_refused(done, ExitCode.EDITABLE_INSTALL, str(checkout))


def test_read_only_site_packages(sglang_env: Path, state_dir: Path) -> None:
    speculative = site_packages(sglang_env) / "sglang" / "srt" / "speculative"
    before = snapshot(sglang_env)
    done = run_cli_read_only(speculative, "apply", "--env", str(sglang_env))
    assert_refused(done, ExitCode.READ_ONLY, "read-only")
    assert_untouched(sglang_env, before, state_dir)


def test_malformed_manifest(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    manifest.write_text(manifest.read_text() + "\n[patchset\n")
    done = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest))
    assert_refused(done, ExitCode.BAD_PATCH_SET, "malformed manifest")


def test_malformed_patch(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    patch = next((tmp_path / "data" / "patches" / "0.5.14").glob("*.patch"))
    # claim two more new lines in the first hunk than its body has
    text = patch.read_text()
    header = re.search(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@", text)
    wrong = f"@@ -{header[1]},{header[2]} +{header[3]},{int(header[4]) + 2} @@"
    patch.write_text(text.replace(header[0], wrong, 1))
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest))
    assert_refused(done, ExitCode.BAD_PATCH_SET, "malformed patch")
    assert_untouched(sglang_env, before, state_dir)


@pytest.mark.parametrize("bad_path", ["../../etc/passwd", "/etc/passwd", "patches/../../x.patch"])
def test_patch_path_escaping_the_data_dir(sglang_env: Path, tmp_path: Path, state_dir: Path, bad_path: str) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    text = manifest.read_text()
    manifest.write_text(text.replace('path = "patches/0.5.14/', f'path = "{bad_path}" # ', 1))
    done = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest))
    assert_refused(done, ExitCode.BAD_PATCH_SET, "unsafe patch path")


def test_diff_target_escaping_site_packages(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    patch = next((tmp_path / "data" / "patches" / "0.5.14").glob("*.patch"))
    patch.write_text(patch.read_text().replace("a/sglang/", "a/../../sglang/").replace("b/sglang/", "b/../../sglang/"))
    done = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest))
    assert_refused(done, ExitCode.BAD_PATCH_SET, "unsafe")


def test_symlinked_target(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    target = site_packages(sglang_env) / SPEC_INFO
    real = tmp_path / "spec_info.py"
    shutil.move(target, real)
    target.symlink_to(real)
    done = run_cli("apply", "--env", str(sglang_env))
    assert_refused(done, ExitCode.CONFLICT, "through a symlink")
    assert target.is_symlink() and not list(state_dir.glob("envs/*/ledger.json"))


def test_second_concurrent_run_names_the_holder(sglang_env: Path, state_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(site_packages(sglang_env))],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = snapshot(sglang_env)
        done = run_cli("apply", "--env", str(sglang_env))
    finally:
        holder.kill()
        holder.wait()
    assert_refused(done, ExitCode.LOCKED, f"pid {holder.pid}")
    assert snapshot(sglang_env) == before


_HOLD_LOCK = """
import sys, time
from collections.abc import Callable
from pathlib import Path
from ddtree_overlay.engine import envlock, ledger
site = Path(sys.argv[1])
with envlock.env_lock(site, ledger.env_state(site).root, "test holder"):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_files_edited_after_apply(sglang_env: Path, state_dir: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    target = site_packages(sglang_env) / SPEC_INFO
    target.write_bytes(target.read_bytes() + b"# local edit\n")
    before = snapshot(sglang_env)
    assert_refused(run_cli("apply", "--env", str(sglang_env)), ExitCode.CONFLICT, "changed since")
    done = run_cli("rollback", "--env", str(sglang_env))
    assert_refused(done, ExitCode.CONFLICT, "changed since apply")
    assert "+# local edit" in done.stderr
    assert snapshot(sglang_env) == before


def test_patch_set_changed_after_it_was_applied(sglang_env: Path, tmp_path: Path, state_dir: Path) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    assert run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest)).returncode == 0
    overlay_file = tmp_path / "data" / "overlay" / "sglang" / "srt" / "speculative" / "ddtree_utils.py"
    overlay_file.write_text(overlay_file.read_text() + "\n# changed\n")
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), "--patch-set", str(manifest))
    assert_refused(done, ExitCode.CONFLICT, "changed since it was applied")
    assert snapshot(sglang_env) == before


def _symlinked_patches_dir(data: Path, elsewhere: Path) -> None:
    shutil.move(data / "patches", elsewhere / "patches")
    (data / "patches").symlink_to(elsewhere / "patches")


def _symlinked_overlay_dir(data: Path, elsewhere: Path) -> None:
    shutil.move(data / "overlay" / "sglang", elsewhere / "sglang")
    (data / "overlay" / "sglang").symlink_to(elsewhere / "sglang")


def _edit_manifest(old: str, new: str) -> Callable[[Path, Path], None]:
    def edit(data: Path, _elsewhere: Path) -> None:
        manifest = data / "manifests" / "0.5.14.toml"
        manifest.write_text(manifest.read_text().replace(old, new, 1))

    return edit


def _rewrite_first_patch(content: bytes) -> Callable[[Path, Path], None]:
    def rewrite(data: Path, _elsewhere: Path) -> None:
        next((data / "patches" / "0.5.14").glob("*.patch")).write_bytes(content)

    return rewrite


_BINARY_PATCH = (
    b"diff --git a/sglang/srt/speculative/spec_info.py b/sglang/srt/speculative/spec_info.py\n"
    b"index 1111111..2222222 100644\nGIT binary patch\nliteral 12\nTcmZ?wbaHfNVPs%r0000\n\n"
)
UNTRUSTED_PATCH_SETS = {
    "patches-dir-is-a-symlink": (_symlinked_patches_dir, "unsafe patch file path"),
    "overlay-dir-is-a-symlink": (_symlinked_overlay_dir, "unsafe overlay file path"),
    "unknown-key": (_edit_manifest('versions = "==0.5.14"', 'versions = "==0.5.14"\nfuzz = 3'), "unknown keys fuzz"),
    "wrong-type": (_edit_manifest('versions = "==0.5.14"', "versions = 514"), "`versions` must be"),
    "binary-patch": (_rewrite_first_patch(_BINARY_PATCH), "binary"),
    "garbled-patch": (_rewrite_first_patch(bytes(range(256)) * 8), "malformed patch"),
}


@pytest.mark.parametrize("case", list(UNTRUSTED_PATCH_SETS))
def test_an_untrusted_patch_set_is_refused_with_one_line(sglang_env: Path, tmp_path: Path, state_dir: Path, case: str) -> None:
    manifest = copy_repo_data(tmp_path / "data")
    (tmp_path / "elsewhere").mkdir()
    damage, fragment = UNTRUSTED_PATCH_SETS[case]
    damage(tmp_path / "data", tmp_path / "elsewhere")
    before = snapshot(sglang_env)
    for verb in ("status", "apply", "diff"):
        done = run_cli(verb, "--env", str(sglang_env), "--patch-set", str(manifest))
        if verb == "status":  # status reports the patch set it cannot use, and goes on
            assert done.returncode == 0 and fragment in done.stdout, done.stdout
            continue
        assert_refused(done, ExitCode.BAD_PATCH_SET, fragment)
        assert "Traceback" not in done.stderr
    assert_untouched(sglang_env, before, state_dir)


def test_a_matrix_release_that_is_no_version_is_a_usage_error_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    done = run_cli("matrix", "--versions", "0.5.14,latest", "--out", str(out))
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "expected releases such as 0.5.14, got 'latest'" in done.stderr
    assert not out.exists()
