"""Run by a matrix scratch env's interpreter: import the patched modules on CPU, print JSON.

`python -I matrix_checks.py MODULE...`. Standard library plus what the env has; never
run in the tool's own interpreter. What it checks, beyond "the module imports":

* the DDTREE name resolves through SGLang's registry, and every predicate the builtin
  `SpeculativeAlgorithm` enum has can be called on DDTREE's spec class (the scheduler calls
  them on whatever `from_string` returns; a missing one is an AttributeError at server start);
* the `--speculative-ddtree-budget` field (and, where the patch set declares them, the
  budget schedule's and the adaptive budgets') reaches `ServerArgs` and its CLI parser;
* `ddtree_compat.api_contract_problems()`: the private DFlash members the DDTree worker uses,
  with the signatures its compat shim was written against;
* DDTREE's server-args hook on real `ServerArgs` (model paths: the bundled fixture pair, named
  by `DDTREE_MATRIX_FIXTURES`): verify width, block size and budget as resolved, and the
  refusals; then, published where the release has a runtime context, the widths the worker
  reads through its shim, and the block-size scope DFlash's __init__ runs in; and, where the
  shim has `verify_width_scope`, the width and decode batch sizes a narrower verify width is
  built with (the release's own `get_batch_sizes_to_capture`).

The one thing done to the environment: torchvision wheels on PyPI are CUDA builds whose `_C`
cannot load against a CPU torch, and torchvision then registers fake kernels for two ops that
`_C` would have defined (`nms`, `qnms`). Their schemas are defined here first, so the real
torchvision Python package imports; its C++ ops stay unavailable (nothing imported uses them).
"""

import importlib
import importlib.metadata as metadata
import json
import sys
import time
import traceback

PREDICATE_PREFIXES = ("is_", "supports_", "has_", "need_", "carries_")
IDENTITY_PREDICATES = {"is_none", "is_some", "is_speculative"}


def torchvision_shim():
    """Define the two op schemas a CUDA torchvision needs from `_C` when torch is CPU-only."""
    import glob
    import importlib.util
    import os

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or torch.version.cuda is not None or not spec.submodule_search_locations:
        return None
    extensions = glob.glob(os.path.join(next(iter(spec.submodule_search_locations)), "_C*.so"))
    if not extensions:
        return None
    try:
        torch.ops.load_library(extensions[0])
    except OSError as error:
        reason = str(error).splitlines()[0]
    else:
        return None
    schema = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
    torch.library.define("torchvision::nms", schema)
    torch.library.define("torchvision::qnms", schema.replace("dets", "qdets"))
    return (
        f"torchvision {metadata.version('torchvision')}: `_C` does not load with CPU torch "
        f"({reason}); the nms/qnms op schemas were defined so its Python package imports"
    )


def import_module(name):
    started = time.monotonic()
    try:
        importlib.import_module(name)
    except BaseException as error:  # report any failure, including SystemExit
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        return {
            "ok": False,
            "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            "where": where,
            "seconds": round(time.monotonic() - started, 2),
        }
    return {"ok": True, "seconds": round(time.monotonic() - started, 2)}


def registry_check():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    problems, differs = [], {}
    algo = SpeculativeAlgorithm.from_string("DDTREE")
    dflash = SpeculativeAlgorithm.DFLASH
    names = sorted(
        name
        for name, value in vars(SpeculativeAlgorithm).items()
        if callable(value) and name.startswith(PREDICATE_PREFIXES)
    )
    for name in names:
        method = getattr(algo, name, None)
        if method is None:
            problems.append(f"DDTREE's spec class lacks `{name}` (the enum has it)")
            continue
        try:
            ours, theirs = method(), getattr(dflash, name)()
        except TypeError:
            continue  # takes arguments: presence is what matters
        if ours != theirs and name not in IDENTITY_PREDICATES:
            differs[name] = {"DDTREE": ours, "DFLASH": theirs}
    for name in ("is_dflash", "is_dflash_family"):
        if hasattr(dflash, name) and getattr(algo, name)() is not True:
            problems.append(f"DDTREE must answer `{name}() == True`")
    return {"class": type(algo).__name__, "problems": problems, "differs_from_dflash": differs}


