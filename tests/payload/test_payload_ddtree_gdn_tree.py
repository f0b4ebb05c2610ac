"""DDTREE's flat GDN tree verify and replay commit (overlay/.../ddtree_gdn_tree.py).

The oracle is the tool's plain-torch GDN (ddtree_overlay/reference/gdn.py), run as a chain over
one node's root-to-node path alone: every verify node's output must be what the sequential gated
delta rule gives on that path, and the replayed commit state the sequential state at the accepted
node; the verify's depth-first walk must be a plain stack DFS's preorder whose reloads, followed
through a simulated scratch, always find the visited node's parent. All in fp32; the kernels run
in Triton's CPU interpreter (see test_payload_ddtree_kernels for why the variable is set only
around the import). Tolerance: 2e-5 absolute + 2e-5 relative, a few fp32 ulps of O(1) values
after at most 20 steps (the kernels and the oracle sum in different orders).
"""

from __future__ import annotations

import sys
import types

import pytest
from payload_modules import (
    OVERLAY,
    load_compat_shim,
    load_payload_module,
    skip_unless_interpreted,
    triton_interpreter,
)

torch = pytest.importorskip("torch")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    flat = load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")

from ddtree_overlay.reference import gdn  # noqa: E402

skip_unless_interpreted(triton)

ATOL = RTOL = 2e-5
BLOCK = 16  # the drafter's block: paths of at most 16 nodes
MAX_PATH = flat.max_path_len(BLOCK)


class Layer:
    """One GDN layer's verify inputs for bs requests of n nodes, SGLang's layouts."""

    def __init__(self, bs, n, *, heads=1, value_heads=2, k_dim=24, v_dim=20, slots=6, seed=0):
        gen = torch.Generator().manual_seed(seed)

        def rand(*shape, std=1.0):
            return torch.randn(*shape, generator=gen) * std

        t = bs * n
        self.bs, self.n = bs, n
        self.q = rand(1, t, heads, k_dim)
        self.k = rand(1, t, heads, k_dim)
        self.v = rand(1, t, value_heads, v_dim)
        self.a = rand(t, value_heads)
        self.b = rand(t, value_heads)
        self.A_log = rand(value_heads, std=0.5)
        self.dt_bias = rand(value_heads, std=0.5)
        self.state = rand(slots, value_heads, v_dim, k_dim, std=0.3)  # [slots, HV, V, K]
        self.slots = torch.randperm(slots, generator=gen)[:bs].to(torch.int32)

    def stash(self, rows, width, layers=1, layer_dtype=torch.float32):
        return flat.GDNInputStash.allocate(
            layers=layers,
            rows=rows,
            width=width,
            key_heads=self.k.shape[2],
            value_heads=self.v.shape[2],
            k_dim=self.k.shape[3],
            v_dim=self.v.shape[3],
            dtype=layer_dtype,
            device="cpu",
        )

    def verify(self, parents, stash=None, layer=0, prefetch=None):
        with triton_interpreter():
            return flat.tree_verify(
                q=self.q,
                k=self.k,
                v=self.v,
                a=self.a,
                b=self.b,
                A_log=self.A_log,
                dt_bias=self.dt_bias,
                ssm_states=self.state,
                cache_indices=self.slots,
                num_verify_tokens=self.n,
                retrieve_parent_token=parents,
                stash=stash,
                layer=layer,
                prefetch=prefetch,
            )[0]

    def sequential(self, i, path):
        """The oracle on request i's root-first node path alone: (last output, final state)."""
        rows = [i * self.n + node for node in path]
        hv = self.v.shape[2]
        q = gdn.expand_heads(gdn.l2norm(self.q[0, rows]), hv) * self.k.shape[-1] ** -0.5
        k = gdn.expand_heads(gdn.l2norm(self.k[0, rows]), hv)
        g, beta = gdn.gates(self.a[rows], self.b[rows], self.A_log, self.dt_bias)
        state0 = self.state[int(self.slots[i])].transpose(-1, -2)  # [HV, K, V]
        o, h = gdn.recurrent_tree(
            q[None], k[None], self.v[0, rows][None], g[None], beta[None], state0[None], None
        )
        return o[0, -1], h[0].transpose(-1, -2)  # state back to SGLang's [HV, V, K]


def random_parents(bs, n, depth_cap, seed):
    """[bs, n] int32 trees in pop order: node 0 the root, parents before children, depth <=
    depth_cap; entry 0 is 0, as the conv kernel leaves it."""
    gen = torch.Generator().manual_seed(seed)
    parents = torch.zeros(bs, n, dtype=torch.int32)
    for i in range(bs):
        depth = [0]
        for node in range(1, n):
            candidates = [p for p in range(node) if depth[p] < depth_cap]
            p = candidates[int(torch.randint(len(candidates), (1,), generator=gen))]
            parents[i, node] = p
            depth.append(depth[p] + 1)
    return parents


def chain(bs, n):
    return torch.clamp(torch.arange(n, dtype=torch.int32) - 1, min=0).expand(bs, n).contiguous()


def star(bs, n):
    return torch.zeros(bs, n, dtype=torch.int32)


def bushy_parents(bs, n, seed, depth_cap=BLOCK - 1):
    """Trees with many branch points and deep branches: each node extends the newest node, or
    adds a child to a node that has children already (a branch point grows another branch)."""
    gen = torch.Generator().manual_seed(seed)
    parents = torch.zeros(bs, n, dtype=torch.int32)
    for i in range(bs):
        depth, has_children = [0], [False] * n
        for node in range(1, n):
            branching = [p for p in range(node) if has_children[p] and depth[p] < depth_cap]
            if branching and float(torch.rand((), generator=gen)) < 0.5:
                p = branching[int(torch.randint(len(branching), (1,), generator=gen))]
            else:
                p = max(c for c in range(node) if depth[c] < depth_cap)
            parents[i, node] = p
            has_children[p] = True
            depth.append(depth[p] + 1)
    return parents


