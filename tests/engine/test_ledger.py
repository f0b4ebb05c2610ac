"""Ledger state: versioned, outside site-packages, keyed by the env."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtree_overlay.engine import ledger
from ddtree_overlay.engine.errors import RecoveryNeeded


def test_state_lives_under_the_override_dir_keyed_by_real_path(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "site")
    state = ledger.env_state(tmp_path / "link")
    assert state == ledger.env_state(tmp_path / "site")
    assert state.root.parent.parent == state_dir


def test_an_unknown_ledger_version_stops_with_a_next_step(state_dir: Path, tmp_path: Path) -> None:
    state = ledger.env_state(tmp_path)
    state.root.mkdir(parents=True)
    state.ledger_path.write_text(json.dumps({"ledger_version": 2}))
    with pytest.raises(RecoveryNeeded, match="ledger_version 2") as raised:
        ledger.read_ledger(state)
    assert raised.value.hint


def test_blobs_are_content_addressed_and_checked(state_dir: Path, tmp_path: Path) -> None:
    state = ledger.env_state(tmp_path)
    digest = ledger.store_blob(state, b"pre-image")
    reinstall = "`/srv/venv/bin/python -m pip install --force-reinstall --no-deps sglang==0.5.14`"
    assert ledger.read_blob(state, digest, reinstall=reinstall) == b"pre-image"
    (state.blobs_dir / digest).write_bytes(b"corrupted")
    with pytest.raises(RecoveryNeeded, match="corrupted") as raised:
        ledger.read_blob(state, digest, reinstall=reinstall)
    assert raised.value.hint == f"reinstall sglang: {reinstall}"
