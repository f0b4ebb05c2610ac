"""The split-KV triton_backend hunk (the split-KV kernel for the target's verify,
SGLANG_DDTREE_VERIFY_ATTENTION, and for the drafter's block, SGLANG_DDTREE_DRAFT_ATTENTION) on
every release, against that release's own stock file (read from its wheel in the matrix cache,
~/.cache/ddtree-overlay/matrix/wheels; `ddtree-overlay matrix` fills it).

The hunk must apply at its own lines (no offset), ask ``tree_verify_for`` in the backend's
``__init__`` once the SM count is known, and in ``forward_extend`` run DDTREE's branch on a
forward its call ``serves`` (a target verify with DDTREE's mask, or the drafter's block with none)
before SGLang's own verify kernels and its extend kernel, handing it the kv rails, the mask and
every layer feature the extend call would get (so the module refuses what it does not compute
rather than the backend dropping it). Only the deterministic and
decode-context-parallel paths return before it; with those settings ``auto`` keeps SGLang's
kernel and ``splitkv`` is refused (``split_kv_path_conflict``). The stock backend must keep the cuda-graph mask where the tail-only mask can live: the
spec input's mask copied to the head of the graph's buffer, the eager path reading the spec
input's own.
"""

from __future__ import annotations

import ast
import zipfile

import pytest
from overlay_helpers import REPO_ROOT
from release_wheels import apply_at_own_lines, release_diffs, stock_wheel

pytestmark = pytest.mark.sglang

WIRED = (
    "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
    "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)  # fmt: skip
BACKEND = "sglang/srt/layers/attention/triton_backend.py"
BRANCH = (
    "if self.ddtree_tree_verify is not None and self.ddtree_tree_verify.serves("
    "forward_batch.forward_mode, self.forward_metadata.custom_mask)"
)
# What forward_extend runs after DDTREE's branch on a target verify, per release.
SGLANG_VERIFY = (
    "self.verify_splitkv_fwd(", "verify_fwd(", "self.extend_attention_fwd(", "self._forward_extend_kernel(",
)  # fmt: skip
# Paths that return before the branch: under their settings auto keeps SGLang's kernel and
# splitkv is refused.
EARLIER = ("return self._forward_extend_unified(", "return self._forward_extend_dcp(")


def stock_and_patched(version: str) -> tuple[str, str]:
    diffs = [(patch, diff) for patch, diff, target in release_diffs(version) if target == BACKEND]
    assert len(diffs) == 1, [patch for patch, _, _ in release_diffs(version)]
    with zipfile.ZipFile(stock_wheel(version)) as archive:
        stock = archive.read(BACKEND)
    return stock.decode(), apply_at_own_lines(stock, diffs[0][1], diffs[0][0])


def method(source: str, name: str) -> ast.FunctionDef:
    backend = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "TritonAttnBackend"
    )
    found = [n for n in backend.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return found[0]


def call_named(node: ast.AST, name: str) -> ast.Call:
    calls = [
        n for n in ast.walk(node) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(name)
    ]
    assert len(calls) == 1, name
    return calls[0]


@pytest.mark.parametrize("version", WIRED)
def test_the_backend_asks_for_the_tree_verify_once_it_knows_the_sm_count(version):
    _, patched = stock_and_patched(version)
    assert "\nfrom sglang.srt.speculative.ddtree_attention_choice import tree_verify_for\n" in patched
    init = ast.unparse(method(patched, "__init__"))
    asked = init.index("self.ddtree_tree_verify = tree_verify_for(model_runner, self.device_core_count)")
    assert init.index("self.device_core_count = get_device_core_count(") < asked


@pytest.mark.parametrize("version", WIRED)
def test_the_ddtree_branch_runs_before_sglangs_verify_and_extend_kernels(version):
    _, patched = stock_and_patched(version)
    node = method(patched, "forward_extend")
    forward = ast.unparse(node)
    branch_at = forward.index(BRANCH + ":")
    for call in SGLANG_VERIFY:
        at = forward.find(call)
        assert at == -1 or at > branch_at, call
    assert "self.extend_attention_fwd(" in forward or "self._forward_extend_kernel(" in forward
    for earlier in EARLIER[: 1 if version == "0.5.14" else 2]:
        assert forward.index(earlier) < branch_at, earlier
    branch = next(n for n in ast.walk(node) if isinstance(n, ast.If) and ast.unparse(n).startswith(BRANCH))
    assert ast.unparse(branch.body[-1]) == "return o"
    ours = call_named(branch, "self.ddtree_tree_verify")
    args = [ast.unparse(a) for a in ours.args]
    assert args[6:9] == ["kv_indptr", "kv_indices", "self.forward_metadata.custom_mask"]
    kwargs = {k.arg: ast.unparse(k.value) for k in ours.keywords}
    assert kwargs["num_verify_tokens"] == "self.forward_metadata.max_extend_len"
    extend = next(
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(("extend_attention_fwd", "_forward_extend_kernel"))
    )
    extend_kwargs = {k.arg: ast.unparse(k.value) for k in extend.keywords}
    features = {"logit_cap", "sliding_window_size", "sinks", "xai_temperature_len", "score_mod"}
    for feature in features & set(extend_kwargs):
        assert kwargs[feature] == extend_kwargs[feature], feature
    assert ("score_mod" in kwargs) == ("score_mod" in [a.arg for a in node.args.args])
    assert kwargs["causal"] == "causal"


@pytest.mark.parametrize("version", WIRED)
def test_the_graph_mask_buffer_takes_the_spec_inputs_mask_at_its_head(version):
    stock, _ = stock_and_patched(version)
    update = ast.unparse(method(stock, "_update_target_verify_buffers"))
    assert "custom_mask[:spec_info.custom_mask.shape[0]] = spec_info.custom_mask" in update
    eager = ast.unparse(method(stock, "init_forward_metadata"))
    assert "custom_mask = spec_info.custom_mask" in eager


def test_every_bundled_release_is_wired():
    assert sorted(path.stem for path in (REPO_ROOT / "manifests").glob("*.toml")) == sorted(WIRED)
