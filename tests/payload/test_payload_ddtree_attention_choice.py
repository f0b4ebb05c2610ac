"""Which attention DDTREE's forwards run (overlay/.../ddtree_attention_choice.py): the target
verify's by ``SGLANG_DDTREE_VERIFY_ATTENTION`` auto, extend or splitkv, the drafter block's by
``SGLANG_DDTREE_DRAFT_ATTENTION`` auto, extend or splitkv, each decided when that model's
triton backend starts, and what the worker reads back from the backends.

SGLang's ``RadixAttention`` / ``AttentionType`` and the release shim's ``attention_backends``
are stand-ins here (the payload module imports them when the backend starts); the layers carry
the attributes SGLang 0.5.14's ``RadixAttention.__init__`` sets.
"""

from __future__ import annotations

import enum
import sys
import types
from types import SimpleNamespace

import pytest
from payload_modules import load_payload_module, triton_interpreter

torch = pytest.importorskip("torch")
with triton_interpreter():
    pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    ac = load_payload_module("sglang.srt.speculative.ddtree_attention_choice")


class AttentionType(enum.Enum):
    DECODER = "decoder"
    DECODER_BIDIRECTIONAL = "decoder_bidirectional"
    ENCODER_ONLY = "encoder_only"


class RadixAttention(torch.nn.Module):
    def __init__(self, layer_id, head_dim=128, v_head_dim=-1, logit_cap=0.0, sliding_window_size=-1,
                 is_cross_attention=False, attn_type=AttentionType.DECODER):
        super().__init__()
        self.layer_id = layer_id
        self.qk_head_dim = head_dim
        self.v_head_dim = v_head_dim if v_head_dim != -1 else head_dim
        self.logit_cap = logit_cap
        self.sliding_window_size = sliding_window_size or -1
        self.is_cross_attention = is_cross_attention
        self.attn_type = attn_type
        self.xai_temperature_len = -1


class Block(torch.nn.Module):
    def __init__(self, layer_id, sinks=False, **attention):
        super().__init__()
        self.attn = RadixAttention(layer_id, **attention)
        if sinks:
            self.sinks = torch.nn.Parameter(torch.zeros(4), requires_grad=False)


class InklingAttention(Block):
    """Where SGLang's Inkling attention lives: it passes a score_mod at forward time."""


InklingAttention.__module__ = "sglang.srt.models.inkling_common.attn"


def model(*layers: torch.nn.Module) -> torch.nn.Module:
    return torch.nn.ModuleList(layers or [Block(0), Block(1)])


def server_args(**fields):
    defaults = dict(
        attention_backend="triton", prefill_attention_backend=None, decode_attention_backend=None,
        enable_deterministic_inference=False, dcp_size=1, speculative_algorithm="DDTREE",
    )
    return SimpleNamespace(**{**defaults, **fields})


@pytest.fixture(autouse=True)
def sglang_stand_ins(monkeypatch):
    layers = types.ModuleType("sglang.srt.layers")
    radix = types.ModuleType("sglang.srt.layers.radix_attention")
    radix.RadixAttention, radix.AttentionType = RadixAttention, AttentionType
    compat = types.ModuleType("sglang.srt.speculative.ddtree_compat")
    compat.attention_backends = lambda cfg: (
        cfg.prefill_attention_backend or cfg.attention_backend,
        cfg.decode_attention_backend or cfg.attention_backend,
    )
    compat.spec_arg = getattr
    for name, stand_in in (("sglang.srt.layers", layers), ("sglang.srt.layers.radix_attention", radix),
                           ("sglang.srt.speculative.ddtree_compat", compat)):
        monkeypatch.setitem(sys.modules, name, stand_in)
    monkeypatch.delenv("SGLANG_DDTREE_VERIFY_ATTENTION", raising=False)
    monkeypatch.delenv("SGLANG_DDTREE_DRAFT_ATTENTION", raising=False)


def test_a_misspelt_mode_is_refused(monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "split")
    with pytest.raises(ValueError, match="must be 'auto' or 'extend' or 'splitkv', got 'split'"):
        ac.verify_attention_mode()


def test_auto_runs_split_kv_on_plain_causal_layers_of_head_dim_64_128_and_256():
    assert ac.auto_keeps_extend(server_args(), model()) is None
    assert ac.auto_keeps_extend(server_args(), model(Block(0), Block(1, head_dim=256))) is None
    assert ac.auto_keeps_extend(server_args(), model(Block(0, head_dim=64))) is None


