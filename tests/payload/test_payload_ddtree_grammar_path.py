"""ddtree_grammar_path: the path mask's masked argmax and when it applies (what it fills on real
releases, against SGLang's walk with a real xgrammar grammar, is the matrix's grammar check)."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
from payload_modules import load_payload_module  # noqa: E402


def path():
    return load_payload_module("sglang.srt.speculative.ddtree_grammar_path")


def words(allowed: set[int], vocab: int) -> torch.Tensor:
    """A bitmask row (int32 words, as xgrammar fills them) allowing ``allowed``."""
    row = []
    for start in range(0, vocab, 32):
        word = sum(1 << (t - start) for t in allowed if start <= t < start + 32)
        row.append(word - (1 << 32) if word >= 1 << 31 else word)
    return torch.tensor(row, dtype=torch.int32)


def argmax(module, logits: torch.Tensor, allowed: set[int], k: int = 8) -> int:
    values, ids = logits.topk(k)
    return module.masked_argmax(words(allowed, logits.numel()), values.tolist(), ids.tolist(), logits.unsqueeze(0), 0)


def reference(logits: torch.Tensor, allowed: set[int]) -> int:
    masked = torch.full_like(logits, float("-inf"))
    masked[sorted(allowed)] = logits[sorted(allowed)]
    return int(masked.argmax())


@pytest.mark.parametrize("seed", range(20))
def test_the_masked_argmax_is_torchs_over_the_masked_row(seed: int) -> None:
    module = path()
    generator = torch.Generator().manual_seed(seed)
    vocab = 70  # a row past two bitmask words
    logits = (torch.randn(vocab, generator=generator) * 2).round() / 2  # ties
    allowed = set(torch.randperm(vocab, generator=generator)[: 1 + seed * 3].tolist())
    assert argmax(module, logits, allowed) == reference(logits, allowed)


def test_a_tie_past_the_top_k_and_no_allowed_token_in_it_take_the_whole_row() -> None:
    module = path()
    flat = torch.zeros(40)
    assert argmax(module, flat, {0, 3, 39}) == 0  # torch's top-8 of 40 equal scores need not hold id 0
    peaked = torch.arange(40, dtype=torch.float32)
    assert argmax(module, peaked, {2, 5}) == 5  # the top-8 are ids 32-39, all masked


def test_columns_past_the_bitmask_stay_unmasked_as_its_apply_leaves_them() -> None:
    module = path()
    logits = torch.zeros(40)
    logits[35] = 1.0
    values, ids = logits.topk(8)
    assert module.masked_argmax(words({1}, 32), values.tolist(), ids.tolist(), logits.unsqueeze(0), 0) == 35


def test_only_greedy_batches_without_penalties_or_bias_take_the_path_mask() -> None:
    module = path()
    greedy = types.SimpleNamespace(is_all_greedy=True)
    assert module.path_mask_applies(greedy)
    assert not module.path_mask_applies(types.SimpleNamespace(is_all_greedy=False))
    for name in module.PRE_MASK_ADJUSTMENTS:
        assert not module.path_mask_applies(types.SimpleNamespace(is_all_greedy=True, **{name: torch.zeros(1)}))


def test_the_path_bitmask_masks_its_rows_only_as_a_whole_bitmask_masks_them() -> None:
    module = path()
    vocab, nodes = 70, 6
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(nodes, vocab, generator=generator)
    allowed = {2: {1, 40, 69}, 4: {0}}
    rows = sorted(allowed)

    def apply_vocab_mask(logits, vocab_mask):  # xgrammar's apply: a clear bit masks a column
        bits = (vocab_mask.to(torch.int64).unsqueeze(-1) >> torch.arange(32)) & 1
        logits[bits.flatten(1)[:, : logits.shape[-1]] == 0] = float("-inf")

    grammar = types.SimpleNamespace(apply_vocab_mask=apply_vocab_mask)
    mask = module.PathGrammarMask(grammar, torch.stack([words(allowed[r], vocab) for r in rows]), torch.tensor(rows))
    masked = logits.clone()
    mask.to("cpu").apply(masked)
    for row in range(nodes):
        if row in allowed:
            assert masked[row].argmax() == reference(logits[row], allowed[row])
            assert torch.isinf(masked[row]).sum() == vocab - len(allowed[row])
        else:
            assert torch.equal(masked[row], logits[row])


class RowGrammar:
    """A grammar whose bitmask row for fill k allows token k only; ``layout`` its mask's dtype."""

    def __init__(self, layout=torch.int32):
        self.layout, self.fills = layout, 0

    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=self.layout)

    def fill_vocab_mask(self, vocab_mask, idx):
        vocab_mask[idx] = words({self.fills}, 32 * vocab_mask.shape[1])
        self.fills += 1


def test_the_path_rows_grow_past_their_first_allocation_and_keep_what_was_filled(monkeypatch) -> None:
    module = path()
    monkeypatch.setattr(module, "PATH_ROWS_PER_REQUEST", 2)
    grammar = RowGrammar()
    rows = module.PathRows.allocate([types.SimpleNamespace(grammar=grammar)], 70)
    assert rows.vocab_mask.shape == (2, 3)
    for row in (0, 3, 4, 9, 11):
        rows.fill(grammar, row)
    mask = rows.mask()
    assert mask.rows.tolist() == [0, 3, 4, 9, 11] and mask.vocab_mask.shape == (5, 3)
    for k in range(5):
        assert torch.equal(mask.vocab_mask[k], words({k}, 96))


def test_batches_without_a_grammar_or_with_a_boolean_mask_take_sglangs_walk() -> None:
    module = path()
    plain = types.SimpleNamespace(grammar=None)
    assert module.PathRows.allocate([plain, plain], 70) is None
    outlines_like = types.SimpleNamespace(grammar=RowGrammar(layout=torch.bool))
    assert module.PathRows.allocate([plain, outlines_like], 70) is None
    rows = module.PathRows.allocate([plain, types.SimpleNamespace(grammar=RowGrammar())], 70)
    assert rows.vocab_mask.shape == (module.PATH_ROWS_PER_REQUEST, 3) and rows.mask() is None
