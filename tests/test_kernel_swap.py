"""scripts/gpu/kernel_swap.sh: a device bundle with another sglang-kernel build swapped in,
trimmed as the bundle script trims it (pip reads a local wheel here: no index is reached)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "kernel_swap.sh"
WHEEL = "sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl"


def kernel_wheel(directory: Path) -> None:
    with zipfile.ZipFile(directory / WHEEL, "w") as wheel:
        for name in ("sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/flash_ops.abi3.so",
                     "sgl_kernel/sm100/common_ops.abi3.so"):
            wheel.writestr(name, "0.4.5")
        wheel.writestr("sglang_kernel-0.4.5.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.5\n")
        wheel.writestr("sglang_kernel-0.4.5.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-manylinux2014_x86_64\n")
        wheel.writestr("sglang_kernel-0.4.5.dist-info/RECORD", "")


def bundle(path: Path, site: Path) -> None:
    for name in ("sglang/__init__.py", "sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so",
                 "sglang_kernel-0.4.6.post1.dist-info/METADATA"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("pinned")
    with tarfile.open(path, "w:xz") as tar:
        tar.add(site, arcname=".")


def swap(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    kernel_wheel(wheels)
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"  # python3: the test interpreter's, with pip
    env = {"PATH": path, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "HOME": str(tmp_path)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False)


def test_the_pinned_kernel_leaves_and_the_other_comes_in_trimmed(tmp_path: Path) -> None:
    bundle(tmp_path / "pinned.tar.xz", tmp_path / "site")
    out = tmp_path / "out" / "swapped.tar.xz"
    done = swap(tmp_path, str(tmp_path / "pinned.tar.xz"), "0.4.5", str(out))
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        names = {name.removeprefix("./") for name in tar.getnames()}
        kernel = tar.extractfile("./sgl_kernel/sm90/common_ops.abi3.so").read()
    assert kernel == b"0.4.5" and "sglang/__init__.py" in names
    assert "sglang_kernel-0.4.5.dist-info/METADATA" in names
    assert not any(n.startswith(("sglang_kernel-0.4.6", "sgl_kernel/sm100", "sgl_kernel/flash_ops")) for n in names)


def test_a_missing_bundle_is_refused_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "swapped.tar.xz"
    done = swap(tmp_path, str(tmp_path / "absent.tar.xz"), "0.4.5", str(out))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"kernel_swap: no bundle at {tmp_path / 'absent.tar.xz'}"]
    assert not out.exists()