@pytest.mark.parametrize(
    ("args", "layers", "reason"),
    [
        ({}, (Block(0), Block(1, head_dim=96)), "its attention head dim is 96; engines measured"),
        ({}, (Block(0, head_dim=80),), "its attention head dim is 80"),
        ({}, (Block(0, head_dim=128, v_head_dim=96),), "its attention head dim is 96/128"),
        ({"attention_backend": "flashinfer"}, (), "flashinfer (prefill) and flashinfer (decode)"),
        ({"prefill_attention_backend": "flashinfer"}, (), "flashinfer (prefill) and triton (decode)"),
        ({"enable_deterministic_inference": True}, (), "--enable-deterministic-inference is set"),
        ({"enable_unified_memory": True}, (), "--enable-unified-memory is set"),
        ({"dcp_size": 2}, (), "--dcp-size is 2"),
        ({}, (Block(0), Block(1, sliding_window_size=4096)), "layer 1 has a sliding window"),
        ({}, (Block(0, logit_cap=30.0),), "layer 0 has a logit cap"),
        ({}, (Block(0, attn_type=AttentionType.ENCODER_ONLY),), "layer 0 has a non-causal layer"),
        ({}, (Block(0, attn_type=AttentionType.DECODER_BIDIRECTIONAL),), "layer 0 has a non-causal layer"),
        ({}, (Block(0, is_cross_attention=True),), "layer 0 has a non-causal layer"),
        ({}, (Block(0, sinks=True),), "the model's attention has sinks"),
        ({}, (Block(0), InklingAttention(1)), "the model's attention passes a score_mod"),
        ({}, (torch.nn.Linear(2, 2),), "the model has no RadixAttention layer to check"),
    ],
)
def test_auto_keeps_extend_and_says_why(args, layers, reason):
    assert reason in ac.auto_keeps_extend(server_args(**args), model(*layers))


def model_runner(*layers, draft=False, **args):
    return SimpleNamespace(
        server_args=server_args(**args), model=model(*layers), is_draft_worker=draft,
        model_config=SimpleNamespace(context_len=4096),
    )


@pytest.mark.parametrize(
    ("mode", "runner", "runs"),
    [
        (None, model_runner(), True),
        ("auto", model_runner(Block(0, head_dim=256)), True),
        ("auto", model_runner(Block(0, head_dim=96)), False),
        ("extend", model_runner(), False),
        ("splitkv", model_runner(Block(0, head_dim=256)), True),
        (None, model_runner(draft=True), False),  # the drafter: its own switch, below
        (None, model_runner(speculative_algorithm="DFLASH"), False),
    ],
)
def test_the_triton_backend_gets_the_split_kv_verify_where_the_mode_asks(monkeypatch, mode, runner, runs):
    if mode:
        monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", mode)
    verify = ac.tree_verify_for(runner, sm_count=132)
    assert isinstance(verify, ac.TreeVerifyAttention) if runs else verify is None


def backend_of(runner):
    """A triton backend as the patch set starts it, inside a hybrid wrapper."""
    triton = SimpleNamespace(ddtree_tree_verify=ac.tree_verify_for(runner, sm_count=132))
    return SimpleNamespace(full_attn_backend=triton)


class FlashInferAttnBackend:
    """A backend the patch set does not wire: it has no ``ddtree_tree_verify``."""


def test_the_worker_reads_the_choice_back_from_the_target_backend(monkeypatch):
    runner = model_runner()
    runner.attn_backend = backend_of(runner)
    assert ac.verify_attention_in_use(runner) == (
        True, "DDTREE target verify: the split-KV kernel, a tail-only tree mask (SGLANG_DDTREE_VERIFY_ATTENTION=auto)"
    )
    runner = model_runner(Block(0, head_dim=96))
    runner.attn_backend = backend_of(runner)
    tail_only, line = ac.verify_attention_in_use(runner)
    assert not tail_only and "FULL-layout tree mask (SGLANG_DDTREE_VERIFY_ATTENTION=auto: its attention head dim is 96" in line


def test_splitkv_on_a_backend_without_it_is_refused(monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "splitkv")
    runner = model_runner(attention_backend="flashinfer")
    runner.attn_backend = FlashInferAttnBackend()
    with pytest.raises(ValueError, match=r"splitkv runs in the triton attention backend .* not FlashInferAttnBackend"):
        ac.verify_attention_in_use(runner)


ENCODER = AttentionType.ENCODER_ONLY  # a DFlash drafter's full-attention layers


@pytest.mark.parametrize(
    ("mode", "runner", "runs"),
    [
        (None, model_runner(Block(0, attn_type=ENCODER), draft=True), True),
        ("auto", model_runner(Block(0, attn_type=ENCODER), Block(1, attn_type=ENCODER, head_dim=256), draft=True), True),
        ("extend", model_runner(Block(0, attn_type=ENCODER), draft=True), False),
        ("splitkv", model_runner(Block(0, attn_type=ENCODER), Block(1, attn_type=ENCODER), draft=True), True),
        # DFLASH's own drafter never: the switch is DDTREE's
        ("splitkv", model_runner(Block(0, attn_type=ENCODER), draft=True, speculative_algorithm="DFLASH"), False),
        (None, model_runner(Block(0, attn_type=ENCODER), draft=True, speculative_algorithm="DFLASH"), False),
    ],
)
def test_the_drafter_gets_the_split_kv_block_attention_where_its_switch_asks(monkeypatch, mode, runner, runs):
    if mode:
        monkeypatch.setenv("SGLANG_DDTREE_DRAFT_ATTENTION", mode)
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "splitkv")  # the target's switch does not reach it
    draft = ac.tree_verify_for(runner, sm_count=132)
    assert isinstance(draft, ac.DraftBlockAttention) if runs else draft is None


