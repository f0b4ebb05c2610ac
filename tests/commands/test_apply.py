"""apply and rollback on a real sglang install: bytes, modes, hardlinks, bytecode, RECORD."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from overlay_helpers import NEW_FILES, PATCHED_PATHS, run_cli, site_packages, snapshot

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.commands.rollback import rollback
from ddtree_overlay.engine.envprobe import probe_env

SPEC_INFO = "sglang/srt/speculative/spec_info.py"
NEW_MODULE = "sglang/srt/speculative/ddtree_utils.py"
PATCHED = PATCHED_PATHS


def target_python(env: Path, code: str, *args: Path) -> str:
    command = [str(env / "bin" / "python"), "-c", code, *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_apply_then_rollback_restores_every_file_to_record(sglang_env: Path) -> None:
    pristine = snapshot(sglang_env)
    result = apply(probe_env(sglang_env))
    assert result.status == "ok"
    site = site_packages(sglang_env)
    assert b"import sglang.srt.speculative.ddtree_spec" in (site / SPEC_INFO).read_bytes()
    # sglang's own __init__ needs torch and the rest, which --no-deps left out: byte-compile
    # every new and patched module in the target interpreter (GPU import is `verify`'s job)
    compile_all = (
        "import py_compile, sys; "
        "[py_compile.compile(f, doraise=True) for f in sys.argv[1:]]; print('ok')"
    )
    new = sorted((site / "sglang/srt/speculative").glob("ddtree_*.py"))
    assert len(new) == NEW_FILES  # every new payload module is a ddtree_*.py
    assert target_python(sglang_env, compile_all, *new, *(site / p for p in PATCHED)) == "ok"
    assert probe_env(sglang_env).sglang.record.modified == PATCHED
    rollback(probe_env(sglang_env))
    assert snapshot(sglang_env) == pristine
    record = probe_env(sglang_env).sglang.record
    assert (record.modified, record.missing) == ((), ())
    assert not (site / NEW_MODULE).exists()


def test_second_apply_is_a_no_op_that_exits_zero(sglang_env: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    applied = snapshot(sglang_env)
    again = run_cli("apply", "--env", str(sglang_env))
    assert again.returncode == 0 and "already applied" in again.stdout
    assert "already applied" not in again.stderr  # said once
    assert snapshot(sglang_env) == applied


def test_check_writes_nothing(sglang_env: Path, state_dir: Path) -> None:
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), "--check")
    assert done.returncode == 0 and "would apply" in done.stdout
    assert snapshot(sglang_env) == before
    assert not list(state_dir.glob("envs/*/ledger.json"))


def test_mode_is_kept_and_hardlinks_are_superseded(sglang_env: Path, tmp_path: Path) -> None:
    target = site_packages(sglang_env) / SPEC_INFO
    target.chmod(0o640)
    cache_copy = tmp_path / "uv-cache-copy.py"
    os.link(target, cache_copy)
    original = cache_copy.read_bytes()
    apply(probe_env(sglang_env))
    assert target.stat().st_mode & 0o7777 == 0o640
    assert cache_copy.read_bytes() == original
    assert target.stat().st_ino != cache_copy.stat().st_ino


def test_stale_bytecode_of_touched_modules_is_purged(sglang_env: Path) -> None:
    site = site_packages(sglang_env)
    cache = site / "sglang" / "srt" / "speculative" / "__pycache__"
    cache.mkdir(exist_ok=True)
    stale = [cache / "spec_info.cpython-311.pyc", cache / "spec_info.cpython-311.opt-1.pyc"]
    unrelated = cache / "spec_registry.cpython-311.pyc"
    for path in (*stale, unrelated):
        path.write_bytes(b"stale")
    apply(probe_env(sglang_env))
    assert not any(path.exists() for path in stale) and unrelated.exists()


def test_rollback_force_restores_and_sets_the_edit_aside(sglang_env: Path) -> None:
    pristine = snapshot(sglang_env)
    apply(probe_env(sglang_env))
    target = site_packages(sglang_env) / SPEC_INFO
    edited = target.read_bytes() + b"# my edit\n"
    target.write_bytes(edited)
    result = rollback(probe_env(sglang_env), force=True)
    assert snapshot(sglang_env) == pristine
    assert [Path(p).read_bytes() for p in result.data["saved_edits"]] == [edited]


def test_rollback_after_reinstall_removes_orphaned_new_files(sglang_env: Path) -> None:
    site = site_packages(sglang_env)
    wheel_bytes = {p: (site / p).read_bytes() for p in PATCHED}
    apply(probe_env(sglang_env))
    # what `pip install --force-reinstall` does to the patched files: back to the wheel's bytes
    for path, data in wheel_bytes.items():
        (site / path).write_bytes(data)
    assert "partial" in run_cli("status", "--env", str(sglang_env)).stdout
    assert run_cli("rollback", "--env", str(sglang_env)).returncode == 0
    assert not (site / NEW_MODULE).exists()
    assert probe_env(sglang_env).sglang.record.modified == ()


def test_rollback_with_nothing_applied_is_a_no_op(sglang_env: Path) -> None:
    done = run_cli("rollback", "--env", str(sglang_env))
    assert done.returncode == 0 and "nothing to roll back" in done.stderr
