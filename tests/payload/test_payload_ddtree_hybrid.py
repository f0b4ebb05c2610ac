"""The hybrid-target commit (overlay/.../ddtree_hybrid.py) on fake recurrent-state pools.

A snapshot-mode tree verify leaves one recurrent-state snapshot and conv window per verify node:
request i's node s at flat row i * W + s for the pool's width W (the widest verify width),
whatever the round's width. The commit must copy the last accepted node's into the request's
live slot, and the tracking node's into the prefix-cache slot where a tracking boundary was
crossed. In flat mode only the conv windows are copied and the SSM state is replayed from the
stashed inputs (its kernels are tested in test_payload_ddtree_gdn_tree). The copy kernel runs in Triton's CPU interpreter (see
test_payload_ddtree_kernels for why the variable is set only around the import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
from payload_modules import OVERLAY, load_payload_module, triton_interpreter

torch = pytest.importorskip("torch")
with triton_interpreter():
    triton = pytest.importorskip("triton", reason="triton is not installed (the `test` extra brings it)")
    gdn_tree = load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")
    hybrid = load_payload_module("sglang.srt.speculative.ddtree_hybrid")
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

if not isinstance(triton.language.zeros, InterpretedFunction):
    pytest.skip(
        "triton was imported before this module could turn its interpreter on; "
        "run this file in a process of its own",
        allow_module_level=True,
    )

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


@pytest.mark.parametrize("last_node", [MAX_WIDTH - 1, 4])
def test_commit_copies_each_requests_accepted_node_at_the_pools_pitch(last_node):
    pool = fake_pool()
    slots = torch.tensor([7, 2, 5], dtype=torch.int32)
    nodes = torch.tensor([3, 0, last_node])
    want_ssm, want_conv = expected_after(pool, slots, nodes)
    commit = hybrid.RecurrentStateCommit.from_pool(pool)
    with triton_interpreter():
        commit.copy_nodes(slots, nodes)
    assert torch.equal(pool.temporal, want_ssm)
    assert torch.equal(pool.conv[0], want_conv)


def test_tracking_copies_only_where_a_boundary_was_crossed():
    pool = fake_pool()
    live = torch.tensor([0, 1], dtype=torch.int32)
    track = torch.tensor([6, 8], dtype=torch.int32)
    last = torch.tensor([2, 4])
    track_steps = torch.tensor([-1, 1])
    want_ssm, want_conv = expected_after(pool, live, last)
    want_ssm[:, 8] = pool.intermediate_ssm[:, 1, 1]
    want_conv[:, 8] = pool.intermediate_conv_window[0][:, 1, 1]
    with triton_interpreter():
        hybrid.RecurrentStateCommit.from_pool(pool).copy_nodes(
            live, last, track_indices=track, track_steps=track_steps
        )
    assert torch.equal(pool.temporal, want_ssm)  # slot 6 (no crossing) untouched
    assert torch.equal(pool.conv[0], want_conv)


def test_commit_positions_follow_the_accepted_path_and_the_tracking_boundary():
    accept_lens = torch.tensor([3, 1], dtype=torch.int32)
    prefix = torch.tensor([14, 30])
    last, track = hybrid.commit_positions(accept_lens, prefix, track_interval=16)
    assert last.tolist() == [2, 0]
    # Request 0 goes 14 -> 17 and crosses 16 at its second token (path position 1).
    assert track.tolist() == [1, -1]
    assert hybrid.commit_positions(accept_lens, prefix, None)[1] is None


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


def test_concurrency_problem_leaves_each_request_its_flat_branch_scratch():
    commit = flat_commit(fake_gdn_pool())
    problem = hybrid.concurrency_problem(fake_model_runner(5, 3, 3), commit, block_size=2)
    per_request = commit.live_bytes_per_request
    budget = LIVE_SLOTS * per_request + commit.verify_bytes
    share = budget / 5 - 3 * per_request
    widest = int((share - commit.scratch_bytes_per_request) // commit.bytes_per_verify_token)
    assert widest < int(share // commit.bytes_per_verify_token)  # the scratch costs a node here
    assert f"largest budget that fits 5 requests is {widest - 1}" in problem


def test_concurrency_problem_is_quiet_when_the_state_is_not_the_cap():
    commit = hybrid.RecurrentStateCommit.from_pool(fake_pool())
    assert hybrid.concurrency_problem(fake_model_runner(None, 3, 3), commit, block_size=2) is None
    assert hybrid.concurrency_problem(fake_model_runner(3, 3, 3), commit, block_size=2) is None
    # Capped to 2, but the live slots hold 3 at ratio 3: the KV cache was the cap.
    assert hybrid.concurrency_problem(fake_model_runner(3, 2, 3), commit, block_size=2) is None


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
import json, sys
sys.path.insert(0, {tests!r})
from payload_modules import load_payload_module
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")
hybrid = load_payload_module("sglang.srt.speculative.ddtree_hybrid")
built = []
for state, index in (("*fp32", "*i64"), ("*bf16", "*i32")):
    signature = {{
        "dst_ptr": state, "src_ptr": state, "dst_slot_ptr": index, "src_row_ptr": "*i64",
        "dst_layer_stride": "i64", "dst_slot_stride": "i64", "src_layer_stride": "i64",
        "src_row_stride": "i64", "row_numel": "i32", "BLOCK": "constexpr",
    }}
    k = triton.compile(
        ASTSource(hybrid._copy_state_rows_kernel, signature, {{"BLOCK": hybrid._ROW_BLOCK}}),
        target=GPUTarget("cuda", 90, 32),
    )
    assert ".target sm_90a" in k.asm["ptx"]
    built.append(len(k.asm["cubin"]))
print(json.dumps(built))
"""


@pytest.mark.slow
def test_copy_kernel_compiles_ahead_of_time_for_sm90():
    """ptxas ships inside the triton wheel, so the cubin builds without a GPU or a driver."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    tests_dir = str(OVERLAY.parent / "tests")
    result = subprocess.run(
        [sys.executable, "-c", AOT_SCRIPT.format(tests=tests_dir)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    built = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(built) == 2 and all(size > 0 for size in built)
