"""The sglang 0.5.14 shim's verify_width_scope: what a narrower verify width is built under."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("torch")
from payload_modules import load_payload_module

SHIM = Path(__file__).resolve().parents[2] / "overlay/shims/sglang-0.5.14/ddtree_compat.py"


@pytest.fixture(scope="module")
def compat():
    load_payload_module("sglang.srt.speculative.ddtree_contract")
    spec = importlib.util.spec_from_file_location("ddtree_compat_0514", SHIM)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def model_runner():
    decode = types.SimpleNamespace(bs=[1, 2, 4, 8, 16])
    server_args = types.SimpleNamespace(
        speculative_num_draft_tokens=257, cuda_graph_config=types.SimpleNamespace(decode=decode)
    )
    return types.SimpleNamespace(server_args=server_args)


def test_the_width_and_capture_sizes_hold_inside_the_scope_and_are_restored_after(compat):
    runner = model_runner()
    with compat.verify_width_scope(runner, 33, [8, 16]):
        assert runner.server_args.speculative_num_draft_tokens == 33
        assert runner.server_args.cuda_graph_config.decode.bs == [8, 16]
    assert runner.server_args.speculative_num_draft_tokens == 257
    assert runner.server_args.cuda_graph_config.decode.bs == [1, 2, 4, 8, 16]


def test_a_failed_build_restores_them_too(compat):
    runner = model_runner()
    with pytest.raises(RuntimeError, match="capture failed"), compat.verify_width_scope(runner, 16, []):
        raise RuntimeError("capture failed")
    assert runner.server_args.speculative_num_draft_tokens == 257
    assert runner.server_args.cuda_graph_config.decode.bs == [1, 2, 4, 8, 16]
