"""Target-only, DFlash (linear), DDTree (tree) and EAGLE-3 (chain) decoding, batch 1, one
function per algorithm.

Each speculative round, in the glossary of `tree.py` (root = bonus token b, start = committed
length = position of b):

    draft:   h = drafter([b, MASK x L] at start..start+L, context = committed target features)
             q_i = softmax(lm_head(h_i)), i = 1..L                 (L = block_size - 1)
    verify:  one target forward over the proposal; the target picks its own token y(u) at every
             proposed node u (argmax at T=0, one sample from softmax(z/T) per node at T>0)
    accept:  walk from the root: move to the child whose token equals y(current node), stop when
             none does; the last y is the next bonus. Every committed token is the target's own
             choice under exactly its committed context, so the output distribution is the
             target's at any T (lossless); accept length = accepted drafts + 1.
    commit:  target KV of the accepted path moves to slots start.. (tree: compacted), a hybrid
             target's recurrent state becomes the one after the last accepted node, the target
             features of the accepted nodes (root included) become the drafter's new context;
             the drafter's cache holds context only (the block's K/V are never stored).

DFlash is the chain special case: proposal = [b, argmax q_1, ..., argmax q_L] (greedy drafts at
every T, as `dflash.py` of the reference does), causal mask. DDTree proposes the best-first tree
of `tree.build_ddtree_tree` with an ancestor-only mask and positions start + depth.

EAGLE-3 proposes a chain [b, d_1, ..., d_n] (SGLang's `speculative_num_steps` n, topk 1): a
draft extend over the tokens committed since the last round (entry j = token x_{j+1} with the
target features of position j) gives d_1 at position start - 1; step i feeds (d_i, the
drafter's own hidden of the step before) at position start + i - 1 and gives d_{i+1}. Verify,
accept and commit as DFlash's chain; the drafter's cache keeps the extend entries, and the
steps' entries are overwritten by the next extend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .eagle3 import Eagle3Draft
from .hybrid import Qwen35Target
from .hybrid_cache import HybridCache
from .model import DFlashDraft, KVCache, Qwen3Target
from .tree import (
    DDTreeDraft,
    ancestor_mask,
    build_ddtree_tree,
    follow_verified_tree,
    tree_positions,
)

Target = Qwen3Target | Qwen35Target  # same forward signature; the hybrid's cache also commits
Cache = KVCache | HybridCache  # recurrent state on `compact`


@dataclass(frozen=True)
class RoundTree:
    tokens: tuple[int, ...]  # [N] verified proposal, root first
    parents: tuple[int, ...]  # [N]
    depths: tuple[int, ...]  # [N]
    accepted: tuple[int, ...]  # accepted node indices, root first


@dataclass(frozen=True)
class DecodeResult:
    algo: str  # "ar" | "dflash" | "ddtree" | "eagle3"
    prompt_len: int
    tokens: tuple[int, ...]  # generated tokens, at most max_new_tokens
    accept_lens: tuple[int, ...]  # per verify round, bonus included (empty for "ar")
    margins: tuple[float, ...]  # "ar" only: target top1 - top2 logit gap at each generated step
    trees: tuple[RoundTree, ...] | None  # per round, when asked for
    seconds: float  # wall time of the whole call, prefill included


def choose(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> list[int]:
    """logits: [N, V] fp32 -> the target's token at each of the N rows (model/utils.py:sample)."""
    if temperature < 1e-5:
        return logits.argmax(dim=-1).tolist()
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).view(-1).tolist()


def top2_gap(logits: torch.Tensor) -> float:
    top = torch.topk(logits.float(), 2, dim=-1).values
    return float(top[..., 0] - top[..., 1])


def _finish(
    tokens: list[int], max_new: int, stop_token: int | None
) -> tuple[tuple[int, ...], bool]:
    out = tokens[:max_new]
    if stop_token is not None and stop_token in out:
        return tuple(out[: out.index(stop_token) + 1]), True
    return tuple(out), len(out) >= max_new


