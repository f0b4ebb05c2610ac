"""DDTREE's grammar bitmask along the greedy accept path only (SGLANG_DDTREE_GRAMMAR_MASK=path).

SGLang's walk (spec_utils.generate_token_bitmask) fills a bitmask row for every node of a
verify tree the grammar allows, before the target's logits exist: B + 1 full-vocabulary fills
per constrained request and round (0.17-0.24 ms per node at a 152k vocabulary on a 2-core CPU
host, 2026-12-05, where this fills the 8 rows of a 7-token accept in 1.3-1.6 ms at any B up to
256). A greedy tree accept reads only the rows on the path it takes: from the
root, the masked argmax of a node's row names the child it moves to. So once the verify's
logits exist, this walks that path itself and fills only its rows, each from the grammar state
SGLang's walk fills it from; every other row stays unmasked, where the accept never looks. The
bitmask holds only those rows (PathGrammarMask), so its allocation, its copy to the GPU and its
apply follow the paths' length, not the tree's B + 1 rows per request.
A row's masked argmax comes from its top-k on the host, or from the whole row where the top-k
cannot decide it (no allowed token among them, or a tie that may reach past them): the lowest
id among the allowed maxima, as torch.argmax picks.

Only for greedy batches without penalties or logit bias (eagle_sample adds those to the logits
before the mask, and a sampled accept draws its path on the GPU) whose grammar backend writes
xgrammar's bitmask layout (xgrammar, llguidance; not outlines); others take SGLang's walk.
This walk waits for the verify to finish, where SGLang's overlaps it.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional

import torch

TOP_K = 8
# Bitmask rows allocated per constrained request before its path is known: a DFlash block of
# 16 bounds the path (the root and 15 drafted depths); a longer block grows the bitmask.
PATH_ROWS_PER_REQUEST = 16
# What eagle_sample adds to the verify logits before the grammar mask (sampling_info fields).
PRE_MASK_ADJUSTMENTS = ("acc_additive_penalties", "acc_scaling_penalties", "logit_bias")


def path_mask_applies(sampling_info) -> bool:
    return bool(sampling_info.is_all_greedy) and all(
        getattr(sampling_info, name, None) is None for name in PRE_MASK_ADJUSTMENTS
    )


class PathGrammarMask(NamedTuple):
    """Bitmask rows for some verify rows only (``rows``), and one of the batch's grammars (the
    handle that applies a bitmask); ``apply`` masks those rows of the logits, as SGLang's
    GrammarMask.apply masks every row."""

    grammar: object
    vocab_mask: torch.Tensor
    rows: torch.Tensor

    def apply(self, logits: torch.Tensor) -> None:
        masked = logits.index_select(0, self.rows)
        self.grammar.apply_vocab_mask(logits=masked, vocab_mask=self.vocab_mask)
        logits.index_copy_(0, self.rows, masked)

    def to(self, device) -> "PathGrammarMask":
        return PathGrammarMask(
            self.grammar, self.vocab_mask.to(device, non_blocking=True), self.rows.to(device, non_blocking=True)
        )


class PathRows:
    """The host bitmask the accept paths fill, one row at a time, from the batch's grammar's
    own allocator (xgrammar pins it, so the copy to the GPU does not block); it grows where
    the paths outrun it."""

    def __init__(self, grammar, vocab_mask: torch.Tensor, vocab_size: int):
        self.grammar, self.vocab_mask, self.vocab_size = grammar, vocab_mask, vocab_size
        self.rows: List[int] = []

    @classmethod
    def allocate(cls, reqs, vocab_size: int) -> Optional["PathRows"]:
        """None where no request has a grammar, or where its bitmask is not xgrammar's layout
        (int32 words, a set bit allowing its token; llguidance's is too, outlines' boolean mask
        is not): those batches take SGLang's walk."""
        grammars = [req.grammar for req in reqs if req.grammar is not None]
        if not grammars:
            return None
        capacity = len(grammars) * PATH_ROWS_PER_REQUEST
        vocab_mask = grammars[0].allocate_vocab_mask(vocab_size=vocab_size, batch_size=capacity, device="cpu")
        if not isinstance(vocab_mask, torch.Tensor) or vocab_mask.dtype != torch.int32:
            return None
        return cls(grammars[0], vocab_mask, vocab_size)

    def fill(self, grammar, row: int) -> torch.Tensor:
        """The grammar's bitmask row for verify row ``row``."""
        filled = len(self.rows)
        if filled == len(self.vocab_mask):
            grown = self.grammar.allocate_vocab_mask(vocab_size=self.vocab_size, batch_size=2 * filled, device="cpu")
            grown[:filled] = self.vocab_mask
            self.vocab_mask = grown
        grammar.fill_vocab_mask(self.vocab_mask, filled)
        self.rows.append(row)
        return self.vocab_mask[filled]

    def mask(self) -> Optional[PathGrammarMask]:
        if not self.rows:
            return None
        return PathGrammarMask(self.grammar, self.vocab_mask[: len(self.rows)], torch.tensor(self.rows, dtype=torch.long))