def server_args_check():
    import argparse

    from sglang.srt.server_args import ServerArgs

    problems = []
    if not hasattr(ServerArgs, "speculative_ddtree_budget"):
        problems.append("ServerArgs has no `speculative_ddtree_budget` field")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options = {option for action in parser._actions for option in action.option_strings}
    if "--speculative-ddtree-budget" not in options:
        problems.append("the CLI parser has no `--speculative-ddtree-budget`")
    for flag in _budget_policy_flags():
        if f"--{flag.replace('_', '-')}" not in options:
            problems.append(f"the CLI parser has no `--{flag.replace('_', '-')}`")
    return problems


def _budget_policy_flags() -> list:
    """The budget-policy flags the release's patch set declares (0.5.14's: both)."""
    from sglang.srt.server_args import ServerArgs

    flags = ("speculative_ddtree_budget_schedule", "speculative_ddtree_adaptive_budgets")
    return [flag for flag in flags if hasattr(ServerArgs, flag)]


RESOLUTION_CASES = (
    # (extra ServerArgs kwargs, expected (verify width, block size, budget) or an error fragment)
    ({"speculative_ddtree_budget": 31, "speculative_dflash_block_size": 16}, (32, 16, 31)),
    ({"speculative_dflash_block_size": 16}, (16, 16, 15)),
    ({"speculative_ddtree_budget": 4, "speculative_dflash_block_size": 8}, (8, 8, 4)),
    ({"attention_backend": "fa3"}, "DDTREE requires --attention-backend triton or flashinfer"),
    ({"speculative_num_draft_tokens": 16}, "DDTREE sets the verify width"),
    ({"enable_return_hidden_states": True}, "does not support --enable-return-hidden-states"),
)
SCHEDULE_CASES = (
    ({"speculative_ddtree_budget_schedule": "1:64,8:16", "speculative_dflash_block_size": 16}, (65, 16, 64)),
    ({"speculative_ddtree_budget_schedule": "1:64", "speculative_ddtree_budget": 8}, "not several"),
    ({"speculative_ddtree_budget_schedule": "4:64"}, "must start at batch size 1"),
    ({"speculative_ddtree_budget_schedule": "1:64,8:chain", "speculative_dflash_block_size": 16}, (65, 16, 64)),
)
ADAPTIVE_CASES = (
    ({"speculative_ddtree_adaptive_budgets": "8,32,64", "speculative_dflash_block_size": 16}, (65, 16, 64)),
    ({"speculative_ddtree_adaptive_budgets": "8,32", "speculative_ddtree_budget": 8}, "not several"),
    # under TP rank 0's policy decides for every rank: the same widths as at TP 1
    (
        {"speculative_ddtree_adaptive_budgets": "8,32,64", "speculative_dflash_block_size": 16, "tp_size": 2},
        (65, 16, 64),
    ),
    # the chain's width is the block: root + 15 drafted, what DFLASH verifies
    ({"speculative_ddtree_adaptive_budgets": "chain,8", "speculative_dflash_block_size": 16}, (16, 16, 15)),
)


def _strict_thinking_case():
    """Strict thinking gives every request a grammar: served where the tree verify applies
    grammars (0.5.17+), refused at startup before."""
    from sglang.srt.speculative.ddtree_compat import GRAMMAR_TREE

    extra = {"enable_strict_thinking": True, "speculative_dflash_block_size": 16}
    return extra, ((16, 16, 15) if GRAMMAR_TREE else "--enable-strict-thinking's grammar")


def resolution_check():
    """DDTREE's server-args hook on real ServerArgs (the bundled fixture pair as model paths).

    Up to 0.5.18 ServerArgs resolves while it is constructed; from 0.5.19 resolution is a
    separate pipeline of declarations, so `handle_speculative_decoding` is run and the result
    read through the resolving view.
    """
    import os

    fixtures = os.environ.get("DDTREE_MATRIX_FIXTURES")
    if not fixtures:
        return None
    problems = []
    flags = _budget_policy_flags()
    cases = (
        RESOLUTION_CASES
        + (SCHEDULE_CASES if "speculative_ddtree_budget_schedule" in flags else ())
        + (ADAPTIVE_CASES if "speculative_ddtree_adaptive_budgets" in flags else ())
        + (_strict_thinking_case(),)
    )
    for extra, expected in cases:
        try:
            got = _resolve_ddtree_args(fixtures, extra)
        except ValueError as error:
            got = str(error)
        ok = (isinstance(expected, str) and isinstance(got, str) and expected in got) or got == expected
        if not ok:
            problems.append(f"{extra}: expected {expected!r}, got {got!r}")
    return problems


