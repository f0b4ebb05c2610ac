"""apply and rollback on a real sglang install: bytes, modes, hardlinks, bytecode, RECORD."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from overlay_helpers import run_cli, site_packages, snapshot

from ddtree_overlay.apply import apply
from ddtree_overlay.envprobe import probe_env
from ddtree_overlay.rollback import rollback

SPEC_REGISTRY = "sglang/srt/speculative/spec_registry.py"
PLACEHOLDER = "sglang/srt/speculative/ddtree_placeholder.py"


def target_python(env: Path, code: str, *args: Path) -> str:
    command = [str(env / "bin" / "python"), "-c", code, *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_apply_then_rollback_restores_every_file_to_record(sglang_env: Path) -> None:
    pristine = snapshot(sglang_env)
    result = apply(probe_env(sglang_env))
    assert result.status == "ok"
    site = site_packages(sglang_env)
    assert b"_OVERLAY_ALGORITHMS" in (site / SPEC_REGISTRY).read_bytes()
    # sglang's own __init__ needs its dependencies, which --no-deps left out: load the new
    # module by path and byte-compile the patched one, in the target interpreter
    load = (
        "import importlib.util as u, py_compile, sys; "
        "s = u.spec_from_file_location('m', sys.argv[1]); m = u.module_from_spec(s); "
        "s.loader.exec_module(m); py_compile.compile(sys.argv[2], doraise=True); "
        "print(m.overlay_installed())"
    )
    assert target_python(sglang_env, load, site / PLACEHOLDER, site / SPEC_REGISTRY) == "True"
    assert probe_env(sglang_env).sglang.record.modified == (SPEC_REGISTRY,)
    rollback(probe_env(sglang_env))
    assert snapshot(sglang_env) == pristine
    record = probe_env(sglang_env).sglang.record
    assert (record.modified, record.missing) == ((), ())
    assert not (site / PLACEHOLDER).exists()


def test_second_apply_is_a_no_op_that_exits_zero(sglang_env: Path) -> None:
    assert run_cli("apply", "--env", str(sglang_env)).returncode == 0
    applied = snapshot(sglang_env)
    again = run_cli("apply", "--env", str(sglang_env))
    assert again.returncode == 0 and "already applied" in again.stdout
    assert snapshot(sglang_env) == applied


def test_check_writes_nothing(sglang_env: Path, state_dir: Path) -> None:
    before = snapshot(sglang_env)
    done = run_cli("apply", "--env", str(sglang_env), "--check")
    assert done.returncode == 0 and "would apply" in done.stdout
    assert snapshot(sglang_env) == before
    assert not list(state_dir.glob("envs/*/ledger.json"))


def test_mode_is_kept_and_hardlinks_are_superseded(sglang_env: Path, tmp_path: Path) -> None:
    target = site_packages(sglang_env) / SPEC_REGISTRY
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
    stale = [cache / "spec_registry.cpython-311.pyc", cache / "spec_registry.cpython-311.opt-1.pyc"]
    unrelated = cache / "spec_info.cpython-311.pyc"
    for path in (*stale, unrelated):
        path.write_bytes(b"stale")
    apply(probe_env(sglang_env))
    assert not any(path.exists() for path in stale) and unrelated.exists()


def test_rollback_force_restores_and_sets_the_edit_aside(sglang_env: Path) -> None:
    pristine = snapshot(sglang_env)
    apply(probe_env(sglang_env))
    target = site_packages(sglang_env) / SPEC_REGISTRY
    edited = target.read_bytes() + b"# my edit\n"
    target.write_bytes(edited)
    result = rollback(probe_env(sglang_env), force=True)
    assert snapshot(sglang_env) == pristine
    assert [Path(p).read_bytes() for p in result.data["saved_edits"]] == [edited]


def test_rollback_after_reinstall_removes_orphaned_new_files(sglang_env: Path) -> None:
    apply(probe_env(sglang_env))
    site = site_packages(sglang_env)
    # what `pip install --force-reinstall` does to the patched file: back to the wheel's bytes
    pristine_registry = (site / SPEC_REGISTRY).read_bytes().replace(
        b'\n# ddtree-overlay: algorithms the overlay registers; their module is\n'
        b'# ``sglang.srt.speculative.ddtree_placeholder`` until the DDTree payload lands.\n'
        b'_OVERLAY_ALGORITHMS = frozenset({"DDTREE"})\n', b"")
    (site / SPEC_REGISTRY).write_bytes(pristine_registry)
    assert "partial" in run_cli("status", "--env", str(sglang_env)).stdout
    assert run_cli("rollback", "--env", str(sglang_env)).returncode == 0
    assert not (site / PLACEHOLDER).exists()
    assert probe_env(sglang_env).sglang.record.modified == ()


def test_rollback_with_nothing_applied_is_a_no_op(sglang_env: Path) -> None:
    done = run_cli("rollback", "--env", str(sglang_env))
    assert done.returncode == 0 and "nothing to roll back" in done.stderr