def path_grammar_mask(reqs, tree, logits: torch.Tensor, rows: PathRows, barrier) -> Optional[PathGrammarMask]:
    """The host bitmask of each constrained request's greedy accept path, filled into ``rows``
    (None where no row is filled: every grammar has terminated). ``barrier`` first advances
    each grammar over the previous round's tokens, where the scheduler hands one."""
    if barrier is not None:
        barrier()
    next_token, next_sibling, draft = (t.tolist() for t in tree.resolve())
    nodes = len(draft[0])
    top = logits.topk(min(TOP_K, logits.shape[-1]), dim=-1)
    # Rows are read as the paths reach them; values and token ids reach the host in one copy
    # (both exact in fp64).
    packed = torch.cat([top.values.double(), top.indices.double()], dim=-1).cpu()
    top_values, top_ids = packed.chunk(2, dim=-1)
    top_ids = top_ids.long()
    for i, req in enumerate(reqs):
        grammar = req.grammar
        if grammar is None:
            continue
        node, accepted = 0, 0
        while not grammar.is_terminated():
            row = i * nodes + node
            token = masked_argmax(rows.fill(grammar, row), top_values[row].tolist(), top_ids[row].tolist(), logits, row)
            child = next_token[i][node]
            while child != -1 and draft[i][child] != token:
                child = next_sibling[i][child]
            if child == -1:
                break
            grammar.accept_token(token)
            accepted += 1
            node = child
        if accepted:
            grammar.rollback(accepted)
    return rows.mask()


def masked_argmax(mask_row: torch.Tensor, values: List[float], ids: List[int], logits: torch.Tensor, row: int) -> int:
    """torch.argmax of ``logits[row]`` with the bitmask row ``mask_row`` (int32 words) applied
    (columns past the bitmask unmasked, as its apply leaves them), from the row's top-k where
    that decides it. Only the top-k's words are read there: a whole row as a list took 89 us
    at a 152k vocabulary, against the fill's 145 (a 2-core CPU host, 2026-12-05)."""
    width = 32 * mask_row.numel()
    inside = [token for token in ids if token < width]
    words = mask_row[torch.tensor([token >> 5 for token in inside], dtype=torch.long)].tolist() if inside else []
    word_of = dict(zip(inside, words))
    allowed = [
        (value, token) for value, token in zip(values, ids)
        if token >= width or (word_of[token] >> (token & 31)) & 1 == 1
    ]
    if allowed and allowed[0][0] > values[-1]:
        best = allowed[0][0]
        return min(token for value, token in allowed if value == best)
    full = logits[row].float().cpu()
    width = min(full.numel(), width)
    bits = (mask_row.to(torch.int64).unsqueeze(1) >> torch.arange(32)) & 1
    full[:width][bits.flatten()[:width] == 0] = float("-inf")
    return int(full.argmax())
