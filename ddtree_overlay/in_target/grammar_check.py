"""Loaded by matrix_checks.py in a matrix scratch env: grammar-constrained batches through the
release's compat shim, on DDTREE's own verify trees (the payload's tree builder and verify-input
writer), with real xgrammar regex grammars and the release's own bitmask code.

Up to 0.5.16 DFlash's request check refuses such requests (the contract pins it) and a grammar
batch that got through stops the round. From 0.5.17:

* a narrow tree: the greedy walk of a target that agrees with the drafter accepts only what the
  grammar allows (unmasked it accepts a letter), every row on the walk the grammar's own mask
  after the path to it;
* the widest tree: a root with more children than Python's default recursion limit, which
  SGLang's bitmask walk recurses through one sibling at a time;
* under SGLANG_DDTREE_GRAMMAR_MASK=path (rows filled along the greedy accept path only): on the
  narrow tree, on random drafters and targets whose scores tie, on a flat target (every token
  tied, past the path mask's top-k: CPU torch's top-k of 16 equal scores leaves out ids 0-7),
  on wide-vocabulary rounds whose top-k holds no allowed token, and on a NaN logit that
  SGLANG_SANITIZE_NAN_LOGITS turns into -1e30 before eagle_sample's mask, the
  masked greedy walk accepts the nodes and tokens it accepts under SGLang's walk, its bitmask
  holds exactly the rows on that path, each equal to SGLang's, the grammar left where it was.
"""

import types

GRAMMAR_REGEX = r"[0-9]+(,[0-9]+)*;"
MARKS = [str(d) for d in range(10)] + [",", ";"]
STOP = "</s>"
NARROW_VOCAB = [*MARKS, "a", "b", "c", STOP]
# The drafter's top token per depth, then the runners-up: depth 1's top ("a") breaks the grammar.
NARROW_DRAFT = [{"2": 3.0, "a": 2.5, ",": 2.0}, {"a": 3.0, "3": 2.5, ",": 2.0}, {",": 3.0, "4": 2.5}, {"5": 3.0}]
# A drafter flat over 1213 tokens: B = 1100's nodes are all the root's children.
WIDE_VOCAB = [*MARKS, *(f"w{i}" for i in range(1200)), STOP]
WIDE_BUDGET = 1100
ROOT = "1"  # the previous round's bonus token, which the grammar has accepted
PATH_ROUNDS, WIDE_ROUNDS = 24, 4


def grammar_check():
    from sglang.srt.speculative import ddtree_compat as compat

    narrow = _round(NARROW_VOCAB, _scores(NARROW_VOCAB, NARROW_DRAFT), budget=10)
    if not compat.GRAMMAR_TREE:
        try:
            compat.grammar_tree(narrow.batch, narrow.verify_input)
        except ValueError:
            return []
        return ["a grammar batch went through a release whose tree verify applies no grammar"]
    problems = _walk_problems(narrow, "narrow tree")
    if all(NARROW_VOCAB[t] != "a" for _, t in _greedy_walk(narrow.target, narrow)):
        problems.append("narrow tree: the unmasked walk should accept the drafter's 'a'")
    import torch

    wide = _round(WIDE_VOCAB, torch.zeros(2, len(WIDE_VOCAB)), budget=WIDE_BUDGET)
    problems += _walk_problems(wide, f"a root with {WIDE_BUDGET} children")
    return problems + _path_mask_problems(narrow)


