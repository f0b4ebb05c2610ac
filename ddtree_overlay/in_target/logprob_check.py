"""Loaded by matrix_checks.py in a matrix scratch env: a return_logprob batch through the
release's compat shim, on DDTREE's own verify trees (the payload's tree builder and accept walk).

Up to 0.5.17 DFlash's request check refuses return_logprob requests (the contract pins it) and
a batch that got through stops the round. From 0.5.18, in the layout eagle_sample hands the
worker (``predict`` per verify row, ``accept_index`` [bs, accept width] of flat rows, -1 past
each request's accept length), every accepted token's logprob, top logprobs and chosen ids'
logprobs must be the target's log-softmax at the node it was accepted at, in the rows the
scheduler reads: request i's row, slot j for its j-th token.
"""

import types

VOCAB = 24
BUDGET = 12
DEPTH = 4  # the drafter's block less its root
TOP = 2  # request 0 asks for its top-2 logprobs
CHOSEN = [1, 5]  # request 1 asks for these ids' logprobs
TOLERANCE = 1e-5


def logprob_check():
    from sglang.srt.speculative import ddtree_compat as compat

    batch, logits_output, predict, accept_index, paths = _round()
    if not compat.SPEC_LOGPROBS:
        try:
            compat.output_logprobs(batch, logits_output, predict, accept_index)
        except ValueError:
            return []
        return ["a return_logprob batch went through a release whose round computes no logprobs"]
    plain = types.SimpleNamespace(next_token_logits=logits_output.next_token_logits)
    compat.output_logprobs(types.SimpleNamespace(return_logprob=False), plain, predict, accept_index)
    problems = [] if getattr(plain, "next_token_logprobs", None) is None else ["logprobs written for a batch that asked for none"]
    compat.output_logprobs(batch, logits_output, predict, accept_index)
    return problems + _logprob_problems(logits_output, predict, paths)


def _round():
    """Two requests' trees from a seeded drafter, a target that agrees with the drafter's top
    token for the first depths, and the accepted paths the payload's walk takes over them."""
    import torch
    from sglang.srt.speculative import ddtree_utils

    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, DEPTH, VOCAB, generator=generator)
    tree = ddtree_utils.build_ddtree_tree(ddtree_utils.compute_draft_topk(scores, BUDGET), BUDGET)
    roots = torch.tensor([3, 7])
    buffers = ddtree_utils.tree_to_verify_buffers(tree, roots, torch.tensor([0, 0]), BUDGET + 1, DEPTH)
    nodes = BUDGET + 1
    # The target's row at a node of depth d: the drafter's scores for depth d + 1 (it accepts
    # the drafter's top token there) up to depth 1, noise below; the second request's root
    # row is the drafter's negated, so it accepts nothing but the bonus.
    rows = []
    for request in range(2):
        for depth in buffers.positions[request].tolist():
            if request == 1 and depth == 0:
                rows.append(-scores[request, 0])
            elif request == 0 and depth < 2:
                rows.append(scores[request, depth])
            else:
                rows.append(torch.randn(VOCAB, generator=generator))
    logits = torch.stack(rows)
    target_predict = logits.argmax(-1)
    predict = torch.zeros(2 * nodes, dtype=torch.int32)
    accept_index = torch.full((2, DEPTH + 1), -1, dtype=torch.int32)
    paths = []
    for request in range(2):
        parents = [0, *tree.parent_indices[request].tolist()]
        chosen = target_predict[request * nodes : (request + 1) * nodes].tolist()
        path, _ = ddtree_utils.follow_verified_tree_cpu(buffers.draft_token[request].tolist(), parents, chosen)
        rows_on_path = [request * nodes + node for node in path]
        accept_index[request, : len(path)] = torch.tensor(rows_on_path, dtype=torch.int32)
        predict[rows_on_path] = target_predict[rows_on_path].to(torch.int32)
        paths.append(rows_on_path)
    batch = types.SimpleNamespace(
        return_logprob=True,
        seq_lens=torch.zeros(2, dtype=torch.int64),
        sampling_info=types.SimpleNamespace(is_all_greedy=True),
        top_logprobs_nums=[TOP, 0],
        token_ids_logprobs=[None, CHOSEN],
    )
    return batch, types.SimpleNamespace(next_token_logits=logits), predict, accept_index, paths


def _logprob_problems(logits_output, predict, paths):
    import torch

    if len(paths[0]) < 2 or len(paths[1]) != 1:
        return [f"the check's round should accept drafts for request 0 only, accepted {[len(p) for p in paths]} nodes"]
    expected = torch.log_softmax(logits_output.next_token_logits.float(), dim=-1)
    got = torch.as_tensor(logits_output.next_token_logprobs)
    width = got.shape[1]
    problems = []
    for request, rows in enumerate(paths):
        for slot, row in enumerate(rows):
            token = int(predict[row])
            if abs(float(got[request, slot]) - float(expected[row, token])) > TOLERANCE:
                problems.append(f"request {request}'s token {slot} logprob is not the target's at its node")
            flat = request * width + slot
            if request == 0:
                values = torch.as_tensor(logits_output.next_token_top_logprobs_val[flat])
                if not torch.allclose(values, expected[row].topk(TOP).values, atol=TOLERANCE):
                    problems.append(f"request 0's token {slot} top logprobs are not the target's at its node")
            else:
                values = torch.as_tensor(logits_output.next_token_token_ids_logprobs_val[flat])
                if not torch.allclose(values, expected[row, CHOSEN], atol=TOLERANCE):
                    problems.append(f"request 1's token {slot} chosen-id logprobs are not the target's at its node")
    return problems
