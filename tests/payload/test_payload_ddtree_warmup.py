"""The startup warm-up of the round's eager kernels (overlay/.../ddtree_warmup.py).

Triton compiles a kernel once per specialisation: its constexprs, each tensor argument's dtype
and 16-byte alignment, each int argument's width and (unless the kernel declines) whether it
is 1 or divisible by 16, and the launch options. Every launch below is recorded by that key.
The oracle is the round itself: the eager launches of ``DDTreeWorkerV2._tree_round``, replayed
here as it makes them (the tree from the graph of the batch size a batch pads to, built eagerly
past the largest), for every shape a policy can pick, at every batch size up to past the
largest graph, with and without prefix-cache tracking. After the warm-up no such round may
launch a specialisation the warm-up did not. The kernels run in Triton's CPU interpreter (see
test_payload_ddtree_kernels for why the variable is set only around the import).
"""

from __future__ import annotations

import inspect
import types

import pytest
from payload_modules import load_payload_module, skip_unless_interpreted, triton_interpreter

torch = pytest.importorskip("torch")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    kernels = load_payload_module("sglang.srt.speculative.ddtree_kernels")
    gdn_tree = load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")
    hybrid = load_payload_module("sglang.srt.speculative.ddtree_hybrid")
    warmup = load_payload_module("sglang.srt.speculative.ddtree_warmup")
    kv_move = load_payload_module("sglang.srt.speculative.ddtree_kv_move")

skip_unless_interpreted(triton)

from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

db = load_payload_module("sglang.srt.speculative.ddtree_budget")
ts = load_payload_module("sglang.srt.speculative.ddtree_tree_stage")

BLOCK, VOCAB, LOGITS_DTYPE, ROOT_DTYPE, MASK_TOKEN = 8, 40, torch.float32, torch.int32, 7
GRAPH_BS = (1, 2, 4, 8)  # the tree graphs' batch sizes; 9 and 10 build their trees eagerly
ROUND_BS = range(1, 11)
TRACK_INTERVAL = 256  # SGLang's default --mamba-track-interval
POOL_ROWS, CONTEXT, KV_SLOTS = 12, 96, 1000
LAYERS, STATE_SLOTS, HEADS, VALUE_HEADS, DIM, CONV = 1, 12, 1, 1, 4, 3
CHANNELS = 2 * HEADS * DIM + VALUE_HEADS * DIM


def specialisation(kernel, args, kwargs) -> tuple:
    """What Triton compiles this launch of ``kernel`` for."""
    names = kernel.arg_names
    bound = {**dict(zip(names, args, strict=False)), **{k: v for k, v in kwargs.items() if k in names}}
    loose = set(kernel.kwargs.get("do_not_specialize") or ())
    constexprs = {n for n, a in inspect.get_annotations(kernel.fn).items() if "constexpr" in str(a)}

    def key(name, value):
        if name in constexprs:
            return value
        if isinstance(value, torch.Tensor):
            return value.dtype, value.data_ptr() % 16 == 0
        if isinstance(value, bool):
            return bool
        if isinstance(value, int):
            fits_i32 = -(2**31) <= value < 2**31
            return (fits_i32,) if name in loose else (fits_i32, value == 1, value % 16 == 0)
        return type(value)

    options = tuple(sorted((k, v) for k, v in kwargs.items() if k not in names))
    return kernel.__name__, tuple((n, key(n, bound[n])) for n in names if n in bound), options


class RecordedKernel:
    def __init__(self, kernel, log):
        self.kernel, self.log = kernel, log

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(specialisation(self.kernel, args, kwargs))
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.fixture
def launches(monkeypatch):
    """Every Triton launch of the round's modules while the test runs, by specialisation."""
    log = []
    for module in (kernels, gdn_tree, hybrid, kv_move):
        for name, value in list(vars(module).items()):
            if isinstance(value, InterpretedFunction) and name.endswith("_kernel"):
                monkeypatch.setattr(module, name, RecordedKernel(value, log))
    with triton_interpreter():
        yield log


def fake_pool(width: int):
    """A Gated-DeltaNet pool (conv channels [q | k | v]) with per-node snapshots and windows
    for requests of ``width`` verify nodes, random everywhere."""
    gen = torch.Generator().manual_seed(3)

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    return types.SimpleNamespace(
        temporal=rand(LAYERS, STATE_SLOTS, VALUE_HEADS, DIM, DIM),
        intermediate_ssm=rand(LAYERS, POOL_ROWS, width, VALUE_HEADS, DIM, DIM),
        conv=[rand(LAYERS, STATE_SLOTS, CHANNELS, CONV - 1)],
        intermediate_conv_window=[rand(LAYERS, POOL_ROWS, width, CHANNELS, CONV - 1)],
    )


