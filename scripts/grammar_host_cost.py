"""The host time SGLang's grammar bitmask takes over one request's DDTREE verify tree, per budget.

    PYTHONPATH=SGLANG_SOURCE python scripts/grammar_host_cost.py [--vocab 151936]
        [--budgets 15,32,64,128,256] [--accepted 3,7] [--repeats 20] [--json OUT]

A grammar batch's round builds, per constrained request, a token bitmask row for every tree
node the grammar accepts (SGLang's ``generate_token_bitmask``: a depth-first walk that accepts
each node's token, fills the row after it and rolls back), all on the host. The worker starts it
after the verify forward is launched, so it is hidden while it is shorter than the verify; past
that, every grammar round waits on it. This times that walk with the release's own code and a
real xgrammar matcher over trees the offline reference builds at each budget, for a synthetic
vocabulary of ``--vocab`` tokens (byte tokens, every number below 1000, and random ASCII pieces)
and a drafter whose top tokens the grammar allows at every depth, so every node is filled: the
worst case, and the usual one for a drafter that writes what the target writes. Two grammars: a
JSON object whose string value is being written, and a digits regex.

Beside it, the path mask (``SGLANG_DDTREE_GRAMMAR_MASK=path``, the payload's
``ddtree_grammar_path``) over the same tree, for target logits whose greedy accept takes
``--accepted`` nodes down the tree: it fills only the rows on that path, once the verify's logits
exist, so it is not hidden behind the verify. Its time leaves out the logits' top-k, which an
engine takes on the GPU.

Needs an interpreter that imports sglang 0.5.17 or later and xgrammar (on a CPU, the release
matrix's: its pins env with the release's sources on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEPTHS = 15  # the drafter's block of 16 less its root
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
JSON_PREFIX = '{"answer": "'
DIGITS_REGEX = r"[0-9]{1,200}(,[0-9]{1,200})*;"
PIECE_CHARS = string.ascii_letters + string.digits + " .,:;()[]{}=+-*/_'\"!?#\n"


def vocabulary(size: int, seed: int = 0) -> list[str]:
    """Byte tokens, every number below 1000, then distinct random ASCII pieces up to ``size``."""
    rng = random.Random(seed)
    vocab = [chr(b) for b in range(32, 127)] + [str(n) for n in range(10, 1000)]
    seen = set(vocab)
    while len(vocab) < size - 1:
        piece = ("" if rng.random() < 0.5 else " ") + "".join(rng.choices(PIECE_CHARS, k=rng.randint(2, 10)))
        if piece not in seen:
            seen.add(piece)
            vocab.append(piece)
    return [*vocab, "</s>"]


def tree_links(parents):
    """SGLang's left-child / right-sibling links of a tree given by its parents (root -1)."""
    first_child = [-1] * len(parents)
    next_sibling = [-1] * len(parents)
    last_child: dict[int, int] = {}
    for node, parent in enumerate(parents):
        if parent < 0:
            continue
        if parent in last_child:
            next_sibling[last_child[parent]] = node
        else:
            first_child[parent] = node
        last_child[parent] = node
    return first_child, next_sibling


def draft_tree(vocab_size: int, allowed: list[int], budget: int, seed: int):
    """The reference builder's tree at ``budget`` over a drafter whose likely tokens, at every
    depth, are ``allowed`` ones, one of them confident (about 3 in 4 of the depth's mass at a
    152k vocabulary): a chain through the block with the rest of the budget branching off it."""
    import torch

    from ddtree_overlay.reference.tree import build_ddtree_tree

    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(DEPTHS, vocab_size, generator=generator)
    logits[:, allowed] += 20.0
    confident = torch.randint(len(allowed), (DEPTHS,), generator=generator)
    logits[torch.arange(DEPTHS), torch.tensor(allowed)[confident]] += 12.0
    return build_ddtree_tree(logits, budget, root_token=allowed[0])


def matcher_grammar(compiled, vocab_size: int, prefix_tokens: list[int]):
    """SGLang's xgrammar grammar object on the CPU, its matcher past ``prefix_tokens``."""
    import xgrammar as xgr
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar

    class CpuGrammar(XGrammarGrammar):  # the release's bitmask is pinned memory, a GPU's
        allocate_vocab_mask = staticmethod(lambda vocab_size, batch_size, device: xgr.allocate_token_bitmask(batch_size, vocab_size))

    grammar = CpuGrammar(xgr.GrammarMatcher(compiled, max_rollback_tokens=64), vocab_size, compiled, None)
    for token in prefix_tokens:
        grammar.accept_token(token)
    return grammar


def time_walk(grammar, tree, vocab_size: int, repeats: int) -> tuple[float, int]:
    """Median ms of SGLang's bitmask walk over ``tree`` for one request, and the rows it filled."""
    from sglang.srt.speculative.spec_utils import generate_token_bitmask

    links = _Tree(tree).resolve()
    request = type("Req", (), {"grammar": grammar})()
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        mask, _ = generate_token_bitmask([request], *links, vocab_size)
        times.append(time.perf_counter() - started)
    filled = int((mask != -1).any(dim=-1).sum()) if mask is not None else 0
    return 1000 * statistics.median(times[1:]), filled


