"""What DDTREE's worker may read of the target before SGLang has built it.

SGLang 0.5.14 constructs the speculative worker before it allocates the KV pools and builds
the attention backends: ``Scheduler.init_model_worker`` builds both workers, then calls
``alloc_memory_pool``, ``init_attention_backends`` and ``init_cuda_graphs`` on each in turn. A
worker ``__init__`` that reads the target's pool or backend fails every engine at start (on
2026-12-04 the commit's KV mover did, ``'NoneType' object has no attribute 'get_kvcache'``); those
reads belong in ``init_attention_backends`` or later. No CPU test can start an engine, so this
one reads the worker's source.
"""

from __future__ import annotations

import ast

from payload_modules import OVERLAY

WORKER = OVERLAY / "sglang" / "srt" / "speculative" / "ddtree_worker_v2.py"
# The target model runner's attributes SGLang sets after the speculative worker is built.
BUILT_LATER = {"token_to_kv_pool_allocator", "token_to_kv_pool", "req_to_token_pool", "attn_backend", "graph_runner"}


def worker_method(name: str) -> ast.FunctionDef:
    tree = ast.parse(WORKER.read_text())
    worker = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "DDTreeWorkerV2")
    return next(node for node in worker.body if isinstance(node, ast.FunctionDef) and node.name == name)


def model_runner_reads(function: ast.FunctionDef) -> set[str]:
    """Attributes read off ``….model_runner`` (directly or through a local bound to it)."""
    runner_names = {
        target.id
        for node in ast.walk(function)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "model_runner"
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    reads = set()
    for node in ast.walk(function):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Attribute) and owner.attr == "model_runner") or (
            isinstance(owner, ast.Name) and owner.id in runner_names
        ):
            reads.add(node.attr)
    return reads


def test_the_worker_init_reads_nothing_sglang_builds_after_it():
    reads = model_runner_reads(worker_method("__init__"))
    assert "model_config" in reads  # the reader sees the reads that are there
    assert not reads & BUILT_LATER, sorted(reads & BUILT_LATER)


def calls(function: ast.FunctionDef) -> set[str]:
    return {node.func.id for node in ast.walk(function) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def test_the_kv_mover_and_the_verify_attention_are_read_once_the_target_is_built():
    assert "token_to_kv_pool_allocator" in model_runner_reads(worker_method("init_attention_backends"))
    # which verify attention the target's backend runs (ddtree_attention_choice), read off it
    assert "verify_attention_in_use" in calls(worker_method("init_attention_backends"))
    assert "verify_attention_in_use" not in calls(worker_method("__init__"))
    # the profile's lines name what was chosen there (ddtree_profile.engine_paths)
    assert "engine_paths" in calls(worker_method("init_attention_backends"))


def test_the_drafters_attention_is_read_once_its_backend_is_built():
    """DFlash's init_attention_backends builds the drafter's backends: what it chose
    (ddtree_attention_choice.draft_attention_in_use) is read after that call."""
    source = ast.unparse(worker_method("init_attention_backends"))
    assert source.index("super().init_attention_backends()") < source.index("draft_attention_in_use(self.draft_model_runner)")