def _path_mask_problems(narrow):
    import os

    import torch

    problems = _same_walk(narrow, "narrow tree")
    generator = torch.Generator().manual_seed(0)

    def halves(*shape):  # scores in steps of 0.5: rows tie
        return (torch.randn(*shape, generator=generator) * 2).round() / 2

    for seed in range(PATH_ROUNDS):
        case = _round(NARROW_VOCAB, halves(4, len(NARROW_VOCAB)), budget=10)
        if seed % 2:
            case.target = halves(*case.target.shape)  # a target of its own: short paths, ties
        problems += _same_walk(case, f"random round {seed}")
    flat = _round(NARROW_VOCAB, halves(4, len(NARROW_VOCAB)), budget=10)
    flat.target = torch.zeros_like(flat.target)  # every token tied, past any top-k
    problems += _same_walk(flat, "a flat target")
    nan = _round(NARROW_VOCAB, _scores(NARROW_VOCAB, NARROW_DRAFT), budget=10)
    nan.target[0, NARROW_VOCAB.index("7")] = float("nan")  # at a token the grammar allows there
    before = os.environ.get("SGLANG_SANITIZE_NAN_LOGITS")
    os.environ["SGLANG_SANITIZE_NAN_LOGITS"] = "1"  # eagle_sample then reads it as -1e30
    try:
        problems += _same_walk(nan, "a NaN logit under SGLANG_SANITIZE_NAN_LOGITS=1")
    finally:
        if before is None:
            del os.environ["SGLANG_SANITIZE_NAN_LOGITS"]
        else:
            os.environ["SGLANG_SANITIZE_NAN_LOGITS"] = before
    for seed in range(WIDE_ROUNDS):  # the top-k holds no allowed token: whole rows decide
        case = _round(WIDE_VOCAB, torch.randn(3, len(WIDE_VOCAB), generator=generator), budget=24)
        case.target[:, : len(MARKS)] -= 3.0
        problems += _same_walk(case, f"wide round {seed}")
    return problems


def _same_walk(case, label):
    """The masked greedy walk under SGLang's bitmask and under the path mask: the same nodes and
    tokens, the path mask's rows exactly the nodes on the path and each equal to SGLang's, the
    grammar where it was."""
    import os

    grammar = case.batch.reqs[0].grammar
    before = list(grammar.accepted_tokens)
    walks = {}
    for mode in ("tree", "path"):
        os.environ["SGLANG_DDTREE_GRAMMAR_MASK"] = mode
        try:
            mask, logits = _masked(case)
            rows = mask.rows.tolist() if mode == "path" else range(len(mask.vocab_mask))
            walks[mode] = (dict(zip(rows, mask.vocab_mask, strict=True)), _greedy_walk(logits, case))
        finally:
            del os.environ["SGLANG_DDTREE_GRAMMAR_MASK"]
    (tree_rows, tree_walk), (path_rows, path_walk) = walks["tree"], walks["path"]
    problems = []
    if path_walk != tree_walk:
        problems.append(f"{label}: under the path mask the walk took {path_walk}, under SGLang's {tree_walk}")
    if sorted(path_rows) != sorted(node for node, _ in tree_walk):
        problems.append(f"{label}: the path mask filled rows {sorted(path_rows)} for the path {tree_walk}")
    elif any(not (path_rows[node] == tree_rows[node]).all() for node, _ in tree_walk):
        problems.append(f"{label}: a row on the path differs from SGLang's")
    if list(grammar.accepted_tokens) != before:
        problems.append(f"{label}: the path mask left the grammar moved")
    return problems


def _scores(vocab, rows):
    import torch

    scores = torch.full((len(rows), len(vocab)), -4.0)
    for depth, row in enumerate(rows):
        for token, score in row.items():
            scores[depth, vocab.index(token)] = score
    return scores


