"""The sglang 0.5.19 - 0.5.23 shim's verify_width_scope: what a narrower verify width is built
under (the matrix checks the same on each release's real ServerArgs and
get_batch_sizes_to_capture)."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("torch")
from payload_modules import OVERLAY
from test_payload_compat_0515_0518 import (
    BATCH_SIZES,
    ReadOnlyRecord,
    graphs,
    load_shim,
    runtime_context,
)

SHIM = OVERLAY / "shims/sglang-0.5.19-0.5.23/ddtree_compat.py"
RELEASES = [(0, 5, 19), (0, 5, 20), (0, 5, 21), (0, 5, 22), (0, 5, 23)]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch):
    """The published spec and exec bags (verify width 257) and the target's read-only record."""
    spec, exec_bag = runtime_context(monkeypatch)
    record = ReadOnlyRecord(speculative_num_draft_tokens=257, cuda_graph_config=graphs(BATCH_SIZES))
    runner = types.SimpleNamespace(server_args=record)

    def seen():
        """(width, decode batch sizes) where the backend and get_batch_sizes_to_capture read them."""
        return spec.speculative_num_draft_tokens, exec_bag.graph.cuda_graph_config.decode.bs

    return types.SimpleNamespace(runner=runner, seen=seen)


@pytest.mark.parametrize("release", RELEASES)
def test_the_width_and_capture_sizes_hold_inside_the_scope_and_are_restored_after(
    monkeypatch: pytest.MonkeyPatch, world, release
) -> None:
    compat = load_shim(monkeypatch, release, SHIM)
    with compat.verify_width_scope(world.runner, 33, [8, 16]):
        assert world.seen() == (33, [8, 16])
    assert world.seen() == (257, BATCH_SIZES)
    assert world.runner.server_args.speculative_num_draft_tokens == 257
    assert world.runner.server_args.cuda_graph_config.decode.bs == BATCH_SIZES


@pytest.mark.parametrize("release", [(0, 5, 19), (0, 5, 23)])
def test_a_failed_build_restores_them_too(monkeypatch: pytest.MonkeyPatch, world, release) -> None:
    compat = load_shim(monkeypatch, release, SHIM)
    with pytest.raises(RuntimeError, match="capture failed"), compat.verify_width_scope(world.runner, 16, []):
        assert world.seen() == (16, [])
        raise RuntimeError("capture failed")
    assert world.seen() == (257, BATCH_SIZES)

