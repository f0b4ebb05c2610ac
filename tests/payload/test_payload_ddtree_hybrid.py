"""The hybrid-target commit (overlay/.../ddtree_hybrid.py) on fake recurrent-state pools.

A snapshot-mode tree verify leaves one recurrent-state snapshot and conv window per verify node:
request i's node s at flat row i * W + s for the pool's width W (the widest verify width),
whatever the round's width. The commit must copy the last accepted node's into the request's
live slot, and the tracking node's into the prefix-cache slot where a tracking boundary was
crossed. In flat mode only the conv windows are copied and the SSM state is replayed from the
stashed inputs (its kernels are tested in test_payload_ddtree_gdn_tree). The kernels find those
nodes themselves; the torch ops the payload used before (commit_positions, nodes_at) are the
oracle. They run in Triton's CPU interpreter (see test_payload_ddtree_kernels for why the
variable is set only around the import).
"""

from __future__ import annotations

import types

import pytest
from aot_build import run_aot_script
from payload_modules import load_payload_module, skip_unless_interpreted, triton_interpreter

torch = pytest.importorskip("torch")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    gdn_tree = load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")
    hybrid = load_payload_module("sglang.srt.speculative.ddtree_hybrid")

skip_unless_interpreted(triton)

LAYERS, LIVE_SLOTS, SPEC_SLOTS, MAX_WIDTH = 3, 9, 4, 8
SSM_ROW, CONV_ROW = (2, 3, 5), (6, 3)


def fake_pool():
    """A SpeculativeState-shaped pool with distinct values everywhere."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    return types.SimpleNamespace(
        temporal=rand(LAYERS, LIVE_SLOTS, *SSM_ROW),
        intermediate_ssm=rand(LAYERS, SPEC_SLOTS, MAX_WIDTH, *SSM_ROW),
        conv=[rand(LAYERS, LIVE_SLOTS, *CONV_ROW)],
        intermediate_conv_window=[rand(LAYERS, SPEC_SLOTS, MAX_WIDTH, *CONV_ROW)],
    )


def expected_after(pool, slots, nodes):
    """What the commit must leave: torch indexing over the same snapshots, per request."""
    ssm, conv = pool.temporal.clone(), pool.conv[0].clone()
    for i, (slot, node) in enumerate(zip(slots.tolist(), nodes.tolist(), strict=True)):
        if node < 0:
            continue
        ssm[:, slot] = pool.intermediate_ssm[:, i, node]
        conv[:, slot] = pool.intermediate_conv_window[0][:, i, node]
    return ssm, conv


# The commit's specification in torch ops, as the payload computed it before its kernels found
# the nodes themselves.


def commit_positions(accept_lens, prefix_lens, track_interval):
    """Accepted-path position of each request's state to commit, and of the prefix-cache
    tracking point (-1: no interval boundary crossed this round; None: no tracking)."""
    accept_lens = accept_lens.to(torch.int64)
    last = accept_lens - 1
    if track_interval is None:
        return last, None
    pre = prefix_lens.to(torch.int64)
    post = pre + accept_lens
    crossed = pre // track_interval != post // track_interval
    ith = torch.clamp(post // track_interval * track_interval - pre - 1, min=0)
    return last, torch.where(crossed, ith, torch.full_like(ith, -1))


def nodes_at(accept_index, positions, num_verify_tokens):
    """Verify-block node at each request's path position (-1 where the position is < 0)."""
    req = torch.arange(int(positions.shape[0]), dtype=torch.int64)
    rows = accept_index[req, positions.clamp(min=0)].to(torch.int64) - req * int(num_verify_tokens)
    return torch.where(positions >= 0, rows, torch.full_like(rows, -1))