def path_logits(tree, allowed: list[int], vocab_size: int, accepted: int):
    """[nodes, vocab] target logits whose greedy path takes ``accepted`` nodes down first
    children (fewer where the tree is shallower), then a grammatical token outside the tree."""
    import torch

    first_child = tree_links(tree.parents)[0]
    logits = torch.zeros(tree.num_nodes, vocab_size)
    node = 0
    for _ in range(accepted):
        if first_child[node] < 0:
            break
        logits[node, tree.tokens[first_child[node]]] = 10.0
        node = first_child[node]
    children = {tree.tokens[c] for c, parent in enumerate(tree.parents) if parent == node}
    logits[node, next(t for t in allowed if t not in children)] = 10.0
    return logits


class _Tree:
    """A one-request tree as the worker hands it to the path mask (``resolve()``: first child,
    next sibling, token, each [1, nodes])."""

    def __init__(self, tree):
        import torch

        first_child, next_sibling = tree_links(tree.parents)
        self.links = torch.tensor([first_child]), torch.tensor([next_sibling]), torch.tensor([list(tree.tokens)])

    def resolve(self):
        return self.links


class _VerifyLogits:
    """The verify's logits as the path mask reads them, their top-k taken once beforehand: an
    engine takes it on the GPU, where this host's CPU would take most of the round over it."""

    def __init__(self, logits, k: int):
        self.logits, self.shape = logits, logits.shape
        self.top = logits.topk(k, dim=-1)

    def topk(self, k: int, dim: int = -1):
        return self.top

    def __getitem__(self, row):
        return self.logits[row]


def time_path(grammar, tree, logits, vocab_size: int, repeats: int) -> tuple[float, int]:
    """Median ms of the path mask for one request (the logits' top-k not included), and the
    rows it filled."""
    from ddtree_overlay.bench.payload_modules import load_payload_module

    path = load_payload_module("sglang.srt.speculative.ddtree_grammar_path")
    request = type("Req", (), {"grammar": grammar})()
    verify_logits, links = _VerifyLogits(logits, path.TOP_K), _Tree(tree)
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        rows = path.PathRows.allocate([request], vocab_size)
        mask = path.path_grammar_mask([request], links, verify_logits, rows, None)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times[1:]), len(mask.rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151936, help="vocabulary size (Qwen3's by default)")
    ap.add_argument("--budgets", default="15,32,64,128,256")
    ap.add_argument("--accepted", default="3,7", help="tree nodes the path mask's greedy accept takes")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args()
    import xgrammar as xgr

    vocab = vocabulary(args.vocab)
    index = {piece: i for i, piece in enumerate(vocab)}
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1]))
    words = [i for i, piece in enumerate(vocab) if piece.strip(" ").isalpha() and piece.islower()]
    digits = [i for i, piece in enumerate(vocab) if piece.isdigit()]
    cases = {
        "json string": (compiler.compile_json_schema(JSON_SCHEMA), [index[c] for c in JSON_PREFIX], words),
        "digits regex": (compiler.compile_regex(DIGITS_REGEX), [], digits),
    }
    rows = []
    print(f"vocabulary {len(vocab)}; median of {args.repeats} walks, one request; every node filled where the grammar allows it")
    accepted_counts = [int(a) for a in args.accepted.split(",")]
    path_columns = "".join(f" path mask, {a} accepted: ms (rows) |" for a in accepted_counts)
    print(f"| grammar | budget | nodes | rows filled | ms per request and round | µs per row |{path_columns}")
    print("|---|---|---|---|---|---|" + "---|" * len(accepted_counts))
    for name, (compiled, prefix, allowed) in cases.items():
        for budget in (int(b) for b in args.budgets.split(",")):
            tree = draft_tree(len(vocab), allowed, budget, seed=budget)
            grammar = matcher_grammar(compiled, len(vocab), prefix)
            ms, filled = time_walk(grammar, tree, len(vocab), args.repeats)
            row = {"grammar": name, "budget": budget, "nodes": tree.num_nodes, "filled": filled, "ms": round(ms, 3),
                   "us_per_row": round(1000 * ms / max(filled, 1), 1), "path": {}}
            for accepted in accepted_counts:
                logits = path_logits(tree, allowed, len(vocab), accepted)
                path_ms, path_filled = time_path(grammar, tree, logits, len(vocab), args.repeats)
                row["path"][str(accepted)] = {"ms": round(path_ms, 3), "filled": path_filled}
            rows.append(row)
            path_cells = "".join(f" {v['ms']} ({v['filled']}) |" for v in row["path"].values())
            print(f"| {name} | {budget} | {row['nodes']} | {filled} | {row['ms']} | {row['us_per_row']} |{path_cells}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"vocab": len(vocab), "repeats": args.repeats, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