DRAFTERS_THE_KERNEL_CANNOT_RUN = pytest.mark.parametrize(
    ("args", "layers", "reason"),
    [
        ({}, (Block(0, attn_type=ENCODER), Block(1)), "layer 1 has a causal layer"),
        ({}, (Block(0, attn_type=ENCODER, sliding_window_size=2048),), "layer 0 has a sliding window"),
        ({}, (Block(0, attn_type=ENCODER, logit_cap=30.0),), "layer 0 has a logit cap"),
        ({}, (Block(0, attn_type=ENCODER, head_dim=96),), "its attention head dim is 96"),
        ({}, (Block(0, attn_type=ENCODER, sinks=True),), "the model's attention has sinks"),
        ({"enable_deterministic_inference": True}, (Block(0, attn_type=ENCODER),), "--enable-deterministic-inference is set"),
        ({"enable_unified_memory": True}, (Block(0, attn_type=ENCODER),), "--enable-unified-memory is set"),
        ({"dcp_size": 2}, (Block(0, attn_type=ENCODER),), "--dcp-size is 2"),
    ],
)


@DRAFTERS_THE_KERNEL_CANNOT_RUN
def test_splitkv_refuses_a_drafter_it_cannot_run_and_says_why(monkeypatch, args, layers, reason):
    monkeypatch.setenv("SGLANG_DDTREE_DRAFT_ATTENTION", "splitkv")
    with pytest.raises(ValueError, match=f"SGLANG_DDTREE_DRAFT_ATTENTION=splitkv cannot run DDTREE's drafter: .*{reason}"):
        ac.tree_verify_for(model_runner(*layers, draft=True, **args), sm_count=132)


@DRAFTERS_THE_KERNEL_CANNOT_RUN
@pytest.mark.parametrize("mode", [None, "auto"])
def test_auto_leaves_a_drafter_it_cannot_run_on_sglangs_kernel_without_refusing(monkeypatch, mode, args, layers, reason):
    if mode:
        monkeypatch.setenv("SGLANG_DDTREE_DRAFT_ATTENTION", mode)
    runner = model_runner(*layers, draft=True, **args)
    assert reason in ac.draft_keeps_extend(runner.server_args, runner.model)
    runner.attn_backend = backend_of(runner)
    assert runner.attn_backend.full_attn_backend.ddtree_tree_verify is None
    assert ac.draft_attention_in_use(runner) is False


class Mode:
    def __init__(self, target_verify: bool):
        self.target_verify = target_verify

    def is_target_verify(self) -> bool:
        return self.target_verify


def test_each_call_serves_its_own_forwards():
    """The target's verify carries DDTREE's mask; the drafter's block none."""
    verify, draft = ac.TreeVerifyAttention(4096, 132), ac.DraftBlockAttention(4096, 132)
    mask = torch.ones(4, dtype=torch.uint8)
    assert verify.serves(Mode(True), mask) and not verify.serves(Mode(True), None)
    assert draft.serves(Mode(True), None) and not draft.serves(Mode(True), mask)
    assert not verify.serves(Mode(False), mask) and not draft.serves(Mode(False), None)


@pytest.mark.parametrize("mode", [None, "auto", "splitkv"])
def test_the_worker_reads_the_drafters_choice_back_from_its_triton_backend(monkeypatch, mode):
    if mode:
        monkeypatch.setenv("SGLANG_DDTREE_DRAFT_ATTENTION", mode)
    runner = model_runner(Block(0, attn_type=ENCODER), draft=True)
    runner.attn_backend = backend_of(runner)
    assert isinstance(runner.attn_backend.full_attn_backend.ddtree_tree_verify, ac.DraftBlockAttention)
    assert ac.draft_attention_in_use(runner) is True


@pytest.mark.parametrize("mode", [None, "auto", "extend"])
def test_a_drafter_on_another_backend_runs_its_kernel_unless_splitkv_is_asked_for(monkeypatch, mode):
    if mode:
        monkeypatch.setenv("SGLANG_DDTREE_DRAFT_ATTENTION", mode)
    runner = model_runner(Block(0, attn_type=ENCODER), draft=True, attention_backend="flashinfer")
    runner.attn_backend = FlashInferAttnBackend()
    assert ac.draft_attention_in_use(runner) is False


def test_splitkv_refuses_a_drafter_on_another_backend(monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_DRAFT_ATTENTION", "splitkv")
    runner = model_runner(Block(0, attn_type=ENCODER), draft=True, attention_backend="flashinfer")
    runner.attn_backend = FlashInferAttnBackend()
    with pytest.raises(ValueError, match="SGLANG_DDTREE_DRAFT_ATTENTION=splitkv runs in the triton attention backend, not the drafter's FlashInferAttnBackend"):
        ac.draft_attention_in_use(runner)