def committed_by_torch(pool, rnd, stash=None):
    """(SSM state, conv states) the commit of round ``rnd`` must leave: the nodes from
    commit_positions and nodes_at, rows copied by indexing at the pool's pitch (the SSM state
    too with snapshots), and with a flat-mode ``stash`` the SSM state replayed along each path."""
    ssm, conv = pool.temporal.clone(), [state.clone() for state in pool.conv]
    last_pos, track_pos = commit_positions(rnd.accept_lens, rnd.prefix_lens, rnd.track_interval)
    targets = [(rnd.live, nodes_at(rnd.accept_index, last_pos, rnd.n))]
    if track_pos is not None:
        targets.append((rnd.track, nodes_at(rnd.accept_index, track_pos, rnd.n)))
    for slots, nodes in targets:
        for i, (slot, node) in enumerate(zip(slots.tolist(), nodes.tolist(), strict=True)):
            if slot < 0 or node < 0:
                continue
            if stash is None:
                ssm[:, slot] = pool.intermediate_ssm[:, i, node]
            for state, windows in zip(conv, pool.intermediate_conv_window, strict=True):
                state[:, slot] = windows[:, i, node]
    if stash is None:
        return ssm, conv
    for i, slot in enumerate(rnd.live.tolist()):
        if slot < 0:
            continue
        length = int(rnd.accept_lens[i])
        path = [int(r) - i * rnd.n + i * stash.width for r in rnd.accept_index[i, :length]]
        track_slot = int(rnd.track[i]) if track_pos is not None else -1
        for layer in range(LAYERS):
            gdn_tree.replay_commit_torch(
                ssm[layer], stash, layer, slot, path,
                track_slot=track_slot, track_pos=int(track_pos[i]) if track_slot >= 0 else -1,
            )
    return ssm, conv


def test_commit_positions_follow_the_accepted_path_and_the_tracking_boundary():
    accept_lens = torch.tensor([3, 1], dtype=torch.int32)
    prefix = torch.tensor([14, 30])
    last, track = commit_positions(accept_lens, prefix, track_interval=16)
    assert last.tolist() == [2, 0]
    # Request 0 goes 14 -> 17 and crosses 16 at its second token (path position 1).
    assert track.tolist() == [1, -1]
    assert commit_positions(accept_lens, prefix, None)[1] is None


def test_a_snapshot_round_commits_the_last_accepted_node_and_the_tracking_node():
    pool = fake_pool()
    n = 6  # a narrower round than the pool's width: rows stay at the pool's pitch
    # Request 0 accepts root -> node 2 -> node 4 and crosses a tracking boundary at node 2;
    # request 1 only its root.
    accept_index = torch.tensor([[0, 2, 4, -1], [6, -1, -1, -1]])
    accept_lens = torch.tensor([3, 1], dtype=torch.int32)
    live, track = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([6, 8], dtype=torch.int32)
    want_ssm, want_conv = expected_after(pool, live, torch.tensor([4, 0]))
    want_ssm[:, 6] = pool.intermediate_ssm[:, 0, 2]
    want_conv[:, 6] = pool.intermediate_conv_window[0][:, 0, 2]
    with triton_interpreter():
        hybrid.RecurrentStateCommit.from_pool(pool).commit(
            live, accept_index, accept_lens, n, torch.tensor([14, 30]),
            track_indices=track, track_interval=16,
        )
    assert torch.equal(pool.temporal, want_ssm)
    assert torch.equal(pool.conv[0], want_conv)


def test_memory_figures_come_from_the_pool():
    commit = hybrid.RecurrentStateCommit.from_pool(fake_pool())
    per_token = LAYERS * (2 * 3 * 5 + 6 * 3) * 4
    assert commit.bytes_per_verify_token == per_token
    assert commit.verify_bytes == per_token * SPEC_SLOTS * MAX_WIDTH
    assert commit.mode == "snapshot"
    assert commit.live_bytes_per_request == per_token
    assert "MiB per request per verify token" in commit.describe()


def test_a_pool_without_snapshots_is_refused():
    pool = fake_pool()
    pool.intermediate_ssm = None
    with pytest.raises(ValueError, match="replayssm"):
        hybrid.RecurrentStateCommit.from_pool(pool)


# A Gated-DeltaNet-shaped pool: conv channels [q | k | v] = 2 * H * K + HV * V.
GDN_HEADS, GDN_VALUE_HEADS, GDN_K, GDN_V, GDN_CONV_WIDTH = 1, 2, 4, 4, 3
GDN_CHANNELS = 2 * GDN_HEADS * GDN_K + GDN_VALUE_HEADS * GDN_V


