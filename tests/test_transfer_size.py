"""scripts/gpu/transfer_size.sh: what a device call sends (the tree as the device copies it and
the carried paths) against its 64 MiB."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "transfer_size.sh"
MB = 1_000_000


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs" / "bench").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("/.devsite/\n")
    (root / "docs" / "bench" / "records.json").write_bytes(b"x" * (3 * MB))
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    (root / "notes.txt").write_bytes(b"y" * MB)  # untracked, not ignored: it travels
    (root / ".devsite").mkdir()
    (root / ".devsite" / "site.tar.xz").write_bytes(b"z" * (66 * MB))  # ignored: only if carried
    return root


def run(root: Path, *carry: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *carry], cwd=root, capture_output=True, text=True, check=False)


def test_the_tree_and_the_carried_paths_count_and_a_call_past_64_mib_fails(tmp_path: Path) -> None:
    root = repo(tmp_path)
    alone = run(root)
    assert alone.returncode == 0 and "total 4.0 MB of 67.1 MB" in alone.stdout
    carried = run(root, ".devsite")
    assert carried.returncode == 1 and "total 70.0 MB" in carried.stdout
    assert "   66.0  .devsite/site.tar.xz" in carried.stdout and "    3.0  docs/bench" in carried.stdout
    assert carried.stderr.startswith("transfer_size: ")
    (root / "docs" / "bench" / "records.json").unlink()  # what a call leaves out
    assert run(root, ".devsite").returncode == 0


def test_a_carried_path_that_is_not_there_is_refused(tmp_path: Path) -> None:
    done = run(repo(tmp_path), ".whl")
    assert done.returncode == 2 and done.stderr.strip() == "transfer_size: no .whl to carry"