def deep_fan(bs, n):
    """The root's three children head deep chains that branch again into chains of their own,
    the nodes numbered level by level across the chains (as best-first pops interleave
    branches), so the depth-first walk leaves index order at almost every node."""
    tips, parents = [0, 0, 0], [0]
    while len(parents) < n:
        for b in range(len(tips)):
            if len(parents) == n:
                break
            parents.append(tips[b])
            if len(parents) % 5 == 0:  # the tip branches: a second chain grows from it
                tips.append(tips[b])
            tips[b] = len(parents) - 1
    return torch.tensor(parents, dtype=torch.int32).expand(bs, n).contiguous()


TREES = {
    "random-shallow": lambda bs, n: random_parents(bs, n, depth_cap=3, seed=1),
    "random-deep": lambda bs, n: random_parents(bs, n, depth_cap=BLOCK - 1, seed=2),
    "bushy": lambda bs, n: bushy_parents(bs, n, seed=3),
    "deep-fan": deep_fan,
    "chain": chain,
    "star": star,
}


def children_of(parents_row, n):
    children = [[] for _ in range(n)]
    for node in range(1, n):
        children[int(parents_row[node])].append(node)
    return children


def dfs_preorder(parents_row, n):
    """The walk's order, by a plain stack: children in index order."""
    children, order, stack = children_of(parents_row, n), [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))
    return order


def check_walk(walk_row, parents_row, n, slots):
    """walk_row [n, 3] is the depth-first walk of the tree, and following it with a scratch of
    ``slots`` slots keeps in registers, or reloads, exactly the visited node's parent state;
    within the slots, it uses as many as branch nodes are open (children still to visit) at once."""
    rows = [tuple(int(x) for x in row) for row in walk_row]
    assert [node for node, _, _ in rows] == dfs_preorder(parents_row, n)
    children = children_of(parents_row, n)
    scratch, previous, opened, peak = {}, None, set(), 0
    for node, reload, store in rows:
        parent = int(parents_row[node]) if node else None
        if reload < 0:
            assert previous == parent  # the registers hold the parent's state (the root: h0)
        else:
            assert previous != parent and scratch.get(reload) == parent
        assert (store >= 0) == (len(children[node]) >= 2)  # stores only what a reload reads
        if store >= 0:
            assert store < slots
            scratch[store] = node
        if node and node == children[parent][-1]:
            opened.discard(parent)
        if len(children[node]) >= 2:
            opened.add(node)
        peak = max(peak, len(opened))
        previous = node
    assert 1 + max(store for _, _, store in rows) == min(peak, slots)


@pytest.mark.parametrize("shape", sorted(TREES))
def test_every_node_is_the_sequential_rule_on_its_own_path(shape):
    if shape == "chain":  # the deepest path a block allows (16 nodes); one request, one head: fast
        bs, n, layer = 1, BLOCK, Layer(1, BLOCK, value_heads=1, seed=0)
    else:
        bs, n = 2, 7
        layer = Layer(bs, n, seed=len(shape))
    parents = TREES[shape](bs, n)
    o = layer.verify(parents).view(bs, n, *layer.v.shape[2:])
    for i in range(bs):
        for node in range(n):
            want, _ = layer.sequential(i, flat.path_to(parents[i], node))
            torch.testing.assert_close(o[i, node], want, atol=ATOL, rtol=RTOL)


def test_the_kernel_matches_its_torch_path_walk_and_leaves_the_committed_state_alone():
    layer = Layer(2, 7, seed=5)
    parents = random_parents(2, 7, depth_cap=4, seed=5)
    before = layer.state.clone()
    o = layer.verify(parents)
    want = flat.tree_verify_torch(
        layer.q[0], layer.k[0], layer.v[0], layer.a, layer.b, layer.A_log, layer.dt_bias,
        layer.state, layer.slots, parents, layer.k.shape[-1] ** -0.5,
    )
    torch.testing.assert_close(o, want, atol=ATOL, rtol=RTOL)
    assert torch.equal(layer.state, before)


@pytest.mark.parametrize("shape", ["random-deep", "bushy", "star", "no parents"])
@pytest.mark.parametrize(("bs", "n"), [(1, 1), (1, 2), (3, 9), (5, 2), (5, 9)])
def test_every_lookahead_changes_no_bit(shape, bs, n):
    """The pipelined walks run the same arithmetic on the same inputs: outputs and the stash
    equal, bit for bit, to the walk that loads each step's inputs in that step, at one-node
    and two-node trees (the clamped last steps), with a padded request, stash rows for fewer
    requests than the batch, and the batch sizes each default depth serves (V blocks 8, 16)."""
    layer = Layer(bs, n, seed=11 + bs + n)
    if bs > 1:
        layer.slots[-1] = -1  # a padded request: zero state
    parents = None if shape == "no parents" else TREES[shape](bs, n)
    results = []
    for depth in (0, 1, 2):
        stash = layer.stash(max(bs - 1, 1), n)
        results.append((layer.verify(parents, stash=stash, prefetch=depth), stash))
    (o_want, stash_want), *pipelined = results
    assert stash_want.v.abs().sum() > 0  # the stash was written, not empty buffers compared
    for o, stash in pipelined:
        assert torch.equal(o, o_want)
        for got, want in zip((stash.k, stash.v, stash.g, stash.beta), (stash_want.k, stash_want.v, stash_want.g, stash_want.beta), strict=True):
            assert torch.equal(got, want)


