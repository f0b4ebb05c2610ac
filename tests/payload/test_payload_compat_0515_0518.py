"""The sglang 0.5.15 - 0.5.18 shim's verify_width_scope: what a narrower verify width is built
under, per release (the matrix checks the same on each release's real ServerArgs and
get_batch_sizes_to_capture)."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("torch")
from payload_modules import OVERLAY, load_compat_shim

SHIM = OVERLAY / "shims/sglang-0.5.15-0.5.18/ddtree_compat.py"
BATCH_SIZES = [1, 2, 4, 8, 16]


def load_shim(monkeypatch: pytest.MonkeyPatch, release: tuple[int, ...], shim: Path = SHIM) -> types.ModuleType:
    """A family's shim as it loads under ``release`` (this family's by default)."""
    return load_compat_shim(monkeypatch, release, shim)


class Bag(types.SimpleNamespace):
    """A runtime-context config bag: read-only but for the scoped override."""

    def __setattr__(self, name, value):
        raise AttributeError(f"bag is read-only: {name}")

    @contextmanager
    def override(self, **fields):
        saved = {name: getattr(self, name) for name in fields}
        self.__dict__.update(fields)
        try:
            yield self
        finally:
            self.__dict__.update(saved)


class ReadOnlyRecord(types.SimpleNamespace):
    """0.5.17+'s resolved ServerArgs: a bare assignment raises."""

    def __setattr__(self, name, value):
        raise AttributeError(f"server_args.{name} assigned after resolution")


def graphs(bs) -> types.SimpleNamespace:
    return types.SimpleNamespace(decode=types.SimpleNamespace(bs=list(bs)))


def runtime_context(monkeypatch: pytest.MonkeyPatch) -> tuple[Bag, types.SimpleNamespace]:
    """The published spec bag (verify width 257) and exec bag, as sglang.srt.runtime_context."""
    spec = Bag(speculative_num_draft_tokens=257)
    exec_bag = types.SimpleNamespace(graph=Bag(cuda_graph_config=graphs(BATCH_SIZES)))
    context = types.ModuleType("sglang.srt.runtime_context")
    context.get_spec, context.get_exec = (lambda: spec), (lambda: exec_bag)
    monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", context)
    return spec, exec_bag


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch):
    """A target model runner (verify width 257) and the runtime context's spec and exec bags."""
    spec, exec_bag = runtime_context(monkeypatch)
    fields = {"speculative_num_draft_tokens": 257, "cuda_graph_config": graphs(BATCH_SIZES)}
    return types.SimpleNamespace(spec=spec, exec=exec_bag, fields=fields)


def seen(world, runner, release):
    """(width, decode batch sizes) where this release's backend and graph runner read them."""
    width = runner.server_args.speculative_num_draft_tokens
    if release >= (0, 5, 17):
        width = world.spec.speculative_num_draft_tokens
    config = world.exec.graph if release >= (0, 5, 18) else runner.server_args
    return width, config.cuda_graph_config.decode.bs


@pytest.mark.parametrize("release", [(0, 5, 15), (0, 5, 16), (0, 5, 17), (0, 5, 18)])
def test_the_width_and_capture_sizes_hold_inside_the_scope_and_are_restored_after(
    monkeypatch: pytest.MonkeyPatch, world, release
) -> None:
    compat = load_shim(monkeypatch, release)
    record = ReadOnlyRecord if release >= (0, 5, 17) else types.SimpleNamespace
    runner = types.SimpleNamespace(server_args=record(**world.fields))
    with compat.verify_width_scope(runner, 33, [8, 16]):
        assert seen(world, runner, release) == (33, [8, 16])
    assert seen(world, runner, release) == (257, BATCH_SIZES)
    assert runner.server_args.speculative_num_draft_tokens == 257
    assert world.spec.speculative_num_draft_tokens == 257
    assert runner.server_args.cuda_graph_config.decode.bs == BATCH_SIZES
    assert world.exec.graph.cuda_graph_config.decode.bs == BATCH_SIZES


@pytest.mark.parametrize("release", [(0, 5, 16), (0, 5, 18)])
def test_a_failed_build_restores_them_too(monkeypatch: pytest.MonkeyPatch, world, release) -> None:
    compat = load_shim(monkeypatch, release)
    runner = types.SimpleNamespace(server_args=types.SimpleNamespace(**world.fields))
    with pytest.raises(RuntimeError, match="capture failed"), compat.verify_width_scope(runner, 16, []):
        assert seen(world, runner, release) == (16, [])
        raise RuntimeError("capture failed")
    assert seen(world, runner, release) == (257, BATCH_SIZES)