# The hybrid pair (fixtures/hybrid): a Gated-DeltaNet target gets SGLang's tree paths (eagle
# top-k 2) and a FlashInfer GDN kernel, which has none, is refused. Radix cache off: its mamba
# strategy would assert a CUDA device.
HYBRID_CASES = (
    ({"speculative_ddtree_budget": 32}, (33, 16, 32, 2)),
    ({"speculative_ddtree_budget": 32, "linear_attn_decode_backend": "flashinfer"}, "has none"),
)


def hybrid_resolution_check():
    """DDTREE's hook on real ServerArgs whose target is the bundled hybrid pair's."""
    import os

    fixtures = os.environ.get("DDTREE_MATRIX_FIXTURES")
    if not fixtures or not os.path.isdir(os.path.join(fixtures, "hybrid", "target")):
        return None
    problems = []
    for extra, expected in HYBRID_CASES:
        try:
            got = _resolve_ddtree_args(
                os.path.join(fixtures, "hybrid"), extra | {"disable_radix_cache": True}, topk=True
            )
        except ValueError as error:
            got = str(error)
        ok = (isinstance(expected, str) and isinstance(got, str) and expected in got) or got == expected
        if not ok:
            problems.append(f"hybrid {extra}: expected {expected!r}, got {got!r}")
    return problems


def _resolve_ddtree_args(fixtures, extra, topk=False):
    import os

    from sglang.srt.server_args import ServerArgs

    kwargs = {
        "model_path": os.path.join(fixtures, "target"),
        "speculative_draft_model_path": os.path.join(fixtures, "draft"),
        "speculative_algorithm": "DDTREE",
        "attention_backend": "triton",
        "device": "cuda",
        "skip_tokenizer_init": True,
    }
    server_args = ServerArgs(**(kwargs | extra))
    try:
        from sglang.srt.arg_groups.overrides import resolving_view
    except ImportError:
        cfg = server_args  # resolved by ServerArgs.__post_init__
    else:
        from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding

        handle_speculative_decoding(server_args)
        cfg = resolving_view(server_args)
    resolved = (
        cfg.speculative_num_draft_tokens,
        cfg.speculative_dflash_block_size,
        cfg.speculative_ddtree_budget,
    )
    return (*resolved, cfg.speculative_eagle_topk) if topk else resolved


def worker_width_check():
    """What the DDTree worker reads at construction, through the release's compat shim.

    Resolve real ServerArgs (budget 31, block 16), publish them where the release has a
    runtime context (0.5.19+), then: verify width 32, block 16, budget 31 as the worker
    reads them; 16 while DFlash's __init__ builds the draft side; 32 again afterwards.
    """
    import os

    fixtures = os.environ.get("DDTREE_MATRIX_FIXTURES")
    if not fixtures:
        return None
    from sglang.srt.speculative import ddtree_compat as compat

    server_args = _published_ddtree_args(fixtures)
    names = ("speculative_num_draft_tokens", "speculative_dflash_block_size", "speculative_ddtree_budget")
    problems = []
    seen = tuple(compat.spec_arg(server_args, name) for name in names)
    if seen != (32, 16, 31):
        problems.append(f"worker reads (verify width, block, budget) = {seen}, expected (32, 16, 31)")
    with compat.draft_width_during_init(server_args, 16) as dflash_args:
        inside = compat.spec_arg(dflash_args, names[0])
        bag = _spec_bag_width()
    after = compat.spec_arg(server_args, names[0])
    if (inside, after) != (16, 32):
        problems.append(f"draft width scope: {inside} inside, {after} after; expected 16, 32")
    if bag not in (None, 16):
        problems.append(f"the spec bag says {bag} while DFlash's __init__ runs; expected 16")
    if _spec_bag_width() not in (None, 32):
        problems.append(f"the spec bag says {_spec_bag_width()} after DFlash's __init__; expected 32")
    return problems