def fake_gdn_pool():
    """A flat-mode pool: live states and per-node conv windows, no SSM snapshots."""
    gen = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    return types.SimpleNamespace(
        temporal=rand(LAYERS, LIVE_SLOTS, GDN_VALUE_HEADS, GDN_V, GDN_K),
        intermediate_ssm=torch.zeros(LAYERS, SPEC_SLOTS, 0, GDN_VALUE_HEADS, GDN_V, GDN_K),
        conv=[rand(LAYERS, LIVE_SLOTS, GDN_CHANNELS, GDN_CONV_WIDTH)],
        intermediate_conv_window=[rand(LAYERS, SPEC_SLOTS, MAX_WIDTH, GDN_CHANNELS, GDN_CONV_WIDTH)],
    )


def flat_commit(pool, dtype=torch.float32, block_size=16):
    stash = gdn_tree.GDNInputStash.for_pool(pool, dtype)
    scratch = gdn_tree.allocate_branch_scratch(
        rows=stash.rows, width=stash.width, block_size=block_size, value_heads=GDN_VALUE_HEADS,
        v_dim=GDN_V, k_dim=GDN_K, device="cpu",
    )
    return hybrid.RecurrentStateCommit.flat(pool, stash, gdn_tree.max_path_len(block_size), scratch)


def test_flat_memory_figures_are_conv_windows_stashed_inputs_and_the_branch_scratch():
    commit = flat_commit(fake_gdn_pool(), torch.bfloat16)
    conv_per_node = LAYERS * GDN_CHANNELS * GDN_CONV_WIDTH * 4
    stash_per_node = LAYERS * ((GDN_HEADS * GDN_K + GDN_VALUE_HEADS * GDN_V) * 2 + 2 * GDN_VALUE_HEADS * 4)
    scratch = gdn_tree.branch_slots(MAX_WIDTH, 16) * GDN_VALUE_HEADS * GDN_V * GDN_K * 4  # one layer
    assert commit.mode == "flat"
    assert commit.stash.bytes_per_node == stash_per_node
    assert commit.bytes_per_verify_token == conv_per_node + stash_per_node
    assert commit.scratch_bytes_per_request == scratch
    assert commit.verify_bytes == ((conv_per_node + stash_per_node) * MAX_WIDTH + scratch) * SPEC_SLOTS
    assert (commit.stash.rows, commit.stash.width) == (SPEC_SLOTS, MAX_WIDTH)
    assert "flat recurrent state (conv windows + stashed inputs, no SSM snapshots)" in commit.describe()
    assert f"its {scratch / 2**20:.1f} MiB branch scratch included" in commit.describe()


def test_flat_state_is_refused_on_a_pool_that_is_not_gdn_shaped():
    with pytest.raises(ValueError, match="conv channels"):
        gdn_tree.GDNInputStash.for_pool(fake_pool(), torch.float32)


def test_a_flat_round_copies_conv_windows_and_replays_the_ssm_state():
    pool = fake_gdn_pool()
    commit = flat_commit(pool)
    gen = torch.Generator().manual_seed(2)
    for stashed in (commit.stash.k, commit.stash.v, commit.stash.g, commit.stash.beta):
        stashed.copy_(torch.randn(stashed.shape, generator=gen) * 0.5)
    n = 6
    accept_index = torch.tensor([[0, 2, 4, -1], [6, -1, -1, -1]])
    accept_lens = torch.tensor([3, 1], dtype=torch.int32)
    live, track = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([6, 8], dtype=torch.int32)
    want_ssm, want_conv = pool.temporal.clone(), pool.conv[0].clone()
    for layer in range(LAYERS):  # stash rows at the pool's pitch: request i's node s at i * W + s
        gdn_tree.replay_commit_torch(
            want_ssm[layer], commit.stash, layer, 0, [0, 2, 4], track_slot=6, track_pos=1
        )
        gdn_tree.replay_commit_torch(want_ssm[layer], commit.stash, layer, 1, [MAX_WIDTH])
    for slot, (req, node) in {0: (0, 4), 1: (1, 0), 6: (0, 2)}.items():
        want_conv[:, slot] = pool.intermediate_conv_window[0][:, req, node]
    with triton_interpreter():
        commit.commit(
            live, accept_index, accept_lens, n, torch.tensor([14, 30]),
            track_indices=track, track_interval=16,
        )
    torch.testing.assert_close(pool.temporal, want_ssm, atol=1e-5, rtol=1e-5)
    assert torch.equal(pool.conv[0], want_conv)