def recurrent_state(mode: str, pool):
    if mode == "snapshot":
        return hybrid.RecurrentStateCommit.from_pool(pool)
    stash = gdn_tree.GDNInputStash.for_pool(pool, torch.float32)
    scratch = gdn_tree.allocate_branch_scratch(
        rows=stash.rows, width=stash.width, block_size=BLOCK, value_heads=VALUE_HEADS,
        v_dim=DIM, k_dim=DIM, device="cpu",
    ).normal_()
    return hybrid.RecurrentStateCommit.flat(pool, stash, gdn_tree.max_path_len(BLOCK), scratch)


def state_tensors(pool, commit) -> list:
    tensors = [pool.temporal, pool.intermediate_ssm, *pool.conv, *pool.intermediate_conv_window]
    if commit is not None and commit.stash is not None:
        stash = commit.stash
        tensors += [stash.k, stash.v, stash.g, stash.beta, commit.scratch]
    return tensors


def req_to_token():
    gen = torch.Generator().manual_seed(4)
    return torch.randint(0, KV_SLOTS, (POOL_ROWS, CONTEXT), dtype=torch.int32, generator=gen)


def kv_pool():
    """The target's KV as SGLang's tiled copy sees it: a K and a V buffer of KV_SLOTS rows."""
    gen = torch.Generator().manual_seed(6)
    buffers = [torch.randn(KV_SLOTS, 2, 4, generator=gen).bfloat16() for _ in range(2)]
    return types.SimpleNamespace(
        buffers=buffers,
        data_ptrs=torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64),
        data_strides=torch.tensor([b.stride(0) * b.element_size() for b in buffers]),
    )


def warm(policy, *, tree_stage, table, commit=None, tail_only=False, kv=None):
    warmup.warm_round_kernels(
        tree_stage,
        policy,
        block_size=BLOCK,
        vocab_size=VOCAB,
        logits_dtype=LOGITS_DTYPE,
        root_dtype=ROOT_DTYPE,
        mask_token_id=MASK_TOKEN,
        req_to_token=table,
        tail_only=tail_only,
        recurrent_state=commit,
        move_accepted_kv=None if kv is None else kv_move.TiledKVMover(kv),
    )


def graph_bs(bs: int) -> int:
    """The tree graph a batch pads to (``VerifyWidths.graph_bs``); past the largest, itself."""
    return next((g for g in GRAPH_BS if g >= bs), bs)


class Round:
    """The eager launches of ``DDTreeWorkerV2._tree_round``, in its order, on inputs made as a
    round gets them: SGLang's batch tensors and eagle_sample's outputs fresh, the draft block's
    slots feeding the accept bookkeeping, and the trees the first rows of the graph batch size's
    (``first_rows``, then ``verified``)."""

    def __init__(self, policy, tree_stage, table, commit, tail_only, kv):
        self.policy, self.tree_stage, self.table = policy, tree_stage, table
        self.commit, self.tail_only = commit, tail_only
        self.move_accepted_kv = kv_move.TiledKVMover(kv)
        self.trees = {}
        self.gen = torch.Generator().manual_seed(5)

    def run(self, bs: int, shape, tracking: bool) -> None:
        n = db.shape_verify_tokens(shape, BLOCK)
        roots = torch.randint(0, VOCAB, (bs,), generator=self.gen).to(ROOT_DTYPE)
        prefix_lens = torch.randint(1, CONTEXT - 40, (bs,), generator=self.gen)
        req_pool_indices = torch.randperm(POOL_ROWS, generator=self.gen)[:bs]
        _, _, cache_loc_2d = kernels.prepare_draft_block(
            roots, prefix_lens, req_pool_indices, self.table,
            mask_token_id=MASK_TOKEN, block_size=BLOCK, num_verify_tokens=n,
        )
        drafts = self.drafts(graph_bs(bs)).first_rows(bs)
        self.tree_stage.write_verify_inputs(
            drafts.verified(shape), roots, prefix_lens, n, BLOCK - 1,
            n * (int(prefix_lens.sum()) + bs * n), tail_only=self.tail_only,
        )
        width = self.policy.accept_width(BLOCK)
        predict = torch.randint(0, VOCAB, (bs * n,), generator=self.gen).to(torch.int32)
        accept_index = torch.full((bs, width), -1, dtype=torch.int32)
        accept_index[:, 0] = torch.arange(bs) * n
        accept_lens = torch.zeros(bs, dtype=torch.int32) + 1
        accepted = kernels.accepted_paths(predict, accept_index, accept_lens, prefix_lens, cache_loc_2d)
        self.move_accepted_kv(accepted.kv_target, accepted.kv_source, width)
        if self.commit is not None:
            slots = torch.arange(STATE_SLOTS, dtype=torch.int32)[req_pool_indices]
            track = (slots.long() + 1) % STATE_SLOTS if tracking else None
            self.commit.commit(
                slots, accept_index, accept_lens, n, prefix_lens,
                track_indices=track, track_interval=TRACK_INTERVAL,
            )

    def drafts(self, bs: int):
        """The trees of ``bs`` requests, built once: a graph's outputs are the same buffers every
        replay, and an eager build's are fresh ones of the same sizes, aligned alike."""
        if bs not in self.trees:
            stage = self.policy.drafts_at(bs)
            logits = torch.randn(bs, BLOCK - 1, VOCAB, generator=self.gen).to(LOGITS_DTYPE)
            topk = self.tree_stage.draft_topk(logits, stage.top_k(VOCAB))
            self.trees[bs] = self.tree_stage.build_drafts(topk, stage)
        return self.trees[bs]


