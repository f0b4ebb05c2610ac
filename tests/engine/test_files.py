"""Durable writes: every byte or none, fsynced before the rename, no temp file left behind."""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import pytest
from forked import run_forked

from ddtree_overlay.engine import files
from ddtree_overlay.engine.files import TEMP_SUFFIX, write_file_durably


def test_a_short_write_is_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    calls = []

    def short_write(fd: int, data) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(files.os, "write", short_write)
    target = tmp_path / "module.py"
    write_file_durably(target, b"x = 1\n" * 100, tag="test")
    assert target.read_bytes() == b"x = 1\n" * 100 and len(calls) == 86


def test_the_temp_file_is_fsynced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: (order.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(files.os, "replace", lambda a, b: (order.append("replace"), real_replace(a, b))[1])
    write_file_durably(tmp_path / "module.py", b"x = 1\n", tag="test")
    assert order == ["fsync", "replace", "fsync"]  # the file, the rename, then its directory


def test_a_write_the_file_size_limit_cuts_short_fails_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "server_args.py"
    target.write_bytes(b"old\n")
    outcome = tmp_path / "outcome"

    def write_past_the_limit() -> None:
        # the kernel writes up to the limit (a short write), then refuses with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_file_durably(target, b"y" * 10_000, tag="test")
        except OSError as error:
            outcome.write_text(errno.errorcode[error.errno])

    assert run_forked(write_past_the_limit) == 0
    assert outcome.read_text() == "EFBIG"
    assert target.read_bytes() == b"old\n"
    assert not list(tmp_path.glob(f"*{TEMP_SUFFIX}"))


def test_the_sweep_removes_only_temp_files(tmp_path: Path) -> None:
    (tmp_path / ".spec_info.py.ddtree-abc-before.ddtree-tmp").write_bytes(b"kept")
    (tmp_path / "spec_info.py").write_bytes(b"source")
    (tmp_path / ".hidden.tmp").write_bytes(b"someone else's")
    files.remove_stray_temp_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden.tmp", "spec_info.py"]