ROUND_WIDTH, ACCEPT_WIDTH = 6, 5  # a narrower round than the pool's: rows stay at its pitch


def accepted_round(accept_lens, prefix_lens, live, track, track_interval, seed):
    """A round's acceptance: each request's path from the root through random later nodes of a
    ROUND_WIDTH verify block, as global rows (i * ROUND_WIDTH + node), -1 past it."""
    gen = torch.Generator().manual_seed(seed)
    accept_index = torch.full((len(accept_lens), ACCEPT_WIDTH), -1, dtype=torch.int32)
    for i, length in enumerate(accept_lens):
        later = torch.randperm(ROUND_WIDTH - 1, generator=gen)[: max(length - 1, 0)] + 1
        path = torch.cat([torch.zeros(1, dtype=torch.int64), later.sort().values])[:length]
        accept_index[i, :length] = path + i * ROUND_WIDTH
    return types.SimpleNamespace(
        accept_index=accept_index,
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
        prefix_lens=torch.tensor(prefix_lens),
        live=torch.tensor(live, dtype=torch.int32),
        track=torch.tensor(track),
        track_interval=track_interval,
        n=ROUND_WIDTH,
    )


def boundary_round(tracking):
    """Interval 16: request 0 crosses 16 at path position 1, request 1 crosses nothing,
    request 2 crosses at position 0 (its root), request 3 is padding (nothing accepted)."""
    return accepted_round(
        [4, 3, 2, 0], [14, 20, 15, 31], live=[7, 2, 5, 0], track=[6, 8, 1, 4],
        track_interval=16 if tracking else None, seed=5,
    )


def random_round(tracking):
    """Random lengths and prefixes at interval 3 (a path may cross two boundaries); request 1
    has no live slot and request 2 no tracking slot."""
    gen = torch.Generator().manual_seed(15)
    accept_lens = torch.randint(1, ACCEPT_WIDTH + 1, (SPEC_SLOTS,), generator=gen).tolist()
    prefix_lens = torch.randint(0, 40, (SPEC_SLOTS,), generator=gen).tolist()
    slots = torch.randperm(LIVE_SLOTS, generator=gen).tolist()
    live, track = slots[:SPEC_SLOTS], slots[SPEC_SLOTS : 2 * SPEC_SLOTS]
    live[1], track[2] = -1, -1
    return accepted_round(
        accept_lens, prefix_lens, live=live, track=track,
        track_interval=3 if tracking else None, seed=7,
    )