def _prefill(target: Target, prompt: list[int], cache: Cache, capture: tuple[int, ...]):
    ids = torch.tensor([prompt], device=target.lm_head.weight.device)
    pos = torch.arange(len(prompt), device=ids.device).unsqueeze(0)
    return target(ids, pos, cache=cache, capture=capture)


def _verify_chain(target, cache, chain: list[int], start: int, capture, temperature, generator, dev):
    """One target forward over a drafted chain [root, d_1, ...] at ``start``: d_{k+1} is kept
    while it equals the target's y_k. Returns how many drafts were kept, y and the kept
    positions' captured features, with the accepted prefix compacted into ``cache``."""
    ids = torch.tensor([chain], device=dev)
    pos = start + torch.arange(len(chain), device=dev).unsqueeze(0)
    out = target(ids, pos, cache=cache, cache_start=start, capture=capture)  # causal chain
    y = choose(out.logits[0], temperature, generator)  # y_k = target's token after chain[:k+1]
    acc = 0
    while acc < len(chain) - 1 and chain[acc + 1] == y[acc]:
        acc += 1
    cache.compact(start, list(range(acc + 1)))  # the accepted prefix (in place for KV)
    return acc, y, out.aux[:, : acc + 1]


@torch.inference_mode()
def generate_ar(
    target: Target,
    prompt: list[int],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    stop_token: int | None = None,
) -> DecodeResult:
    t0 = time.perf_counter()
    cache = target.new_cache(1, len(prompt) + max_new_tokens + 1)
    logits = _prefill(target, prompt, cache, ()).logits[0, -1:]
    tokens: list[int] = []
    margins: list[float] = []
    dev = logits.device
    while True:
        margins.append(top2_gap(logits[0]))
        tokens += choose(logits, temperature, generator)
        out, done = _finish(tokens, max_new_tokens, stop_token)
        if done:
            break
        p = len(prompt) + len(tokens) - 1
        step = torch.tensor([[tokens[-1]]], device=dev)
        logits = target(step, torch.tensor([[p]], device=dev), cache=cache, cache_start=p).logits[0]
    return DecodeResult(
        algo="ar",
        prompt_len=len(prompt),
        tokens=out,
        accept_lens=(),
        margins=tuple(margins[: len(out)]),
        trees=None,
        seconds=time.perf_counter() - t0,
    )


def draft_block_logits(
    target: Target,
    draft: DFlashDraft,
    cache: KVCache,
    *,
    root: int,
    start: int,
    ctx_aux: torch.Tensor,
    ctx_start: int,
) -> torch.Tensor:
    """One drafter pass for the block [root, MASK x L] at positions start..start+L.
    ctx_aux: [1, C, K*H] features of the tokens at positions ctx_start..start-1 (not yet in the
    drafter cache). Returns [L, V] fp32 logits for block slots 1..L via the target's lm_head."""
    c, q = ctx_aux.shape[1], draft.cfg.block_size
    assert ctx_start + c == start, (ctx_start, c, start)
    dev = ctx_aux.device
    block = torch.full((1, q), draft.cfg.mask_token_id, dtype=torch.long, device=dev)
    block[0, 0] = root  # slot 0 = embed(bonus), never embed(MASK)
    h = draft(
        target.model.embed_tokens(block),
        start + torch.arange(q, device=dev).unsqueeze(0),
        cache=cache,
        ctx_aux=ctx_aux,
        ctx_positions=ctx_start + torch.arange(c, device=dev).unsqueeze(0),
        ctx_start=ctx_start,
    )
    return target.lm_head(h[0, 1:]).float()