@pytest.mark.parametrize("n", [1, 5])
def test_the_lookahead_reads_no_step_past_the_walk(n):
    """The walk's rows past the batch hold a node far outside it: a lookahead that read a step
    past the last would load that node's inputs, which crashes the interpreter (in a forked
    child here); the last steps must ask for the last node again."""
    from forked import run_forked

    bs = 2
    layer = Layer(bs, n, seed=3)
    parents = TREES["random-deep"](bs, n)

    def verify():
        with triton_interpreter():
            _, _, value_heads, v_dim = layer.v.shape
            scratch = flat.allocate_branch_scratch(
                rows=bs, width=n, block_size=n, value_heads=value_heads, v_dim=v_dim, k_dim=layer.k.shape[-1], device="cpu"
            )
            walk = torch.full((bs + 2, n, 3), 2**30, dtype=torch.int32)
            walk[:bs] = flat.tree_walk(parents, n, int(scratch.shape[1]))
            for depth in (1, 2):
                flat.tree_verify(
                    q=layer.q, k=layer.k, v=layer.v, a=layer.a, b=layer.b, A_log=layer.A_log,
                    dt_bias=layer.dt_bias, ssm_states=layer.state, cache_indices=layer.slots,
                    num_verify_tokens=n, retrieve_parent_token=parents, stash=None, layer=0,
                    walk=walk[:bs], scratch=scratch, prefetch=depth,
                )

    assert run_forked(verify) == 0


def test_a_lookahead_past_two_is_refused():
    with pytest.raises(ValueError, match="0, 1 or 2 steps ahead, not 3"):
        Layer(1, 2).verify(None, prefetch=3)


def test_no_parent_links_verify_a_chain():
    layer = Layer(2, 5, seed=7)
    torch.testing.assert_close(layer.verify(None), layer.verify(chain(2, 5)), atol=0, rtol=0)



def test_strided_views_of_the_projection_verify_as_contiguous_inputs():
    """0.5.21+ may hand q, k, v as views of the mixed projection [T, q | k | v] (not copied)."""
    layer = Layer(2, 6, heads=2, value_heads=4, seed=9)
    parents = random_parents(2, 6, depth_cap=4, seed=9)
    expected = layer.verify(parents)
    t = layer.q.shape[1]
    mixed = torch.cat([x.reshape(t, -1) for x in (layer.q, layer.k, layer.v)], dim=-1)
    widths = [x[0, 0].numel() for x in (layer.q, layer.k, layer.v)]
    views = torch.split(mixed, widths, dim=-1)
    layer.q, layer.k, layer.v = (x.view(1, t, *y.shape[2:]) for x, y in zip(views, (layer.q, layer.k, layer.v), strict=True))
    assert not layer.q.is_contiguous()
    torch.testing.assert_close(layer.verify(parents), expected, atol=0, rtol=0)

def test_a_padded_request_reads_a_zero_state():
    layer = Layer(2, 4, seed=8)
    layer.slots[1] = -1
    parents = chain(2, 4)
    o = layer.verify(parents).view(2, 4, *layer.v.shape[2:])
    layer.state.zero_()
    zero_state = layer.verify(parents).view(2, 4, *layer.v.shape[2:])
    torch.testing.assert_close(o[1], zero_state[1], atol=0, rtol=0)


def per_path_oracle(layer, parents):
    return flat.tree_verify_torch(
        layer.q[0], layer.k[0], layer.v[0], layer.a, layer.b, layer.A_log, layer.dt_bias,
        layer.state, layer.slots, parents, layer.k.shape[-1] ** -0.5,
    )


@pytest.mark.parametrize("shape", ["bushy", "deep-fan", "random-deep", "chain", "star"])
def test_batched_trees_with_a_padded_request_match_the_per_path_oracle(shape):
    bs, n = 4, 20
    layer = Layer(bs, n, slots=6, seed=50 + len(shape))
    layer.slots[2] = -1  # a padded request: zero state
    parents = TREES[shape](bs, n)
    if shape == "bushy":
        parents[3] = deep_fan(1, n)[0]  # requests of one batch walk different trees
    torch.testing.assert_close(layer.verify(parents), per_path_oracle(layer, parents), atol=ATOL, rtol=RTOL)


def test_rows_past_the_scratch_are_padding_and_leave_the_others_exact():
    bs, n = 3, 12
    layer = Layer(bs, n, seed=60)
    layer.slots[2] = -1
    parents = bushy_parents(bs, n, seed=60)
    scratch = torch.full((2, flat.branch_slots(n, BLOCK), 2, 20, 24), float("nan"))
    with triton_interpreter():
        o = flat.tree_verify(
            q=layer.q, k=layer.k, v=layer.v, a=layer.a, b=layer.b, A_log=layer.A_log,
            dt_bias=layer.dt_bias, ssm_states=layer.state, cache_indices=layer.slots,
            num_verify_tokens=n, retrieve_parent_token=parents, stash=None, layer=0, scratch=scratch,
        )[0]
    want = per_path_oracle(layer, parents)
    torch.testing.assert_close(o[: 2 * n], want[: 2 * n], atol=ATOL, rtol=RTOL)


def build_walk(parents, n, slots):
    with triton_interpreter():
        return flat.tree_walk(parents, n, slots)


@pytest.mark.parametrize("shape", sorted(TREES))
def test_the_walk_is_the_depth_first_preorder_and_reloads_each_parents_state(shape):
    bs, n = 3, 33
    parents = TREES[shape](bs, n)
    slots = flat.branch_slots(n, BLOCK)
    walk = build_walk(parents, n, slots)
    assert walk.shape == (bs, n, 3) and walk.dtype == torch.int32
    for i in range(bs):
        check_walk(walk[i], parents[i], n, slots)


def test_the_walk_on_many_random_trees():
    for seed in range(40):
        n = 1 + seed % 37
        parents = torch.cat([
            random_parents(2, n, depth_cap=1 + seed % (BLOCK - 1), seed=seed),
            bushy_parents(2, n, seed=seed, depth_cap=1 + seed % (BLOCK - 1)),
        ])
        slots = flat.branch_slots(n, BLOCK)
        walk = build_walk(parents, n, slots)
        for i in range(4):
            check_walk(walk[i], parents[i], n, slots)