def _round(vocab, scores, *, budget):
    """One request's tree from the drafter's ``scores`` [depths, vocab], its verify input, a
    target that agrees with the drafter, and a batch whose grammar has accepted the root."""
    import torch
    import xgrammar as xgr
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar
    from sglang.srt.speculative import ddtree_utils
    from sglang.srt.speculative.ddtree_info import DDTreeVerifyInput

    depth_limit = int(scores.shape[0])
    draft = scores.unsqueeze(0)
    tree = ddtree_utils.build_ddtree_tree(ddtree_utils.compute_draft_topk(draft, min(budget, len(vocab))), budget)
    root = vocab.index(ROOT)
    buffers = ddtree_utils.tree_to_verify_buffers(tree, torch.tensor([root]), torch.tensor([0]), budget + 1, depth_limit)
    verify_input = DDTreeVerifyInput.from_tree(
        buffers=buffers, custom_mask=torch.ones(1, dtype=torch.bool), max_accept_width=depth_limit + 1
    )
    target = torch.stack([scores[min(d, depth_limit - 1)] for d in buffers.positions[0].tolist()])
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])).compile_regex(GRAMMAR_REGEX)

    class CpuGrammar(XGrammarGrammar):  # xgrammar's CPU bitmask and apply (0.5.17's are GPU-only)
        allocate_vocab_mask = staticmethod(lambda vocab_size, batch_size, device: xgr.allocate_token_bitmask(batch_size, vocab_size))
        apply_vocab_mask = staticmethod(lambda logits, vocab_mask: xgr.apply_token_bitmask_inplace(logits, vocab_mask))

    grammar = CpuGrammar(xgr.GrammarMatcher(compiled), len(vocab), compiled, None)
    grammar.accept_token(root)
    batch = types.SimpleNamespace(
        has_grammar=True,
        reqs=[types.SimpleNamespace(grammar=grammar)],
        sampling_info=types.SimpleNamespace(vocab_size=len(vocab), grammar_mask=None, is_all_greedy=True),
    )
    parents = [0, *tree.parent_indices[0].tolist()]  # N = B + 1: no padding nodes
    return types.SimpleNamespace(
        vocab=vocab, compiled=compiled, root=root, buffers=buffers, parents=parents, verify_input=verify_input,
        target=target, batch=batch,
    )


def _walk_problems(case, label):
    """The mask through the shim as the worker builds it, its greedy walk replayed on a fresh
    matcher: each row on the walk is the grammar's after the path, each token one it allows."""
    import xgrammar as xgr

    barrier_calls = []
    mask, logits = _masked(case, lambda: barrier_calls.append(1))
    problems = [] if barrier_calls == [1] else [f"{label}: the grammar barrier ran {len(barrier_calls)} times, not once"]
    replay = xgr.GrammarMatcher(case.compiled)
    replay.accept_token(case.root)
    row = xgr.allocate_token_bitmask(1, len(case.vocab))
    for node, token in _greedy_walk(logits, case):
        replay.fill_next_token_bitmask(row, 0)
        if not (mask.vocab_mask[node] == row[0]).all():
            problems.append(f"{label}: node {node}'s mask row is not the grammar's after its path")
        if not replay.accept_token(token):
            problems.append(f"{label}: the masked walk accepted {case.vocab[token]!r}, which the grammar forbids")
            break
    return problems


def _masked(case, barrier=None):
    """The round's mask as the worker builds it through the shim, and the target's logits with
    it applied."""
    from sglang.srt.speculative import ddtree_compat as compat
    from sglang.srt.utils.async_probe import sanitize_nan_logits

    logits = types.SimpleNamespace(next_token_logits=case.target.clone())
    mask = compat.grammar_mask(case.batch, compat.grammar_tree(case.batch, case.verify_input), logits, barrier)
    sanitize_nan_logits(logits.next_token_logits)  # eagle_sample's order: sanitised, then masked
    mask.apply(logits.next_token_logits)
    return mask, logits.next_token_logits


def _greedy_walk(logits, case):
    """(node, committed token) along the payload's greedy accept walk
    (`ddtree_utils.follow_verified_tree_cpu`, which its tests hold equal to SGLang's over the links)."""
    from sglang.srt.speculative import ddtree_utils

    predicted = logits.argmax(-1).tolist()
    path, _ = ddtree_utils.follow_verified_tree_cpu(case.buffers.draft_token[0].tolist(), case.parents, predicted)
    return [(node, predicted[node]) for node in path]
