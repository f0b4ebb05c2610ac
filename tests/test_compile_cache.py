"""scripts/gpu/compile_cache.sh: what a device call's first engine compiled, kept for the next
call's fresh machine, and put back only where the bundle and the GPU are the ones it was built for."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu" / "compile_cache.sh"


def machine(root: Path, compute_cap: str = "9.0", flashinfer: str = "0.6.12") -> dict[str, str]:
    """A fresh device machine: an empty HOME, an unpacked bundle and an nvidia-smi."""
    home, site, bin_dir = root / "home", root / "site", root / "bin"
    for d in (home, site / f"flashinfer_python-{flashinfer}.dist-info", site / "flashinfer", bin_dir):
        d.mkdir(parents=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho {compute_cap}\n")
    smi.chmod(0o755)
    return {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


def built(build_dir: Path, name: str, linked: bool = True) -> None:
    """A ninja build dir holding NAME.so and its object; the ninja log records the link only
    where it finished."""
    write(build_dir / f"{name}.so", f"{name} so")
    write(build_dir / "main.o", "object")
    log = "# ninja log v5\n0\t10\t0\tmain.o\t1a\n" + (f"10\t20\t0\t{name}.so\t2b\n" if linked else "")
    write(build_dir / ".ninja_log", log)


def compiled_once(home: Path) -> None:
    """What a first engine leaves: Triton's store, tvm-ffi and flashinfer build dirs."""
    write(home / ".triton/cache/ABC/_fwd_kernel.cubin", "cubin")
    write(home / ".triton/cache/ABC/__grp___fwd_kernel.json", "{}")
    built(home / ".cache/tvm-ffi/sgl_kernel_jit_rmsnorm_1f2e", "sgl_kernel_jit_rmsnorm")
    built(home / ".cache/flashinfer/0.6.12/90a/cached_ops/batch_prefill_fp16", "batch_prefill_fp16")
    write(home / ".cache/flashinfer/0.6.12/90a/generated/batch_prefill_fp16/config.inc", "source")


def test_a_fresh_machine_gets_back_every_compiled_kernel(tmp_path: Path) -> None:
    first = machine(tmp_path / "first")
    compiled_once(Path(first["HOME"]))
    archive = tmp_path / "out" / "compile-cache.tar.xz"
    assert "kept compile-cache.tar.xz" in run(first, "save", str(archive), str(tmp_path / "first/site"))

    second = machine(tmp_path / "second")
    home, site = Path(second["HOME"]), tmp_path / "second/site"
    out = run(second, "restore", str(archive), str(site))
    assert "triton 2 files, tvm-ffi 1 modules, flashinfer 1 modules" in out
    assert (home / ".triton/cache/ABC/_fwd_kernel.cubin").read_text() == "cubin"
    assert (home / ".cache/tvm-ffi/sgl_kernel_jit_rmsnorm_1f2e/sgl_kernel_jit_rmsnorm.so").read_text() == "sgl_kernel_jit_rmsnorm so"
    # flashinfer loads a module from the bundle's AOT dir without running ninja
    assert (site / "flashinfer/data/aot/batch_prefill_fp16/batch_prefill_fp16.so").read_text() == "batch_prefill_fp16 so"
    # only the loadable .so travels, not the build's objects or generated sources
    assert not (home / ".cache/tvm-ffi/sgl_kernel_jit_rmsnorm_1f2e/main.o").exists()
    assert not list(site.rglob("*.o")) and not list(site.rglob("config.inc"))


def test_a_machine_that_restored_the_modules_keeps_them_for_the_next(tmp_path: Path) -> None:
    """flashinfer loads restored modules from the bundle and builds none in its own cache: the
    next archive must carry them all the same."""
    first = machine(tmp_path / "first")
    compiled_once(Path(first["HOME"]))
    archive = tmp_path / "one" / "compile-cache.tar.xz"
    run(first, "save", str(archive), str(tmp_path / "first/site"))
    second = machine(tmp_path / "second")
    run(second, "restore", str(archive), str(tmp_path / "second/site"))
    again = tmp_path / "two" / "compile-cache.tar.xz"
    run(second, "save", str(again), str(tmp_path / "second/site"))
    third = machine(tmp_path / "third")
    assert "flashinfer 1 modules" in run(third, "restore", str(again), str(tmp_path / "third/site"))
    assert (tmp_path / "third/site/flashinfer/data/aot/batch_prefill_fp16/batch_prefill_fp16.so").is_file()


def test_a_module_whose_link_did_not_finish_is_not_carried(tmp_path: Path) -> None:
    env = machine(tmp_path / "first")
    home = Path(env["HOME"])
    built(home / ".cache/flashinfer/0.6.12/90a/cached_ops/cut", "cut", linked=False)
    built(home / ".cache/tvm-ffi/cut_1f2e", "cut", linked=False)
    built(home / ".cache/tvm-ffi/whole_3c4d", "whole")
    archive = tmp_path / "compile-cache.tar.xz"
    run(env, "save", str(archive), str(tmp_path / "first/site"))
    other = machine(tmp_path / "second")
    assert "tvm-ffi 1 modules, flashinfer 0 modules" in run(other, "restore", str(archive), str(tmp_path / "second/site"))


def test_flashinfer_modules_stay_out_of_another_version_or_architecture(tmp_path: Path) -> None:
    first = machine(tmp_path / "first")
    compiled_once(Path(first["HOME"]))
    archive = tmp_path / "compile-cache.tar.xz"
    run(first, "save", str(archive), str(tmp_path / "first/site"))
    for name, kwargs in {"newer": {"flashinfer": "0.6.15.post1"}, "blackwell": {"compute_cap": "12.0"}}.items():
        other = machine(tmp_path / name, **kwargs)
        out = run(other, "restore", str(archive), str(tmp_path / name / "site"))
        assert "flashinfer 0 modules" in out
        assert not (tmp_path / name / "site/flashinfer/data").exists()
        assert (Path(other["HOME"]) / ".triton/cache/ABC/_fwd_kernel.cubin").exists()  # Triton's keys check the target


def test_nothing_carried_or_nothing_compiled_is_said_and_harmless(tmp_path: Path) -> None:
    env = machine(tmp_path)
    assert "none carried" in run(env, "restore", str(tmp_path / "absent.tar.xz"), str(tmp_path / "site"))
    archive = tmp_path / "compile-cache.tar.xz"
    assert "none kept" in run(env, "save", str(archive), str(tmp_path / "site"))
    assert not archive.exists()


def test_past_the_size_limit_the_modules_are_kept_without_tritons_cache(tmp_path: Path) -> None:
    env = machine(tmp_path)
    compiled_once(Path(env["HOME"]))
    with open(Path(env["HOME"]) / ".triton/cache/X.cubin", "wb") as f:
        f.write(os.urandom(2 * 1024 * 1024))  # random bytes: xz cannot shrink them
    archive = tmp_path / "compile-cache.tar.xz"
    out = run({**env, "COMPILE_CACHE_MAX_MIB": "1"}, "save", str(archive), str(tmp_path / "site"))
    assert "kept without it" in out and "modules: yes" in out
    other = machine(tmp_path / "second")
    assert "triton 0 files, tvm-ffi 1 modules, flashinfer 1 modules" in run(other, "restore", str(archive), str(tmp_path / "second/site"))
    assert not list(tmp_path.glob("*.part"))


def test_the_device_calls_use_it() -> None:
    text = (ROOT / "scripts/gpu/on_gpus.sh").read_text()
    assert "compile_cache.sh restore" in text and "compile_cache.sh save" in text