@torch.inference_mode()
def generate_dflash(
    target: Target,
    draft: DFlashDraft,
    prompt: list[int],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    stop_token: int | None = None,
    record_trees: bool = False,
) -> DecodeResult:
    t0 = time.perf_counter()
    q, ids_k = draft.cfg.block_size, draft.cfg.target_layer_ids
    max_len = len(prompt) + max_new_tokens + q + 1
    tcache, dcache = target.new_cache(1, max_len), draft.new_cache(1, max_len)
    out = _prefill(target, prompt, tcache, ids_k)
    root = choose(out.logits[0, -1:], temperature, generator)[0]
    tokens, accept_lens, trees = [root], [], []
    ctx_aux, ctx_start, start = out.aux, 0, len(prompt)
    dev = out.logits.device
    while not _finish(tokens, max_new_tokens, stop_token)[1]:
        dl = draft_block_logits(
            target, draft, dcache, root=root, start=start, ctx_aux=ctx_aux, ctx_start=ctx_start
        )
        block = [root, *dl.argmax(dim=-1).tolist()]  # greedy drafts d_1..d_L
        acc, y, kept_aux = _verify_chain(target, tcache, block, start, ids_k, temperature, generator, dev)
        tokens += [*block[1 : acc + 1], y[acc]]
        accept_lens.append(acc + 1)
        if record_trees:
            trees.append(
                RoundTree(tuple(block), (-1, *range(q - 1)), tuple(range(q)), tuple(range(acc + 1)))
            )
        ctx_aux, ctx_start = kept_aux, start
        start, root = start + acc + 1, y[acc]
    final, _ = _finish(tokens, max_new_tokens, stop_token)
    return DecodeResult(
        algo="dflash",
        prompt_len=len(prompt),
        tokens=final,
        accept_lens=tuple(accept_lens),
        margins=(),
        trees=tuple(trees) if record_trees else None,
        seconds=time.perf_counter() - t0,
    )


def verify_tree(
    target: Target, tree: DDTreeDraft, cache: Cache, *, start: int, capture: tuple[int, ...]
):
    """Target forward over the whole tree: node i at position start + depth(i), seeing the
    committed prefix and its own ancestors only. K/V land in slots start..start+N-1."""
    n = tree.num_nodes
    dev = target.lm_head.weight.device
    mask = torch.ones(1, 1, n, start + n, dtype=torch.bool, device=dev)
    mask[0, 0, :, start:] = ancestor_mask(tree).to(dev)
    ids = torch.tensor([tree.tokens], device=dev)
    pos = tree_positions(tree, start).to(dev).unsqueeze(0)
    return target(ids, pos, cache=cache, cache_start=start, mask=mask, capture=capture)


@torch.inference_mode()
def generate_ddtree(
    target: Target,
    draft: DFlashDraft,
    prompt: list[int],
    *,
    budget: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    stop_token: int | None = None,
    record_trees: bool = False,
) -> DecodeResult:
    t0 = time.perf_counter()
    ids_k = draft.cfg.target_layer_ids
    max_len = len(prompt) + max_new_tokens + max(budget, draft.cfg.block_size) + 2
    tcache, dcache = target.new_cache(1, max_len), draft.new_cache(1, max_len)
    out = _prefill(target, prompt, tcache, ids_k)
    root = choose(out.logits[0, -1:], temperature, generator)[0]
    tokens, accept_lens, trees = [root], [], []
    ctx_aux, ctx_start, start = out.aux, 0, len(prompt)
    while not _finish(tokens, max_new_tokens, stop_token)[1]:
        dl = draft_block_logits(
            target, draft, dcache, root=root, start=start, ctx_aux=ctx_aux, ctx_start=ctx_start
        )
        tree = build_ddtree_tree(dl, budget, root)  # top-B prefixes of prod_i q_i
        out = verify_tree(target, tree, tcache, start=start, capture=ids_k)
        y = choose(out.logits[0], temperature, generator)  # y(u): target's token after node u
        acc = follow_verified_tree(tree, y)  # walk: child with token y(cur), until none
        path = list(acc.path)
        tokens += [*(tree.tokens[i] for i in path[1:]), acc.next_token]
        accept_lens.append(len(path))
        if record_trees:
            trees.append(RoundTree(tree.tokens, tree.parents, tree.depths, acc.path))
        tcache.compact(start, path)  # accepted nodes' K/V -> slots start..start+len(path)-1
        ctx_aux, ctx_start = out.aux[:, path], start
        start, root = start + len(path), acc.next_token
    final, _ = _finish(tokens, max_new_tokens, stop_token)
    return DecodeResult(
        algo="ddtree",
        prompt_len=len(prompt),
        tokens=final,
        accept_lens=tuple(accept_lens),
        margins=(),
        trees=tuple(trees) if record_trees else None,
        seconds=time.perf_counter() - t0,
    )


