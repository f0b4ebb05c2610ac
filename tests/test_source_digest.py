"""scripts/gpu/source_digest.sh: the device log's name for the sources a call ran, the same
wherever the tree is copied and whatever a call leaves out of it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu" / "source_digest.sh"


def digest(root: Path) -> str:
    return subprocess.run(["bash", str(root / "scripts/gpu/source_digest.sh")], check=True, capture_output=True, text=True).stdout.strip()


def test_the_digest_follows_the_sources_and_ignores_weights_caches_and_docs(tmp_path: Path) -> None:
    for path, text in {
        "ddtree_overlay/cli.py": "a",
        "ddtree_overlay/fixtures/hybrid/model.safetensors": "weights",
        "overlay/sglang/srt/speculative/ddtree_spec.py": "b",
        "manifests/0.5.14.toml": "c",
        "pyproject.toml": "d",
        "docs/BENCHMARKS.md": "e",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "scripts/gpu").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "scripts/gpu/source_digest.sh")
    first = digest(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    (tmp_path / "ddtree_overlay/fixtures/hybrid/model.safetensors").unlink()  # left out of a call
    (tmp_path / "docs/BENCHMARKS.md").write_text("changed")
    (tmp_path / "overlay/__pycache__").mkdir()
    (tmp_path / "overlay/__pycache__/x.cpython-312.pyc").write_text("cache")
    assert digest(tmp_path) == first
    (tmp_path / "overlay/sglang/srt/speculative/ddtree_spec.py").write_text("b2")
    assert digest(tmp_path) != first


def test_the_device_log_prints_it() -> None:
    assert "scripts/gpu/source_digest.sh" in (ROOT / "scripts/gpu/on_gpus.sh").read_text()
    assert re.fullmatch(r"[0-9a-f]{12}", digest(ROOT))
