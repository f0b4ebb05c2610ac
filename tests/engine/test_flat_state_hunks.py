"""The flat GDN recurrent state's hunks on every release they are wired for, against that
release's own stock files (read from its wheel in the matrix cache, ~/.cache/ddtree-overlay/
matrix/wheels; `ddtree-overlay matrix` fills it).

Each hunk must apply at its own line (no offset), and the patched files must do what the flat
state needs: the GDN target verify dispatches to ``flat_tree_verify()`` before SGLang's kernel,
every pool that allocates per-node SSM snapshots sizes them by ``ssm_snapshot_tokens`` (0 in
flat mode - the default - evaluated here through the payload's own function), the hybrid memory split
multiplies by ``verify_tokens`` wherever it multiplied by the verify width, and the model
runner installs the flat state right after its pools. The pools read the switch through the
release's own ``ddtree_compat`` (the one its manifest installs), with a server whose DDTREE hook
set the tree top-k the way that release resolves it (0.5.19+: declared into the spec bag, the
record left without it). Every bundled release is wired.
"""

from __future__ import annotations

import ast
import re
import sys
import types
import zipfile

import pytest
from overlay_helpers import REPO_ROOT
from payload_modules import load_compat_shim, load_payload_module, triton_interpreter
from release_wheels import apply_at_own_lines, release_diffs, stock_wheel

from ddtree_overlay.engine.patchset import load_patch_set

pytestmark = pytest.mark.sglang

WIRED = (
    "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
    "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)  # fmt: skip
COMPAT = "sglang/srt/speculative/ddtree_compat.py"
GDN_BACKEND = "sglang/srt/layers/attention/linear/gdn_backend.py"
POOLS = ("sglang/srt/mem_cache/memory_pool.py", "sglang/srt/mem_cache/unified_memory_pool.py")
SPLIT = {  # the hybrid memory split, and where the flat state is installed after the pools
    "0.5.14": ("model_runner_kv_cache_mixin.py", "handle_max_mamba_cache", "_apply_memory_pool_config"),
    "0.5.15": ("model_runner_kv_cache_mixin.py", "handle_max_mamba_cache", "_apply_memory_pool_config"),
}
LATER_SPLIT = ("kv_cache_configurator.py", "_handle_max_mamba_cache", "alloc_memory_pool")


def patched_files(version: str) -> dict[str, str]:
    """Every file the release's patches touch, patched, from the stock wheel."""
    with zipfile.ZipFile(stock_wheel(version)) as archive:
        return {
            target: apply_at_own_lines(archive.read(target), diff, patch)
            for patch, diff, target in release_diffs(version)
        }


def function(source: str, name: str) -> ast.FunctionDef:
    found = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return found[0]


@pytest.fixture(scope="module")
def flat():
    with triton_interpreter():
        pytest.importorskip("triton")
        return load_payload_module("sglang.srt.speculative.ddtree_gdn_tree")


@pytest.mark.parametrize("version", WIRED)
def test_the_gdn_verify_dispatches_to_the_flat_walk_before_sglangs_kernel(version):
    backend = patched_files(version)[GDN_BACKEND]
    forward = ast.unparse(function(backend, "forward_extend"))
    flat_at = forward.index("if is_target_verify and flat_tree_verify() is not None:")
    assert forward.index("elif is_target_verify:") > flat_at
    assert forward.index("self.kernel_dispatcher.target_verify(") > flat_at
    call = forward[flat_at:].split("flat_tree_verify()(", 1)[1].split(")\n", 1)[0]
    assert "layer.layer_id" in call and "retrieve_parent_token=retrieve_parent_token" in call


def release_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".post")[0].split("."))


def publish_ddtree_server(monkeypatch, version: str) -> None:
    """The release's ddtree_compat, as its manifest installs it, and a published DDTREE server on
    a Gated-DeltaNet target (tree top-k 2) as that release resolves one."""
    patch_set = load_patch_set(REPO_ROOT / "manifests" / f"{version}.toml", require_file_table=False)
    source = next(f.source for f in patch_set.new_files if f.target == COMPAT)
    shim = load_compat_shim(monkeypatch, release_tuple(version), REPO_ROOT / source)
    monkeypatch.setitem(sys.modules, "sglang.srt.speculative.ddtree_compat", shim)
    resolved = types.SimpleNamespace(speculative_algorithm="DDTREE", speculative_eagle_topk=2)
    if release_tuple(version) >= (0, 5, 19):
        context = types.ModuleType("sglang.srt.runtime_context")
        context.get_spec = lambda: resolved
        context.get_server_args = lambda: types.SimpleNamespace(
            speculative_algorithm="DDTREE", speculative_eagle_topk=None
        )
        monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", context)
    else:
        server_args = types.ModuleType("sglang.srt.server_args")
        server_args.get_global_server_args = lambda: resolved
        monkeypatch.setitem(sys.modules, "sglang.srt.server_args", server_args)


@pytest.mark.parametrize("version", WIRED)
def test_every_snapshot_pool_keeps_none_in_flat_mode(version, flat, monkeypatch):
    files = patched_files(version)
    publish_ddtree_server(monkeypatch, version)
    pools = [path for path in POOLS if path in files]
    assert POOLS[0] in pools and (version == "0.5.14" or POOLS[1] in pools)
    for path in pools:
        allocations = [
            node.value
            for node in ast.walk(ast.parse(files[path]))
            if isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "intermediate_ssm_state_cache" for t in node.targets)
            and isinstance(node.value, ast.Call)
        ]
        assert len(allocations) == 1, path
        tokens = ast.unparse(allocations[0].keywords[0].value.elts[2])
        assert tokens == "ssm_snapshot_tokens(speculative_num_draft_tokens)", (path, tokens)
        scope = {"ssm_snapshot_tokens": flat.ssm_snapshot_tokens, "speculative_num_draft_tokens": 33}
        monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "flat")
        assert eval(tokens, scope) == 0
        monkeypatch.setenv("SGLANG_DDTREE_HYBRID_STATE", "snapshot")
        assert eval(tokens, scope) == 33
        monkeypatch.delenv("SGLANG_DDTREE_HYBRID_STATE")  # the default: flat
        assert eval(tokens, scope) == 0


@pytest.mark.parametrize("version", WIRED)
def test_the_memory_split_reserves_verify_tokens_and_the_runner_installs_after_the_pools(version):
    files = patched_files(version)
    name, split_fn, install_fn = SPLIT.get(version.split(".post")[0], LATER_SPLIT)
    split_path = next(p for p in files if p.endswith(name))
    split = ast.unparse(function(files[split_path], split_fn))
    assert "verify_tokens = verify_memory_tokens(" in split
    assert not re.search(r"(\*|D =) [\w().]*\bspeculative_num_draft_tokens\b", split), split_path
    products = split.count("* verify_tokens") + split.count("D = verify_tokens")
    assert products == 3, split_path
    runner = next(
        text for path, text in files.items() if install_fn in text and "install_flat_state(self)" in text
    )
    install = ast.unparse(function(runner, install_fn))
    pools_made = max(install.find("self._init_pools()"), install.find("self._unified_memory_pool = "))
    assert 0 <= pools_made < install.index("install_flat_state(self)")


def test_every_bundled_release_is_wired():
    assert sorted(path.stem for path in (REPO_ROOT / "manifests").glob("*.toml")) == sorted(WIRED)