def draft_eagle3_chain(
    target: Target,
    draft: Eagle3Draft,
    cache: KVCache,
    *,
    ctx_tokens: list[int],
    ctx_aux: torch.Tensor,
    ctx_start: int,
    num_steps: int,
) -> list[int]:
    """Greedy drafts d_1..d_num_steps of one EAGLE-3 round.

    ctx_tokens: the C tokens at positions ctx_start+1 .. ctx_start+C (the last is the root);
    ctx_aux: [1, C, K*H] target features at positions ctx_start .. ctx_start+C-1."""
    c = ctx_aux.shape[1]
    assert len(ctx_tokens) == c, (len(ctx_tokens), c)
    dev = ctx_aux.device
    emb = target.model.embed_tokens(torch.tensor([ctx_tokens], device=dev))
    positions = ctx_start + torch.arange(c, device=dev).unsqueeze(0)
    hidden = draft(
        emb, draft.project_target_hidden(ctx_aux), positions, cache=cache, cache_start=ctx_start
    )[:, -1:]
    drafts = [int(draft.logits(hidden)[0, -1].argmax())]
    for p in range(ctx_start + c, ctx_start + c + num_steps - 1):
        emb = target.model.embed_tokens(torch.tensor([[drafts[-1]]], device=dev))
        hidden = draft(emb, hidden, torch.tensor([[p]], device=dev), cache=cache, cache_start=p)
        drafts.append(int(draft.logits(hidden)[0, -1].argmax()))
    return drafts


@torch.inference_mode()
def generate_eagle3(
    target: Target,
    draft: Eagle3Draft,
    prompt: list[int],
    *,
    max_new_tokens: int,
    num_steps: int = 3,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    stop_token: int | None = None,
) -> DecodeResult:
    t0 = time.perf_counter()
    ids_k, n = draft.cfg.aux_layer_ids, num_steps + 1
    max_len = len(prompt) + max_new_tokens + n + 1
    tcache, dcache = target.new_cache(1, max_len), draft.new_cache(1, max_len)
    out = _prefill(target, prompt, tcache, ids_k)
    root = choose(out.logits[0, -1:], temperature, generator)[0]
    seq, tokens, accept_lens = [*prompt, root], [root], []
    ctx_aux, ctx_start, start = out.aux, 0, len(prompt)
    dev = out.logits.device
    while not _finish(tokens, max_new_tokens, stop_token)[1]:
        drafts = draft_eagle3_chain(
            target,
            draft,
            dcache,
            ctx_tokens=seq[ctx_start + 1 : start + 1],
            ctx_aux=ctx_aux,
            ctx_start=ctx_start,
            num_steps=num_steps,
        )
        chain = [root, *drafts]
        acc, y, kept_aux = _verify_chain(target, tcache, chain, start, ids_k, temperature, generator, dev)
        committed = [*chain[1 : acc + 1], y[acc]]
        tokens += committed
        seq += committed
        accept_lens.append(acc + 1)
        ctx_aux, ctx_start = kept_aux, start
        start, root = start + acc + 1, y[acc]
    final, _ = _finish(tokens, max_new_tokens, stop_token)
    return DecodeResult(
        algo="eagle3",
        prompt_len=len(prompt),
        tokens=final,
        accept_lens=tuple(accept_lens),
        margins=(),
        trees=None,
        seconds=time.perf_counter() - t0,
    )