def verify_width_check():
    """The shim's verify_width_scope on published ServerArgs (verify width 32): inside it the
    width the target's attention backend reads is 17 and the release's own
    get_batch_sizes_to_capture returns [1, 2]; afterwards both are as before."""
    import os
    import types

    fixtures = os.environ.get("DDTREE_MATRIX_FIXTURES")
    if not fixtures:
        return None
    from sglang.srt.speculative import ddtree_compat as compat

    if not hasattr(compat, "verify_width_scope"):
        return None  # the release's patch set has no budget schedule or adaptive budgets
    from sglang.srt.model_executor.runner.base_cuda_graph_runner import get_batch_sizes_to_capture
    from sglang.srt.runtime_context import get_parallel

    server_args = _published_ddtree_args(fixtures)
    runner = types.SimpleNamespace(
        server_args=server_args, req_to_token_pool=types.SimpleNamespace(size=4096)
    )

    def seen():
        bag = _spec_bag_width()
        width = bag if bag is not None else server_args.speculative_num_draft_tokens
        with get_parallel().override(attn_tp_size=1, attn_cp_size=1):
            return width, get_batch_sizes_to_capture(runner, 1)[0]

    before = seen()
    with compat.verify_width_scope(runner, 17, [1, 2]):
        inside = seen()
    after = seen()
    problems = []
    if inside != (17, [1, 2]):
        problems.append(f"inside the scope (width, capture bs) = {inside}, expected (17, [1, 2])")
    if after != before or before[0] != 32:
        problems.append(f"(width, capture bs) {before} before the scope, {after} after")
    return problems


def _spec_bag_width():
    """`get_spec().speculative_num_draft_tokens` where a runtime context is published."""
    try:
        from sglang.srt.runtime_context import get_spec

        return get_spec().speculative_num_draft_tokens
    except (ImportError, AttributeError, ValueError, RuntimeError):
        return None


def _published_ddtree_args(fixtures):
    import os

    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(
        model_path=os.path.join(fixtures, "target"),
        speculative_draft_model_path=os.path.join(fixtures, "draft"),
        speculative_algorithm="DDTREE",
        attention_backend="triton",
        device="cuda",
        skip_tokenizer_init=True,
        speculative_ddtree_budget=31,
        speculative_dflash_block_size=16,
    )
    try:
        from sglang.srt.arg_groups.pipeline import run_resolution_pipeline
    except ImportError:
        pass  # up to 0.5.18: resolved by ServerArgs.__post_init__
    else:
        run_resolution_pipeline(server_args)
    try:
        from sglang.srt.runtime_context import publish
    except ImportError:
        return server_args  # no runtime context (up to 0.5.16)
    publish(server_args, role="scheduler")
    return server_args


def _sibling_check(name):
    """The check ``name`` of in_target/``name``.py beside this file (run as a script, this file
    puts none of its siblings on an import path)."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"ddtree_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def compat_check():
    try:
        compat = importlib.import_module("sglang.srt.speculative.ddtree_compat")
    except ImportError:
        return None
    return list(compat.api_contract_problems())


def guarded(check):
    try:
        return check()
    except BaseException as error:
        return {"error": f"{type(error).__name__}: {error}"}


def main(modules):
    import torch

    report = {"python": ".".join(map(str, sys.version_info[:3])), "torch": torch.__version__}
    report["shims"] = [s for s in [torchvision_shim()] if s]
    report["modules"] = {name: import_module(name) for name in modules}
    if all(entry["ok"] for entry in report["modules"].values()):
        report["registry"] = guarded(registry_check)
        report["server_args"] = guarded(server_args_check)
        report["compat"] = guarded(compat_check)
        report["resolution"] = guarded(resolution_check)
        report["hybrid_resolution"] = guarded(hybrid_resolution_check)
        report["worker_width"] = guarded(worker_width_check)
        report["verify_width"] = guarded(verify_width_check)
        report["grammar"] = guarded(lambda: _sibling_check("grammar_check"))
        report["logprobs"] = guarded(lambda: _sibling_check("logprob_check"))
    sys.stdout.write("\n@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(report, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