def test_the_rounds_cover_the_tracking_cases():
    rnd = boundary_round(tracking=True)
    assert commit_positions(rnd.accept_lens, rnd.prefix_lens, 16)[1].tolist() == [1, -1, 0, -1]
    rnd = random_round(tracking=True)
    pre, post = rnd.prefix_lens, rnd.prefix_lens + rnd.accept_lens
    assert (post // 3 - pre // 3 >= 2).any() and (post // 3 == pre // 3).any()


def with_conv_entries(pool, entries):
    """The pool with ``entries`` conv tensors: the first its own, then bf16 ones of another row
    size."""
    gen = torch.Generator().manual_seed(3)
    for _ in range(entries - 1):
        pool.conv.append(torch.randn(LAYERS, LIVE_SLOTS, 5, 2, generator=gen).to(torch.bfloat16))
        windows = torch.randn(LAYERS, SPEC_SLOTS, MAX_WIDTH, 5, 2, generator=gen)
        pool.intermediate_conv_window.append(windows.to(torch.bfloat16))
    return pool


def filled_flat_commit(pool):
    commit = flat_commit(pool)
    gen = torch.Generator().manual_seed(2)
    for stashed in (commit.stash.k, commit.stash.v, commit.stash.g, commit.stash.beta):
        stashed.copy_(torch.randn(stashed.shape, generator=gen) * 0.5)
    return commit


@pytest.mark.parametrize("make_round", [boundary_round, random_round])
@pytest.mark.parametrize("conv_entries", [1, 2])
@pytest.mark.parametrize("tracking", [True, False])
@pytest.mark.parametrize("mode", ["snapshot", "flat"])
def test_the_kernels_find_the_nodes_the_torch_ops_did(mode, tracking, conv_entries, make_round):
    """Every launch pattern: snapshot mode copies SSM + conv windows in pairs (one launch for
    SSM + one conv tensor, two with a second conv tensor), flat mode the conv windows (one
    launch) and replays the SSM state."""
    rnd = make_round(tracking)
    if mode == "snapshot":
        pool = with_conv_entries(fake_pool(), conv_entries)
        commit = hybrid.RecurrentStateCommit.from_pool(pool)
    else:
        pool = with_conv_entries(fake_gdn_pool(), conv_entries)
        commit = filled_flat_commit(pool)
    before = [state.clone() for state in pool.conv]
    want_ssm, want_conv = committed_by_torch(pool, rnd, commit.stash)
    with triton_interpreter():
        commit.commit(
            rnd.live, rnd.accept_index, rnd.accept_lens, rnd.n, rnd.prefix_lens,
            track_indices=rnd.track if tracking else None, track_interval=rnd.track_interval,
        )
    if mode == "snapshot":
        assert torch.equal(pool.temporal, want_ssm)
    else:
        torch.testing.assert_close(pool.temporal, want_ssm, atol=1e-5, rtol=1e-5)
    for got, want, old in zip(pool.conv, want_conv, before, strict=True):
        assert not torch.equal(want, old)
        assert torch.equal(got, want)


def fake_model_runner(requested, fitted, ratio):
    return types.SimpleNamespace(
        server_args=types.SimpleNamespace(max_running_requests=requested),
        max_running_requests=fitted,
        _calculate_mamba_ratio=lambda: ratio,
    )


def test_concurrency_problem_names_what_fits():
    commit = hybrid.RecurrentStateCommit.from_pool(fake_pool())
    # 9 live slots at ratio 3 hold 3 requests; 8 were asked for.
    problem = hybrid.concurrency_problem(fake_model_runner(8, 3, 3), commit, block_size=2)
    per_request = commit.live_bytes_per_request
    budget = LIVE_SLOTS * per_request + commit.verify_bytes
    widest = int((budget / 8 - 3 * per_request) // commit.bytes_per_verify_token)
    assert "only 3 of the requested 8 concurrent requests fit" in problem
    assert f"largest budget that fits 8 requests is {widest - 1}" in problem
    assert "--max-running-requests 3" in problem
    assert problem.endswith(" The default flat state keeps no SSM snapshots: unset SGLANG_DDTREE_HYBRID_STATE.")


def test_concurrency_problem_leaves_each_request_its_flat_branch_scratch():
    commit = flat_commit(fake_gdn_pool())
    problem = hybrid.concurrency_problem(fake_model_runner(5, 3, 3), commit, block_size=2)
    per_request = commit.live_bytes_per_request
    budget = LIVE_SLOTS * per_request + commit.verify_bytes
    share = budget / 5 - 3 * per_request
    widest = int((share - commit.scratch_bytes_per_request) // commit.bytes_per_verify_token)
    assert widest < int(share // commit.bytes_per_verify_token)  # the scratch costs a node here
    assert f"largest budget that fits 5 requests is {widest - 1}" in problem
    assert problem.endswith("(or raise --mem-fraction-static).")  # already the flat state


def test_concurrency_problem_is_quiet_when_the_state_is_not_the_cap():
    commit = hybrid.RecurrentStateCommit.from_pool(fake_pool())
    assert hybrid.concurrency_problem(fake_model_runner(None, 3, 3), commit, block_size=2) is None
    assert hybrid.concurrency_problem(fake_model_runner(3, 3, 3), commit, block_size=2) is None
    # Capped to 2, but the live slots hold 3 at ratio 3: the KV cache was the cap.
    assert hybrid.concurrency_problem(fake_model_runner(3, 2, 3), commit, block_size=2) is None


def test_too_few_requests_refuse_to_start_unless_told_to_serve_the_cap(monkeypatch):
    commit = hybrid.RecurrentStateCommit.from_pool(fake_pool())
    problem = hybrid.concurrency_problem(fake_model_runner(8, 3, 3), commit, block_size=2)
    monkeypatch.delenv("SGLANG_DDTREE_SERVE_FEWER_REQUESTS", raising=False)
    with pytest.raises(ValueError) as refused:
        hybrid.check_concurrency(fake_model_runner(8, 3, 3), commit, block_size=2)
    assert str(refused.value) == problem
    monkeypatch.setenv("SGLANG_DDTREE_SERVE_FEWER_REQUESTS", "1")
    warning = hybrid.check_concurrency(fake_model_runner(8, 3, 3), commit, block_size=2)
    assert warning == f"{problem} SGLANG_DDTREE_SERVE_FEWER_REQUESTS=1: serving SGLang's cap of 3 concurrent requests instead."


def test_requests_that_fit_start_quietly_with_or_without_the_switch(monkeypatch):
    commit = hybrid.RecurrentStateCommit.from_pool(fake_pool())
    for value in ("0", "1"):
        monkeypatch.setenv("SGLANG_DDTREE_SERVE_FEWER_REQUESTS", value)
        assert hybrid.check_concurrency(fake_model_runner(3, 3, 3), commit, block_size=2) is None


@pytest.mark.parametrize(
    ("config", "layers"),
    [
        ({"linear_num_value_heads": 8, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}, 3),
        ({"linear_num_value_heads": 8, "linear_layer_ids": [0, 1, 2, 4, 5, 6]}, 6),
        ({"num_hidden_layers": 4}, 0),
    ],
)
def test_gated_deltanet_layers(config, layers):
    text = types.SimpleNamespace(**config)
    wrapper = types.SimpleNamespace(get_text_config=lambda: text)
    assert hybrid.gated_deltanet_layers(wrapper) == layers


AOT_SCRIPT = """
import json
from aot_build import CAPABILITIES, compile_for
from payload_modules import load_payload_module
load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")
hybrid = load_payload_module("sglang.srt.speculative.ddtree_hybrid")

built = []
# Snapshot mode's SSM + conv pair and flat mode's conv windows; SGLang's index dtypes and int64.
for first, second, index in (("*fp32", "*bf16", "*i32"), ("*bf16", "*bf16", "*i64")):
    signature = {
        "a_dst_ptr": first, "a_src_ptr": first, "b_dst_ptr": second, "b_src_ptr": second,
        "slot_ptr": index, "track_slot_ptr": "*i64", "accept_index_ptr": index,
        "accept_len_ptr": "*i32", "prefix_len_ptr": "*i64", "track_interval": "i32",
        "n_tokens": "i32", "pitch": "i32", "stride_accept_req": "i64",
        **{f"{t}_{name}": "i64" for t in "ab" for name in (
            "dst_layer_stride", "dst_slot_stride", "src_layer_stride", "src_row_stride"
        )},
        "a_row_numel": "i32", "a_chunks": "i32", "b_row_numel": "i32", "chunks": "i32",
        "BLOCK": "constexpr",
    }
    for capability in CAPABILITIES:
        built.append(compile_for(hybrid._commit_rows_kernel, signature, {"BLOCK": hybrid._ROW_BLOCK}, capability))
print(json.dumps(built))
"""


@pytest.mark.slow
def test_the_commit_kernel_compiles_ahead_of_time_for_sm86_sm90_and_sm120():
    """ptxas ships inside the triton wheel, so the cubins build without a GPU or a driver: the
    interpreter accepts code the compiler would not. No register spills to a stack frame."""
    built = run_aot_script(AOT_SCRIPT, timeout=300)
    assert len(built) == 2 * 3 and all(size > 0 and stack == 0 for size, stack in built), built