def round_shapes(policy, bs: int):
    return policy.choices if policy.is_adaptive else (policy.shape_at(graph_bs(bs)),)


POLICIES = {
    "adaptive chain,8,16": db.BudgetPolicy.parse_adaptive("chain,8,16"),
    "schedule 1:3,2:chain,4:32,9:8": db.BudgetPolicy.parse_schedule("1:3,2:chain,4:32,9:8"),
}


@pytest.mark.parametrize(
    ("policy_name", "mode", "tail_only"),
    [
        ("adaptive chain,8,16", "snapshot", False),
        ("adaptive chain,8,16", "flat", True),
        ("schedule 1:3,2:chain,4:32,9:8", None, False),
    ],
)
def test_after_the_warm_up_no_round_of_any_shape_or_batch_size_compiles_a_kernel(
    launches, policy_name, mode, tail_only
):
    policy = POLICIES[policy_name]
    tree_stage = ts.select_tree_stage("triton")
    table = req_to_token()
    pool = fake_pool(policy.widest_verify_tokens(BLOCK))
    commit = None if mode is None else recurrent_state(mode, pool)
    kv = kv_pool()
    warm(policy, tree_stage=tree_stage, table=table, commit=commit, tail_only=tail_only, kv=kv)
    warmed = set(launches)
    launches.clear()

    rounds = Round(policy, tree_stage, table, commit, tail_only, kv)
    for bs in ROUND_BS:
        for shape in round_shapes(policy, bs):
            for tracking in (False, True) if commit is not None else (False,):
                rounds.run(bs, shape, tracking)
    compiled_mid_serving = sorted(set(launches) - warmed, key=repr)
    assert not compiled_mid_serving, "\n".join(map(repr, compiled_mid_serving))
    launched = {key[0] for key in launches}
    assert launched >= {
        "_draft_block_kernel", "_row_logsumexp_kernel", "_verify_inputs_kernel", "_accepted_kernel",
        "_move_accepted_kv_kernel",
    }
    assert ("_commit_rows_kernel" in launched) == (commit is not None)
    assert ("_replay_commit_kernel" in launched) == (mode == "flat")


@pytest.mark.parametrize(
    ("policy", "verified"),
    [
        (db.BudgetPolicy.parse_adaptive("chain,8,16"), {(db.CHAIN, 7, 8), (8, 8, 9), (16, 16, 17)}),
        (db.BudgetPolicy.parse_schedule("1:32,8:chain"), {(db.CHAIN, 7, 8), (32, 32, 33)}),
        (db.BudgetPolicy.fixed(4), {(4, 4, 8)}),
    ],
)
def test_the_warm_up_builds_and_verifies_every_shape_of_the_policy_at_an_odd_and_an_even_batch(
    launches, policy, verified
):
    calls = []
    triton_stage = ts.select_tree_stage("triton")

    def write_verify_inputs(tree, roots, prefix_lens, n, *args, **kwargs):
        one_path = torch.arange(tree.budget).expand_as(tree.parent_indices)
        calls.append((tree.budget, n, int(roots.shape[0]), torch.equal(tree.parent_indices, one_path)))
        return triton_stage.write_verify_inputs(tree, roots, prefix_lens, n, *args, **kwargs)

    recording = triton_stage._replace(write_verify_inputs=write_verify_inputs)
    warm(policy, tree_stage=recording, table=req_to_token())
    assert sorted(calls) == sorted(
        (nodes, n, bs, shape == db.CHAIN) for shape, nodes, n in verified for bs in (1, 2)
    )
    blocks = {dict(key[1])["BLOCK"] for key in launches if key[0] == "_draft_block_kernel"}
    assert blocks == {triton.next_power_of_2(n) for _, _, n in verified}


@pytest.mark.parametrize("mode", ["snapshot", "flat"])
def test_the_warm_up_leaves_the_pools_and_the_recurrent_state_as_they_were(launches, mode):
    policy = db.BudgetPolicy.parse_adaptive("chain,8,16")
    pool = fake_pool(policy.widest_verify_tokens(BLOCK))
    commit = recurrent_state(mode, pool)
    table = req_to_token()
    kv = kv_pool()
    before = [t.clone() for t in (table, *kv.buffers, *state_tensors(pool, commit))]
    warm(policy, tree_stage=ts.select_tree_stage("triton"), table=table, commit=commit, kv=kv)
    after = (table, *kv.buffers, *state_tensors(pool, commit))
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    commits = [dict(key[1]) for key in launches if key[0] in ("_commit_rows_kernel", "_replay_commit_kernel")]
    assert commits, "the recurrent-state commit was not warmed"
    if mode == "flat":
        assert {c["HAS_TRACK"] for c in commits if "HAS_TRACK" in c} == {False, True}

