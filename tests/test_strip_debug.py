"""scripts/gpu/strip_debug.sh: a device bundle whose shared objects lose their debug sections
and keep the symbols they export."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "strip_debug.sh"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("cc", "strip", "readelf")), reason="needs cc, strip and readelf"
)


def sections(path: Path) -> str:
    return subprocess.run(["readelf", "-S", "--dyn-syms", str(path)], capture_output=True, text=True, check=True).stdout


def test_debug_sections_leave_and_exported_symbols_and_other_files_stay(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    source = tmp_path / "bindings.c"
    source.write_text("int xgrammar_answer(void) { return 42; }\n")
    subprocess.run(["cc", "-g", "-shared", "-fPIC", "-o", str(site / "pkg" / "bindings.so"), str(source)], check=True)
    (site / "pkg" / "__init__.py").write_text("answer = 42\n")
    assert ".debug_info" in sections(site / "pkg" / "bindings.so")
    bundle = tmp_path / "bundle.tar.xz"
    with tarfile.open(bundle, "w:xz") as tar:
        tar.add(site, arcname=".")

    out = tmp_path / "out" / "stripped.tar.xz"
    done = subprocess.run(["bash", str(SCRIPT), str(bundle), str(out)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "with 1 shared objects' debug sections taken out" in done.stdout
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out) as tar:
        tar.extractall(unpacked, filter="data")
    stripped = sections(unpacked / "pkg" / "bindings.so")
    assert ".debug_info" not in stripped and "xgrammar_answer" in stripped
    assert (unpacked / "pkg" / "__init__.py").read_text() == "answer = 42\n"


def test_a_missing_bundle_is_refused_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "stripped.tar.xz"
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "absent.tar.xz"), str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.strip() == f"strip_debug: no bundle at {tmp_path / 'absent.tar.xz'}"
    assert not out.exists()