def test_the_walk_keeps_chains_in_registers_and_a_star_in_one_slot():
    n = 9
    walk = build_walk(torch.cat([chain(1, n), star(1, n)]), n, 4)
    assert walk[0].tolist() == [[node, -1, -1] for node in range(n)]
    assert walk[1].tolist() == [[0, -1, 0], [1, -1, -1]] + [[node, 0, -1] for node in range(2, n)]


def test_the_walk_of_leftover_parents_is_a_tree_inside_the_scratch():
    """A padded request's row holds whatever was there (never the verify's concern, but never a
    write outside the scratch): entries that are not earlier nodes read as the root."""
    n, slots = 24, 3
    gen = torch.Generator().manual_seed(70)
    garbage = torch.randint(-5, 3 * n, (2, n), generator=gen, dtype=torch.int32)
    walk = build_walk(garbage, n, slots)
    indices = torch.arange(n, dtype=torch.int32)
    for i in range(2):
        tree = torch.where((garbage[i] >= 0) & (garbage[i] < indices), garbage[i], 0)
        check_walk(walk[i], tree, n, slots)


def test_a_tree_deeper_than_the_slots_stays_inside_them():
    n = 31
    parents = deep_fan(1, n)  # 3 branch nodes open at once
    walk = build_walk(parents, n, 2)
    assert [int(node) for node in walk[0, :, 0]] == dfs_preorder(parents[0], n)
    assert int(walk[0, :, 1:].max()) == 1 and int(walk[0, :, 1:].min()) == -1
    check_walk(build_walk(parents, n, 3)[0], parents[0], n, 3)


def accepted(parents, i, leaf):
    return flat.path_to(parents[i], leaf)


@pytest.mark.parametrize("stash_dtype", [torch.float32, torch.bfloat16])
def test_replay_commit_is_the_sequential_state_at_the_accepted_node(stash_dtype):
    bs, n, width, layers = 3, 6, 8, 2  # stash rows at the widest width, wider than this round
    trees = random_parents(bs, n, depth_cap=5, seed=3)
    layer_inputs = [Layer(bs, n, seed=10 + row) for row in range(layers)]
    for inputs in layer_inputs[1:]:  # one request, one slot per layer row of the pool
        inputs.slots = layer_inputs[0].slots
    stash = layer_inputs[0].stash(rows=4, width=width, layers=layers, layer_dtype=stash_dtype)
    for row, inputs in enumerate(layer_inputs):
        if stash_dtype != torch.float32:  # the activations carry the stash's dtype
            inputs.k, inputs.v = inputs.k.to(stash_dtype), inputs.v.to(stash_dtype)
        inputs.verify(trees, stash=stash, layer=row)
    leaves = [5, 0, 4]
    paths = [accepted(trees, i, leaf) for i, leaf in enumerate(leaves)]
    accept_index = torch.full((bs, BLOCK), -1, dtype=torch.int64)
    for i, path in enumerate(paths):
        accept_index[i, : len(path)] = torch.tensor(path) + i * n
    accept_lens = torch.tensor([len(p) for p in paths], dtype=torch.int32)
    pool = torch.stack([inputs.state for inputs in layer_inputs])  # [L, slots, HV, V, K]
    for inputs in layer_inputs:
        inputs.k, inputs.v = inputs.k.float(), inputs.v.float()  # the oracle's view of them
    want = [[inputs.sequential(i, paths[i])[1] for i in range(bs)] for inputs in layer_inputs]
    with triton_interpreter():
        flat.replay_commit(
            ssm_states=pool,
            stash=stash,
            cache_indices=layer_inputs[0].slots,
            accept_index=accept_index,
            accept_lens=accept_lens,
            num_verify_tokens=n,
            max_path=MAX_PATH,
        )
    for row in range(layers):
        for i in range(bs):
            torch.testing.assert_close(
                pool[row, int(layer_inputs[0].slots[i])], want[row][i], atol=ATOL, rtol=RTOL
            )


