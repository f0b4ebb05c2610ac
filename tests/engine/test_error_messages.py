"""Every failure's message, details and hint as the CLI prints them, pinned by a snapshot.

One case per builder in `engine.errors`, rendered by `render.emit` exactly as a failed command
shows it. After a deliberate wording change, rewrite the snapshot with
`DDTREE_OVERLAY_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/engine/test_error_messages.py`
and review its diff.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ddtree_overlay import render
from ddtree_overlay.engine import errors
from ddtree_overlay.engine.result import error_result

SNAPSHOT = Path(__file__).with_name("snapshots") / "error_messages.txt"
ENV = Path("/srv/venvs/qwen serve")  # a space: every path in a command must be quoted
PYTHON = ENV / "bin" / "python"
MANIFEST = Path("/opt/ddtree-overlay/manifests/0.5.14.toml")
REINSTALL = errors.command(PYTHON, "-m", "pip", "install", "--force-reinstall", "--no-deps", "sglang==0.5.14")

CASES: dict[str, Callable[[], errors.OverlayError]] = {
    "no_interpreter": lambda: errors.no_interpreter(ENV),
    "env_missing": lambda: errors.env_missing(ENV),
    "interpreter_unusable": lambda: errors.interpreter_unusable(PYTHON, "did not answer within 300 s"),
    "checkout_without_sglang": lambda: errors.checkout_without_sglang(Path("/src/sglang")),
    "sglang_not_installed": lambda: errors.sglang_not_installed(ENV, PYTHON, "3.11.7", "0.5.23"),
    "pip_failed": lambda: errors.pip_failed("download sglang 0.5.14", ["ERROR: No matching distribution"]),
    "venv_failed": lambda: errors.venv_failed(Path("/tmp/scratch/venv"), ["Error: disk full"]),
    "wheel_missing": lambda: errors.wheel_missing("0.5.14", "cp311", Path("/cache/wheels")),
    "no_patch_set": lambda: errors.no_patch_set(
        "0.5.11", ["==0.5.14 (sglang-0.5.14-ddtree)", "==0.5.23 (sglang-0.5.23-ddtree)"],
        "it has no DFlash", PYTHON, "0.5.23",
    ),
    "version_unparsable": lambda: errors.version_unparsable("0.5.x"),
    "manifest_for_other_release": lambda: errors.manifest_for_other_release(MANIFEST, "==0.5.14", "0.5.15", PYTHON),
    "editable_install": lambda: errors.editable_install(ENV, "/src/sglang/python"),
    "sglang_shadowed": lambda: errors.sglang_shadowed(ENV, "/home/me/sglang/__init__.py", ENV / "lib/site-packages"),
    "externally_managed": lambda: errors.externally_managed(Path("/usr")),
    "not_writable": lambda: errors.not_writable(ENV / "lib/python3.11/site-packages/sglang"),
    "state_dir_unusable": lambda: errors.state_dir_unusable(Path("/root/.local/state/ddtree-overlay/envs/ab"), "read-only"),
    "no_space": lambda: errors.no_space(ENV / "lib/python3.11/site-packages", 3 * 2**20, 2**19),
    "write_failed": lambda: errors.write_failed(
        ENV / "lib/python3.11/site-packages/sglang/srt/server_args.py", "No space left on device",
        "the apply was undone, the env is as it was before",
    ),
    "manifest_invalid": lambda: errors.manifest_invalid(MANIFEST, "no [patchset] table"),
    "patch_set_invalid": lambda: errors.patch_set_invalid(f"`{MANIFEST}` [[patch]] #2", "unknown keys fuzz"),
    "file_unreadable": lambda: errors.file_unreadable("overlay file", Path("/opt/ddtree-overlay/overlay/x.py")),
    "patch_invalid": lambda: errors.patch_invalid("patches/0.5.14/0001-registry.patch", "no hunks for `a.py`"),
    "file_table_stale": lambda: errors.file_table_stale(MANIFEST, "0.5.14", ["touched but not listed: `x.py`"]),
    "manifest_disagrees": lambda: errors.manifest_disagrees(
        "sglang-0.5.14-ddtree", MANIFEST, "0.5.14", ["x.py: hunks do not apply to the recorded pre-image"]
    ),
    "several_patch_sets": lambda: errors.several_patch_sets("0.5.14", ["a", "b"]),
    "bad_setting": lambda: errors.bad_setting("DDTREE_OVERLAY_LOCK_TIMEOUT", "ten", "a number of seconds, 0 or more"),
    "probe_answer_malformed": lambda: errors.probe_answer_malformed(
        PYTHON, Path("/opt/ddtree_overlay/in_target/env_probe.py"), "`sglang` is str, expected an object"
    ),
    "unsafe_manifest_path": lambda: errors.unsafe_manifest_path("patch", "../x.patch", "paths may not contain `..`"),
    "outside_distribution": lambda: errors.outside_distribution("torch/x.py", ["sglang"]),
    "not_a_regular_file": lambda: errors.not_a_regular_file(ENV / "lib/sglang/x.py"),
    "pre_images_differ": lambda: errors.pre_images_differ(
        ENV, "sglang-0.5.14-ddtree", ["x.py: expected sha256 aa, found bb"], ["x.py"]
    ),
    "changed_while_planning": lambda: errors.changed_while_planning(ENV / "lib/sglang/x.py", "aa", None),
    "env_not_pristine": lambda: errors.env_not_pristine(ENV, PYTHON, "0.5.14", ["modified: sglang/x.py"]),
    "files_match_neither": lambda: errors.files_match_neither(
        ENV, "sglang-0.5.14-ddtree", ["sglang/x.py: found cc"], ["sglang/x.py"], REINSTALL
    ),
    "hunks_do_not_apply": lambda: errors.hunks_do_not_apply("sglang-0.5.14-ddtree", "0.5.14", ["x.py:", "  hunk 1"]),
    "symlinked_target": lambda: errors.symlinked_target("sglang/x.py", ENV / "lib/sglang"),
    "changed_since_apply": lambda: errors.changed_since_apply(ENV, ["sglang/x.py: edited"]),
    "edited_since_apply": lambda: errors.edited_since_apply(ENV, 1, ["sglang/x.py was edited after apply:"]),
    "patch_set_changed": lambda: errors.patch_set_changed(ENV, "sglang-0.5.14-ddtree", "aa", "bb"),
    "post_images_wrong": lambda: errors.post_images_wrong(["sglang/x.py"]),
    "env_locked": lambda: errors.env_locked("pid 42 running `apply` since 2026-11-30T10:00:00Z", Path("/state/lock")),
    "transaction_pending": lambda: errors.transaction_pending(ENV),
    "transaction_pending_also": lambda: errors.transaction_pending(ENV, also="`apply` without --check"),
    "recovery_blocked": lambda: errors.recovery_blocked(ENV, REINSTALL, ["sglang/x.py"]),
    "backup_unreadable": lambda: errors.backup_unreadable(Path("/state/blobs/aa"), REINSTALL),
    "undo_failed": lambda: errors.undo_failed(ENV, "`/srv/x.py`: Input/output error"),
    "state_unreadable": lambda: errors.state_unreadable(Path("/state/ledger.json"), "Expecting value: line 1", ENV),
    "state_version_unknown": lambda: errors.state_version_unknown(Path("/state/ledger.json"), "ledger_version", 2, 1),
    "nothing_applied": lambda: errors.nothing_applied(ENV),
    "overlay_not_intact": lambda: errors.overlay_not_intact(ENV, "drifted"),
    "target_script_failed": lambda: errors.target_script_failed(PYTHON, "import check", "ModuleNotFoundError: x"),
    "sglang_dependencies_missing": lambda: errors.sglang_dependencies_missing(
        ENV, PYTHON, "0.5.14",
        {"numpy": ["sglang.srt.server_args", "sglang.srt.speculative.spec_info"], "torch": ["sglang.srt.server_args"]},
        ["`sglang.srt.speculative.ddtree_tp`: ImportError: cannot import name 'x'"], {},
    ),
    "too_few_prompts": lambda: errors.too_few_prompts(64, 80, Path("/opt/fixtures/heldout_prompts.json")),
    "run_file_unreadable": lambda: errors.run_file_unreadable(Path("/runs/gsm8k.pt"), "invalid load key, 'x'"),
    "run_file_malformed": lambda: errors.run_file_malformed(Path("/runs/gsm8k.pt"), "no key 'responses'"),
    "run_file_other_models": lambda: errors.run_file_other_models(
        Path("/runs/gsm8k.pt"), "Qwen/Qwen3-8B", Path("/models/Qwen3-4B"), "its name is `Qwen3-4B`"
    ),
    "run_file_model_missing": lambda: errors.run_file_model_missing(
        Path("/runs/gsm8k.pt"), Path("models/Qwen3-8B")
    ),
    "bench_run_invalid": lambda: errors.bench_run_invalid(Path("/runs/bench 2026-12-05"), "it has no bench.json"),
    "prompt_file_invalid": lambda: errors.prompt_file_invalid(
        Path("/data/mt bench.jsonl"), "line 3 has neither `turns` nor `messages`"
    ),
    "too_few_prompts_for_batch": lambda: errors.too_few_prompts_for_batch(Path("/data/gsm8k.jsonl"), 48, 64),
    "no_chat_tokenizer": lambda: errors.no_chat_tokenizer(Path("/models/Qwen3.6-27B"), "has no chat template"),
    "chat_prompts_failed": lambda: errors.chat_prompts_failed(
        Path("/data/gsm8k.jsonl"), PYTHON, "OSError: Can't load tokenizer for '/models/Qwen3.6-27B'"
    ),
    "bench_plan_refused": lambda: errors.bench_plan_refused(
        "no arm nextn in this sweep (arms: target-only, dflash, dflash-no-overlap, ddtree-b32)"
    ),
    "preset_needs_release": lambda: errors.preset_needs_release("grammar", "0.5.17", "0.5.14"),
    "preset_needs_fixture_pair": lambda: errors.preset_needs_fixture_pair("grammar"),
    "bench_beyond_context": lambda: errors.bench_beyond_context(
        "a prompt of 32700 tokens and 128 new tokens exceed the target's context of 32768 tokens "
        "(max_position_embeddings in its config.json)"
    ),
    "bench_tp_refused": lambda: errors.bench_tp_refused(3, "its 16 Gated-DeltaNet key heads do not split over --tp-size 3"),
    "fa3_not_installed": lambda: errors.fa3_not_installed(["target-only", "DFLASH", "NEXTN"], PYTHON, default=True),
    "fa3_not_installed_also": lambda: errors.fa3_not_installed(["DFLASH"], PYTHON, default=False),
    "interrupted": lambda: errors.interrupted("SIGINT", ENV, "`apply` stopped and undid what it had written"),
    "interrupted_also": lambda: errors.interrupted("SIGTERM", ENV, "`rollback` had already finished"),
}


def _shown(error: errors.OverlayError, capsys: pytest.CaptureFixture[str]) -> str:
    render.emit(error_result(("apply",), error), json_out=False)
    captured = capsys.readouterr()
    return captured.out + captured.err


def _builders() -> set[str]:
    return {
        name
        for name, value in vars(errors).items()
        if inspect.isfunction(value)
        and not name.startswith("_")
        and inspect.signature(value).return_annotation not in ("str", str)
        and value.__module__ == errors.__name__
        and name not in {"exit_code_table"}
    }


def test_every_builder_is_snapshotted(capsys: pytest.CaptureFixture[str]) -> None:
    rendered = "".join(f"== {name}\n{_shown(build(), capsys)}\n" for name, build in CASES.items())
    if os.environ.get("DDTREE_OVERLAY_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(rendered)
    assert rendered == SNAPSHOT.read_text()
    assert {name.removesuffix("_also") for name in CASES} == _builders()


def test_every_failure_class_has_a_builder() -> None:
    built = {type(build()) for build in CASES.values()}
    classes = {
        cls for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.OverlayError) and cls is not errors.OverlayError
    }
    assert classes == built


def test_hints_name_real_paths_never_placeholders() -> None:
    for name, build in CASES.items():
        error = build()
        assert error.hint, name
        assert not re.search(r"\b(ENV|VERSION|PATH)\b", error.hint), (name, error.hint)


def test_a_path_with_a_space_is_quoted_in_a_command() -> None:
    assert "--env '/srv/venvs/qwen serve'" in (errors.transaction_pending(ENV).hint or "")