def test_replay_commit_writes_the_tracking_slot_at_its_path_position():
    bs, n = 2, 6
    parents = chain(bs, n)
    inputs = Layer(bs, n, slots=8, seed=20)
    inputs.slots = torch.tensor([1, 4], dtype=torch.int32)
    stash = inputs.stash(rows=bs, width=n)
    inputs.verify(parents, stash=stash)
    accept_index = torch.tensor([[0, 1, 2, 3], [6, 7, -1, -1]])
    accept_lens = torch.tensor([4, 2], dtype=torch.int32)
    track_slots = torch.tensor([6, 7], dtype=torch.int32)
    # Interval 16: request 0 goes 14 -> 18 and reaches 16 at path position 1, request 1 goes
    # 20 -> 22 and crosses nothing.
    prefix_lens = torch.tensor([14, 20])
    want_track = inputs.sequential(0, [0, 1])[1]
    want_live = [inputs.sequential(0, [0, 1, 2, 3])[1], inputs.sequential(1, [0, 1])[1]]
    untouched = inputs.state[7].clone()
    pool = inputs.state[None]
    with triton_interpreter():
        flat.replay_commit(
            ssm_states=pool,
            stash=stash,
            cache_indices=inputs.slots,
            accept_index=accept_index,
            accept_lens=accept_lens,
            num_verify_tokens=n,
            max_path=MAX_PATH,
            prefix_lens=prefix_lens,
            track_indices=track_slots,
            track_interval=16,
        )
    torch.testing.assert_close(pool[0, 6], want_track, atol=ATOL, rtol=RTOL)
    assert torch.equal(pool[0, 7], untouched)
    torch.testing.assert_close(pool[0, 1], want_live[0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(pool[0, 4], want_live[1], atol=ATOL, rtol=RTOL)


def test_replay_commit_torch_agrees_with_the_kernel():
    bs, n = 2, 5
    parents = random_parents(bs, n, depth_cap=3, seed=30)
    inputs = Layer(bs, n, seed=30)
    stash = inputs.stash(rows=bs, width=n)
    inputs.verify(parents, stash=stash)
    path = accepted(parents, 1, 4)
    by_torch = inputs.state.clone()
    flat.replay_commit_torch(by_torch, stash, 0, int(inputs.slots[1]), [n + t for t in path])
    accept_index = torch.tensor([[0] + [-1] * 4, [n + t for t in path] + [-1] * (5 - len(path))])
    pool = inputs.state[None].clone()
    with triton_interpreter():
        flat.replay_commit(
            ssm_states=pool,
            stash=stash,
            cache_indices=inputs.slots,
            accept_index=accept_index,
            accept_lens=torch.tensor([1, len(path)], dtype=torch.int32),
            num_verify_tokens=n,
            max_path=MAX_PATH,
        )
    torch.testing.assert_close(pool[0, int(inputs.slots[1])], by_torch[int(inputs.slots[1])], atol=ATOL, rtol=RTOL)


def test_stash_bytes_are_what_the_layout_holds():
    stash = flat.GDNInputStash.allocate(
        layers=3, rows=2, width=5, key_heads=2, value_heads=4, k_dim=8, v_dim=16,
        dtype=torch.bfloat16, device="cpu",
    )
    per_node = flat.stash_bytes_per_node(
        layers=3, key_heads=2, value_heads=4, k_dim=8, v_dim=16, activation_itemsize=2
    )
    assert stash.bytes_per_node == per_node == 3 * ((2 * 8 + 4 * 16) * 2 + 2 * 4 * 4)
    assert stash.rows == 2


def test_branch_slots_are_bounded_by_the_width_and_the_block():
    assert flat.branch_slots(16, 16) == 7  # B = 15: two children each, at most 7 branch nodes
    assert flat.branch_slots(33, 16) == 15  # deeper than the block they cannot stack
    assert flat.branch_slots(257, 16) == 15
    assert flat.branch_slots(1, 16) == 1  # a chain: never used, never empty
    assert flat.scratch_bytes_per_request(width=33, block_size=16, value_heads=2, v_dim=4, k_dim=8) == 15 * 2 * 4 * 8 * 4


def test_layers_of_one_forward_share_the_walk_built_at_the_first(monkeypatch):
    bs, n = 2, 9
    layers = {7: 0, 3: 1}  # model layer 3 runs first
    inputs = [Layer(bs, n, seed=90 + row) for row in range(2)]
    for layer in inputs[1:]:
        layer.slots = inputs[0].slots
    parents = bushy_parents(bs, n, seed=90)
    stash = inputs[0].stash(rows=bs, width=n, layers=2)
    scratch = torch.empty(bs, flat.branch_slots(n, BLOCK), 2, 20, 24)
    verify = flat.FlatTreeVerify(stash, scratch, layers, MAX_PATH)
    original, built = flat.tree_walk, []

    def counted(*args):
        built.append(original(*args))
        return built[-1]

    monkeypatch.setattr(flat, "tree_walk", counted)

    def call(layer_id, layer, parents):
        with triton_interpreter():
            return verify(
                layer_id, q=layer.q, k=layer.k, v=layer.v, a=layer.a, b=layer.b, A_log=layer.A_log,
                dt_bias=layer.dt_bias, ssm_states=layer.state, cache_indices=layer.slots,
                num_verify_tokens=n, retrieve_parent_token=parents,
            )[0]

    for layer_id, row in ((3, 1), (7, 0)):
        o = call(layer_id, inputs[row], parents)
        torch.testing.assert_close(o, per_path_oracle(inputs[row], parents), atol=ATOL, rtol=RTOL)
    assert len(built) == 1
    with pytest.raises(RuntimeError, match="built for another batch"):
        call(7, inputs[0], parents.clone())


def test_the_mode_switch_defaults_to_flat(monkeypatch):
    monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE", raising=False)
    switch = flat.envs.SGLANG_DDTREE_HYBRID_STATE
    assert switch.get() == "flat"
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    assert switch.get() == "snapshot"
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "dense")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_HYBRID_STATE must be 'flat' or 'snapshot'"):
        switch.get()


def qwen36_cache_params(layers=48):
    """Qwen3.6-27B's GDN state at TP1 as SGLang's Mamba2CacheParams describe it: conv channels
    [q | k | v] = 2 * 16 * 128 + 48 * 128, kernel 4 (window 3), bf16; SSM [48, 128, 128] fp32."""
    shape = types.SimpleNamespace(conv=[(2 * 16 * 128 + 48 * 128, 3)], temporal=(48, 128, 128))
    dtype = types.SimpleNamespace(conv=torch.bfloat16, temporal=torch.float32)
    per_req = ((2 * 16 * 128 + 48 * 128) * 3 * 2 + 48 * 128 * 128 * 4) * layers
    return types.SimpleNamespace(shape=shape, dtype=dtype, layers=list(range(layers)), mamba_cache_per_req=per_req)


def ddtree_args(algorithm="DDTREE", topk=2, width=33, block_size=16):
    return types.SimpleNamespace(
        speculative_algorithm=algorithm,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=width,
        speculative_dflash_block_size=block_size,
    )


COMPAT = "sglang.srt.speculative.ddtree_compat"


def install_shim(monkeypatch, family, release):
    """The family's ddtree_compat as the installed release has it: what the wiring reads the
    speculative flags through."""
    shim = load_compat_shim(monkeypatch, release, OVERLAY / "shims" / family / "ddtree_compat.py")
    monkeypatch.setitem(sys.modules, COMPAT, shim)
    return shim


@pytest.fixture
def compat_0514(monkeypatch):
    """0.5.14's shim (the base's answers): the flags are the server args' attributes."""
    return install_shim(monkeypatch, "sglang-0.5.14", (0, 5, 14))


def publish_0519(monkeypatch, spec, record=None):
    """0.5.19+'s runtime context: the spec bag holds what resolution declared; the record (the
    operator's input) is what get_server_args returns, None where nothing was published."""
    context = types.ModuleType("sglang.srt.runtime_context")
    context.get_spec = lambda: spec

    def get_server_args():
        if record is None:
            raise ValueError("Global server args is not set yet!")
        return record

    context.get_server_args = get_server_args
    monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", context)


@pytest.fixture
def compat_0519(monkeypatch):
    """The 0.5.19 - 0.5.23 shim; DDTREE's hook declared the tree top-k, the verify width and the
    block into the spec bag, so the record holds none of them (reading it finds no tree)."""
    shim = install_shim(monkeypatch, "sglang-0.5.19-0.5.23", (0, 5, 19))
    record = ddtree_args(topk=None, width=None, block_size=None)
    publish_0519(monkeypatch, ddtree_args(), record)
    return types.SimpleNamespace(shim=shim, record=record)


@pytest.mark.usefixtures("compat_0514")
def test_flat_mode_applies_to_ddtree_on_a_gdn_target_only(monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    assert flat.flat_state_requested(ddtree_args())
    assert not flat.flat_state_requested(ddtree_args(algorithm="EAGLE"))
    assert not flat.flat_state_requested(ddtree_args(topk=1))  # a dense target: no tree top-k
    assert not flat.flat_state_requested(None)
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    assert not flat.flat_state_requested(ddtree_args())
    monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE")  # the default
    assert flat.flat_state_requested(ddtree_args())
    assert not flat.flat_state_requested(ddtree_args(topk=1))


@pytest.mark.usefixtures("compat_0514")
def test_the_memory_split_reserves_conv_windows_and_stash_per_flat_node_and_the_scratch(monkeypatch):
    params = qwen36_cache_params()
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    assert flat.verify_memory_tokens(ddtree_args(), params, torch.bfloat16) == 33
    # 0.5.17+: the split's own width (the spec bag's) wins over the server args'
    assert flat.verify_memory_tokens(ddtree_args(width=17), params, torch.bfloat16, num_draft_tokens=33) == 33
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    tokens = flat.verify_memory_tokens(ddtree_args(), params, torch.bfloat16)
    assert flat.verify_memory_tokens(ddtree_args(width=17), params, torch.bfloat16, num_draft_tokens=33) == tokens
    monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE")  # the default: flat
    assert flat.verify_memory_tokens(ddtree_args(), params, torch.bfloat16) == tokens
    per_node = 48 * ((2 * 16 * 128 + 48 * 128) * 3 * 2 + (16 * 128 + 48 * 128) * 2 + 2 * 48 * 4)
    scratch = 15 * 48 * 128 * 128 * 4  # one layer's state for each of 15 open branch nodes
    assert tokens * params.mamba_cache_per_req == pytest.approx(33 * per_node + scratch)
    assert scratch / 2**20 == 45
    # At this shape a flat node holds 3.58 MiB (conv window 2.81 + stash 0.77), a snapshot
    # node 146.8 MiB: 41x less per verify token.
    assert per_node / 2**20 == pytest.approx(3.58, abs=0.01)
    assert params.mamba_cache_per_req / per_node == pytest.approx(41.0, abs=0.1)


@pytest.mark.usefixtures("compat_0514")
@pytest.mark.parametrize("width", [16, 33, 65])
def test_the_bench_states_the_flat_memory_the_payload_reserves(monkeypatch, width):
    """bench.state_memory restates these formulas (the bench runs without triton): at Qwen3.6-27B's
    shape, block 16, its parts and its per-request sum must be the payload's own."""
    from ddtree_overlay.bench import settings, state_memory
    from ddtree_overlay.bench.target_config import target_config

    gdn = target_config(settings.qwen3_6_27b_configs()[0]).gated_deltanet
    assert flat.envs.SGLANG_DDTREE_HYBRID_STATE.choices == state_memory.HYBRID_STATES  # default first
    assert state_memory.stash_bytes_per_node(gdn) == flat.stash_bytes_per_node(
        layers=48, key_heads=16, value_heads=48, k_dim=128, v_dim=128, activation_itemsize=2
    )
    assert state_memory.branch_slots(width, BLOCK) == flat.branch_slots(width, BLOCK)
    assert state_memory.scratch_bytes_per_request(gdn, width, BLOCK) == flat.scratch_bytes_per_request(
        width=width, block_size=BLOCK, value_heads=48, v_dim=128, k_dim=128
    )
    params = qwen36_cache_params()
    assert state_memory.node_bytes(gdn, "snapshot") == params.mamba_cache_per_req
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    reserved = flat.verify_memory_tokens(ddtree_args(width=width, block_size=BLOCK), params, torch.bfloat16)
    bench = state_memory.verify_state(gdn, "flat", verify_width=width, block_size=BLOCK)
    assert bench["per_request_bytes"] == pytest.approx(reserved * params.mamba_cache_per_req, rel=1e-12)
    if width == 33:  # scripts/gpu/gdn_flat_state.py on an H200, 2026-12-02
        assert bench["per_request_bytes"] / 2**20 == pytest.approx(163.1, abs=0.05)


@pytest.mark.usefixtures("compat_0514")
def test_the_pool_keeps_no_ssm_snapshots_in_flat_mode(monkeypatch):
    server_args = types.ModuleType("sglang.srt.server_args")
    server_args.get_global_server_args = ddtree_args
    monkeypatch.setitem(sys.modules, "sglang.srt.server_args", server_args)
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    assert flat.ssm_snapshot_tokens(33) == 0
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    assert flat.ssm_snapshot_tokens(33) == 33
    monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE")  # the default: flat
    assert flat.ssm_snapshot_tokens(33) == 0

    def unset():
        raise ValueError("Global server args is not set yet!")

    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    server_args.get_global_server_args = unset  # a pool made outside a server
    assert flat.ssm_snapshot_tokens(33) == 33


def fake_model_runner(*, draft=False, block_size=16):
    """A hybrid target's model runner after _init_pools: a GDN-shaped pool of 2 layers."""
    layers, rows, width, hv, v_dim, k_dim, heads = 2, 3, 5, 2, 8, 8, 1
    spec_state = types.SimpleNamespace(
        temporal=torch.zeros(layers, 4, hv, v_dim, k_dim),
        intermediate_conv_window=[torch.zeros(layers, rows, width, 2 * heads * k_dim + hv * v_dim, 3)],
    )
    pool = types.SimpleNamespace(
        get_speculative_mamba2_params_all_layers=lambda: spec_state, mamba_map={0: 0, 2: 1}
    )
    args = ddtree_args()
    args.speculative_dflash_block_size = block_size
    return types.SimpleNamespace(
        server_args=args, req_to_token_pool=pool, is_draft_worker=draft, dtype=torch.bfloat16
    )


@pytest.mark.usefixtures("compat_0514")
def test_install_gives_the_target_a_stash_before_its_graphs(monkeypatch):
    monkeypatch.setattr(flat, "_flat_tree_verify", None)
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    flat.install_flat_state(fake_model_runner(draft=True))
    assert flat.flat_tree_verify() is None  # the drafter shares the pool, not the verify
    flat.install_flat_state(fake_model_runner(block_size=10))
    verify = flat.flat_tree_verify()
    assert verify.layer_index == {0: 0, 2: 1} and verify.max_path == 16 and verify.first_layer == 0
    stash = verify.stash
    assert (stash.rows, stash.width, stash.k.dtype) == (3, 5, torch.bfloat16)
    assert tuple(stash.k.shape) == (2, 15, 1, 8) and tuple(stash.v.shape) == (2, 15, 2, 8)
    # One layer's scratch: 3 request rows, 2 slots (width 5: two branch nodes at most), fp32.
    assert tuple(verify.scratch.shape) == (3, 2, 2, 8, 8) and verify.scratch.dtype == torch.float32


@pytest.mark.usefixtures("compat_0514")
def test_install_leaves_snapshot_mode_alone(monkeypatch):
    monkeypatch.setattr(flat, "_flat_tree_verify", None)
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    flat.install_flat_state(fake_model_runner())
    assert flat.flat_tree_verify() is None
    monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE")  # the default: flat
    flat.install_flat_state(fake_model_runner())
    assert flat.flat_tree_verify() is not None



def test_0519_family_reads_the_flags_from_the_spec_bag(monkeypatch, compat_0519):
    record = compat_0519.record
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    assert flat.flat_state_requested(record)
    publish_0519(monkeypatch, ddtree_args(topk=1), record)  # a dense target: no tree top-k
    assert not flat.flat_state_requested(record)
    publish_0519(monkeypatch, ddtree_args(algorithm="EAGLE"), record)
    assert not flat.flat_state_requested(record)
    publish_0519(monkeypatch, ddtree_args(), record)
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    assert not flat.flat_state_requested(record)
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    install_shim(monkeypatch, "sglang-0.5.14", (0, 5, 14))  # the record alone holds no tree
    assert not flat.flat_state_requested(record)


def test_0519_family_pool_keeps_no_ssm_snapshots_in_flat_mode(monkeypatch, compat_0519):
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    assert flat.ssm_snapshot_tokens(33) == 0
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
    assert flat.ssm_snapshot_tokens(33) == 33
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    publish_0519(monkeypatch, ddtree_args(), None)  # a pool made outside a server
    assert flat.ssm_snapshot_tokens(33) == 33


def test_0519_family_split_and_install_take_the_width_and_block_from_the_spec_bag(
    monkeypatch, compat_0519
):
    params = qwen36_cache_params()
    monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
    per_node = 48 * ((2 * 16 * 128 + 48 * 128) * 3 * 2 + (16 * 128 + 48 * 128) * 2 + 2 * 48 * 4)
    scratch = 15 * 48 * 128 * 128 * 4  # width 33, block 16: 15 open branch nodes
    tokens = flat.verify_memory_tokens(compat_0519.record, params, torch.bfloat16)
    assert tokens * params.mamba_cache_per_req == pytest.approx(33 * per_node + scratch)

    monkeypatch.setattr(flat, "_flat_tree_verify", None)
    publish_0519(monkeypatch, ddtree_args(block_size=10), compat_0519.record)
    runner = fake_model_runner()
    runner.server_args = compat_0519.record
    flat.install_flat_state(runner)
    verify = flat.flat_tree_verify()
    assert verify.max_path == flat.max_path_len(10)
    assert tuple(verify.scratch.shape) == (3, flat.branch_slots(5, 10), 2, 8, 8)

AOT_SCRIPT = """
import json
from aot_build import CAPABILITIES, compile_for
from payload_modules import load_payload_module
flat = load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")
# Qwen3.6-27B's GDN layers at TP 1 and at TP 2 (a rank's half of the heads)
shapes = [dict(H=16 // tp, HV=48 // tp, K=128, V=128, BK=128, BV=32, L2NORM_EPS=flat.L2NORM_EPS) for tp in (1, 2)]
verify = {
    "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "a_ptr": "*bf16", "b_ptr": "*bf16",
    "A_log_ptr": "*fp32", "dt_bias_ptr": "*fp32", "o_ptr": "*bf16", "state_ptr": "*fp32",
    "slot_ptr": "*i32", "walk_ptr": "*i32", "scratch_ptr": "*fp32", "stash_k_ptr": "*bf16",
    "stash_v_ptr": "*bf16", "stash_g_ptr": "*fp32", "stash_beta_ptr": "*fp32", "n_tokens": "i32",
    "scratch_rows": "i32", "stash_rows": "i32", "stash_width": "i32", "stride_q_tok": "i64",
    "stride_q_head": "i64", "stride_k_tok": "i64", "stride_k_head": "i64", "stride_v_tok": "i64",
    "stride_v_head": "i64", "stride_a_tok": "i64", "stride_b_tok": "i64", "stride_state_slot": "i64",
    "stride_scratch_req": "i64", "stride_scratch_slot": "i64", "scale": "fp32",
}
walk = {"parent_ptr": "*i32", "walk_ptr": "*i32", "n_tokens": "i32", "slots": "i32", "stride_parent_req": "i64"}
replay = {
    "state_ptr": "*fp32", "stash_k_ptr": "*bf16", "stash_v_ptr": "*bf16", "stash_g_ptr": "*fp32",
    "stash_beta_ptr": "*fp32", "slot_ptr": "*i32", "track_slot_ptr": "*i64", "accept_index_ptr": "*i32",
    "accept_len_ptr": "*i32", "prefix_len_ptr": "*i64", "track_interval": "i32", "n_tokens": "i32",
    "stash_width": "i32",
    "stride_state_layer": "i64", "stride_state_slot": "i64", "stride_stash_k_layer": "i64",
    "stride_stash_v_layer": "i64", "stride_stash_gb_layer": "i64", "stride_accept_req": "i64",
}

built = []
for capability in CAPABILITIES:
    for kernel, signature, constants in (
        *(
            (flat._tree_verify_kernel, verify, dict(gdn, BV=flat.verify_v_block(bs, 128), HAS_PARENTS=True, STASH=True, SOFTPLUS_THRESHOLD=flat.SOFTPLUS_THRESHOLD, PREFETCH=depth))
            for gdn in shapes for bs in (1, 8) for depth in (0, 1, 2)
        ),
        (flat._tree_verify_kernel, verify, dict(shapes[0], BV=flat.verify_v_block(8, 128), HAS_PARENTS=False, STASH=False, SOFTPLUS_THRESHOLD=flat.SOFTPLUS_THRESHOLD, PREFETCH=2)),
        *((flat._replay_commit_kernel, replay, dict(gdn, MAX_PATH=16, HAS_TRACK=True)) for gdn in shapes),
        (flat._tree_walk_kernel, walk, dict(BN=64)),
        (flat._tree_walk_kernel, walk, dict(BN=512)),
    ):
        signature = dict(signature, **{name: "constexpr" for name in constants})
        built.append(compile_for(kernel, signature, constants, capability, num_warps=1))
print(json.dumps(built))
"""


@pytest.mark.slow
def test_the_kernels_compile_ahead_of_time_for_sm86_sm90_and_sm120():
    """For the RTX A6000, the H200 and the RTX PRO 6000, at Qwen3.6-27B's GDN shape at TP 1 and
    2: ptxas ships inside the triton wheel, so the cubins build without a GPU or a driver (the
    interpreter accepts code the compiler would not). No kernel spills registers to a stack
    frame at the launches' one warp: a spilled state block would cost local-memory traffic at
    every step."""
    from aot_build import run_aot_script

    built = run_aot_script(AOT_SCRIPT, timeout=600)
    assert len(built) == 3 * 17 and all(size > 0 and stack == 0 for size, stack in built), built


SGLANG_TREE_KERNEL = "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"


@pytest.fixture(scope="module")
def sglang_tree_kernel(sglang_wheel, tmp_path_factory):
    """SGLang 0.5.14's own recurrent kernel (a torch + triton file), read from the wheel and
    loaded under the interpreter."""
    import importlib.util
    import zipfile

    path = tmp_path_factory.mktemp("sglang") / "fused_sigmoid_gating_recurrent.py"
    with zipfile.ZipFile(sglang_wheel) as wheel:
        path.write_bytes(wheel.read(SGLANG_TREE_KERNEL))
    spec = importlib.util.spec_from_file_location("sglang_fused_sigmoid_gating_recurrent", path)
    module = importlib.util.module_from_spec(spec)
    with triton_interpreter():
        spec.loader.exec_module(module)
    return module


def test_outputs_and_committed_state_match_sglangs_snapshot_tree_verify(sglang_tree_kernel):
    """SGLang's tree verify as target_verify calls it: per-node snapshots, each node from its
    parent's; the flat path's outputs and replayed state at the accepted leaf must agree."""
    bs, n = 2, 7
    parents = random_parents(bs, n, depth_cap=4, seed=40)
    layer = Layer(bs, n, seed=40)
    snapshots = torch.zeros(bs + 1, n, *layer.state.shape[1:])
    with triton_interpreter():
        o_sglang = sglang_tree_kernel.fused_sigmoid_gating_delta_rule_update(
            A_log=layer.A_log, a=layer.a, dt_bias=layer.dt_bias, softplus_beta=1.0,
            softplus_threshold=20.0, q=layer.q, k=layer.k, v=layer.v, b=layer.b,
            initial_state_source=layer.state, initial_state_indices=layer.slots,
            cu_seqlens=torch.arange(0, bs * n + 1, n, dtype=torch.int32),
            use_qk_l2norm_in_kernel=True, disable_state_update=True,
            intermediate_states_buffer=snapshots,
            intermediate_state_indices=torch.arange(bs, dtype=torch.int32),
            cache_steps=n, retrieve_parent_token=parents,
        )
    stash = layer.stash(rows=bs, width=n)
    o_flat = layer.verify(parents, stash=stash)
    torch.testing.assert_close(o_flat, o_sglang[0], atol=ATOL, rtol=RTOL)
    leaves = [6, 3]
    paths = [accepted(parents, i, leaf) for i, leaf in enumerate(leaves)]
    accept_index = torch.full((bs, BLOCK), -1, dtype=torch.int64)
    for i, path in enumerate(paths):
        accept_index[i, : len(path)] = torch.tensor(path) + i * n
    pool = layer.state[None].clone()
    with triton_interpreter():
        flat.replay_commit(
            ssm_states=pool, stash=stash, cache_indices=layer.slots, accept_index=accept_index,
            accept_lens=torch.tensor([len(p) for p in paths], dtype=torch.int32),
            num_verify_tokens=n, max_path=MAX_PATH,
        )
    for i, leaf in enumerate(leaves):
        torch.testing.assert_close(pool[0, int(layer.slots[i])], snapshots[i, leaf], atol=ATOL, rtol=RTOL)
