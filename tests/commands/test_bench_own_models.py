"""bench on a user's own pair: chat prompt files, the NEXTN and EAGLE-3 baselines, and the
recommendation that ends the report (the sweep against the stand-in sglang)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import install_fake_sglang
from overlay_helpers import REPO_ROOT, run_cli

from ddtree_overlay.bench import plan as bp
from ddtree_overlay.bench import settings, supervision
from ddtree_overlay.bench.nextn_overlap import crash_reason
from ddtree_overlay.commands import bench as bench_module
from ddtree_overlay.engine.errors import ExitCode
from ddtree_overlay.fixture_paths import BYTE_TOKENIZER, FIXTURES, PAIRS

HYBRID = PAIRS["hybrid"]
PAIR = ("--target", str(HYBRID / "target"), "--draft", str(HYBRID / "draft"))
FAKE_TRANSFORMERS = '''
class _Tokenizer:
    def apply_chat_template(self, conversation, tokenize, add_generation_prompt, enable_thinking):
        return "".join(m["content"] for m in conversation) + ("<think>" if enable_thinking else "")

    def __call__(self, text, add_special_tokens):
        return {"input_ids": list(text.encode())}


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path):
        return _Tokenizer()
'''


def dry_run(*args: str, env_vars: dict[str, str] | None = None) -> Any:
    done = run_cli("bench", "--env", sys.executable, "--dry-run", "--json", *args, env_vars=env_vars)
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


def test_a_hybrid_target_with_an_mtp_head_gets_a_nextn_arm() -> None:
    args = (*PAIR, "--budgets", "32", "--batch-sizes", "1,64", "--temperatures", "0")
    # SGLang's default backend (fa3 on Hopper, not triton): NEXTN with overlap scheduling
    done, envelope = dry_run(*args)
    assert done.returncode == 0, done.stderr
    groups = {g["name"]: g for g in envelope["data"]["plan"]["groups"]}
    assert list(groups) == ["target-only", "dflash", "dflash-no-overlap", "nextn", "ddtree-b32"]
    engine = groups["nextn"]["engine"]
    assert engine["speculative_algorithm"] == "NEXTN" and "disable_overlap_schedule" not in engine
    assert "attention_backend" not in engine and groups["nextn"]["attention_backend"] == "auto"
    assert engine["speculative_draft_model_path"] == str(HYBRID / "target")  # SGLang loads the MTP head there
    chain = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    assert [engine[key] for key in chain] == [3, 1, 4]
    assert all(g["engine"]["max_running_requests"] == 64 for g in groups.values())  # past SGLang's 48
    # flashinfer: with overlap scheduling, as on any target
    done, envelope = dry_run(*args, "--baseline-attention-backend", "flashinfer")
    assert done.returncode == 0, done.stderr
    assert "nextn" in {g["name"] for g in envelope["data"]["plan"]["groups"]}
    # triton, in an env whose sglang release is not known (none here): without overlap scheduling
    done, envelope = dry_run(*args, "--baseline-attention-backend", "triton")
    assert done.returncode == 0, done.stderr
    groups = {g["name"]: g for g in envelope["data"]["plan"]["groups"]}
    assert list(groups) == ["target-only", "dflash", "dflash-no-overlap", "nextn-no-overlap", "ddtree-b32"]
    expected = engine | {"attention_backend": "triton", "disable_overlap_schedule": True}
    assert dict(groups["nextn-no-overlap"]["engine"]) == expected


def test_nextn_with_overlap_on_a_hybrid_target_is_refused_for_the_releases_that_crash(
    pristine_sglang_env: Path,
) -> None:
    """The env holds stock sglang 0.5.14: its overlap EAGLE worker overflows the triton tree-mask
    buffer on a hybrid target (bench.nextn_overlap)."""
    base = ("bench", "--env", str(pristine_sglang_env), "--dry-run", *PAIR, "--budgets", "32",
            "--baseline-attention-backend", "triton")
    done = run_cli(*base, "--only", "nextn")
    assert done.returncode == ExitCode.USAGE
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: --only nextn: in stock sglang 0.5.14 the EAGLE worker with overlap scheduling")
    assert first.endswith("ask for nextn-no-overlap")
    done = run_cli(*base, "--only", "nextn-no-overlap,dflash", "--json")
    assert done.returncode == 0, done.stderr
    assert [g["name"] for g in json.loads(done.stdout)["data"]["plan"]["groups"]] == ["dflash", "nextn-no-overlap"]
    # a pair without an MTP head has no NEXTN arm at all: a usage error too, not a traceback
    done = run_cli("bench", "--env", str(pristine_sglang_env), "--dry-run", "--only", "nextn")
    assert done.returncode == ExitCode.USAGE and done.stderr.startswith("error: no arm nextn in this sweep")


def test_the_dense_fixture_has_no_mtp_head_and_an_eagle3_draft_adds_a_baseline(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    done, envelope = dry_run("--budgets", "32", "--eagle3-draft", str(tmp_path))
    assert done.returncode == 0, done.stderr
    groups = {g["name"]: g for g in envelope["data"]["plan"]["groups"]}
    assert "nextn" not in groups and groups["eagle3"]["engine"]["speculative_draft_model_path"] == str(tmp_path)
    assert "max_running_requests" not in groups["eagle3"]["engine"]


def test_the_dense_fixtures_eagle3_drafter_plans_its_arm_as_the_fixture_readme_runs_it(tmp_path: Path) -> None:
    """The GPU command the fixture README gives for the EAGLE3 arm, its bench job dry-run from
    the repository root as `scripts/gpu/on_gpus.sh` runs it."""
    readme = (FIXTURES / "README.md").read_text()
    job = re.search(r"bash scripts/gpu/on_gpus\.sh \S+ '(bench [^']+)'", readme).group(1)
    setting, *args = shlex.split(job)[1:]
    done, envelope = dry_run("--setting", setting, "--out", str(tmp_path / "out"), *args)
    assert done.returncode == 0, done.stderr
    groups = {g["name"]: g for g in envelope["data"]["plan"]["groups"]}
    assert list(groups) == ["dflash", "eagle3", "ddtree-b32"]
    engine = groups["eagle3"]["engine"]
    assert engine["speculative_algorithm"] == "EAGLE3"
    assert (REPO_ROOT / engine["speculative_draft_model_path"]).resolve() == FIXTURES / "eagle3"
    chain = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    assert [engine[key] for key in chain] == [3, 1, 4]


def test_chat_prompts_without_a_tokenizer_exit_14(tmp_path: Path) -> None:
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text('{"turns": ["hello"]}\n')
    out = tmp_path / "out"
    done, _ = dry_run(*PAIR, "--prompts", str(prompts), "--out", str(out))
    assert done.returncode == ExitCode.BAD_PROMPT_FILE, done.stderr
    assert done.stderr.startswith(
        f"error: chat prompts need the target's tokenizer and chat template, and `{HYBRID / 'target'}` "
        "has no tokenizer"
    )
    assert not out.exists()


def test_a_bad_chat_line_exits_14(tmp_path: Path) -> None:
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text('{"turns": ["hello"]}\n{"question": "?"}\n')
    done, _ = dry_run(*PAIR, "--prompts", str(prompts), "--tokenizer", str(BYTE_TOKENIZER))
    assert done.returncode == ExitCode.BAD_PROMPT_FILE
    assert "line 2 has neither `turns` nor `messages`" in done.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--min-prompt-tokens", "8192"], "--min-prompt-tokens go with chat --prompts"),
        (["--setting", "qwen3-8b-random", "--eagle3-draft", str(FIXTURES / "draft")], "--eagle3-draft needs a real pair"),
    ],
)
def test_chat_options_without_chat_prompts_are_usage_errors(args: list[str], fragment: str) -> None:
    done, _ = dry_run(*args)
    assert done.returncode == ExitCode.USAGE and fragment in done.stderr


def test_chat_options_with_a_token_id_file_exit_14() -> None:
    done, _ = dry_run("--prompts", str(FIXTURES / "heldout_prompts.json"), "--enable-thinking")
    assert done.returncode == ExitCode.BAD_PROMPT_FILE
    assert "apply to chat prompts only" in done.stderr


def test_chat_prompts_are_tokenized_in_the_target_env_and_lengthened(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_TRANSFORMERS)
    python_path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    done, envelope = dry_run(
        *PAIR, "--prompts", str(FIXTURES / "chat_prompts.jsonl"), "--tokenizer", str(BYTE_TOKENIZER),
        "--min-prompt-tokens", "600", "--enable-thinking", "--batch-sizes", "1,16",
        env_vars={"PYTHONPATH": python_path},
    )
    assert done.returncode == 0, done.stderr
    note = envelope["data"]["prompts"]
    assert note.startswith(
        f"16 chat prompts from `{FIXTURES / 'chat_prompts.jsonl'}`, chat template of `{BYTE_TOKENIZER}` "
        "(enable_thinking=True), 6"
    )
    assert "each lengthened to 600 tokens or more" in note
    assert "target-only/bs16/t0" in envelope["data"]["plan"]["groups"][0]["cells"]


# --- the sweep against the stand-in sglang --------------------------------------------------


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = install_fake_sglang(tmp_path / "fake")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_SGLANG_LOG", str(tmp_path / "engines.log"))
    monkeypatch.setenv("FAKE_SGLANG", "{}")


def test_a_hybrid_sweep_runs_nextn_and_ends_with_a_recommendation(tmp_path: Path, fake_sglang: None) -> None:
    prompts = json.loads((HYBRID / "heldout_prompts.json").read_text())
    setting = settings.make_setting(
        "fixture", scratch=tmp_path / "models", target=HYBRID / "target", draft=HYBRID / "draft",
        prompt_ids=prompts, prompt_note="64 chat prompts",
    )
    config = bp.BenchConfig(budgets=(8, 32), batch_sizes=(1, 2), temperatures=(0.0,), max_new_tokens=9,
                            prompts_per_cell=3, primer=False)
    plan = bp.plan_sweep(setting, config)
    out = tmp_path / "out"
    report = supervision.run_bench(
        Path(sys.executable), plan, out, context={"gpu": "fake"},
        runner_options={"idle_gap_s": 0.01, "health_idle_s": 0.01},
    )
    assert {g["name"]: g["status"] for g in report["groups"]}["nextn"] == "ok"
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    nextn = next(e for e in engines if e.get("speculative_algorithm") == "NEXTN")
    assert nextn["speculative_draft_model_path"] == str(HYBRID / "target")
    result = bench_module._result(report, out)
    rec = result.data["report"]["recommendation"]
    # which arm wins is the stand-in's wall-clock noise; what the recommendation holds is not
    policies = ("B=8", "B=32", "schedule 1:8,2:32", "schedule 1:32,2:8")
    assert rec["batch_sizes"] == [1, 2] and rec["ddtree"]["policy"] in policies
    assert set(rec["per_batch_size"][0]["speedup"]) == {"target-only", "DFLASH", "NEXTN"}
    state = rec["recurrent_state"]
    conv = 6 * (2 * 2 * 64 + 6 * 64) * 3 * 2  # a conv window per node, 6 GDN layers
    snapshot = 6 * 6 * 64 * 64 * 4 + conv  # a recurrent state and a conv window
    flat = 6 * ((2 * 64 + 6 * 64) * 2 + 2 * 6 * 4) + conv  # k, v bf16 and g, beta fp32, a conv window
    slot = 6 * 64 * 64 * 4  # one layer's state, fp32: a branch scratch slot
    assert state["ddtree_state"] == "flat"  # the default; per_request: the served widths (none if target-only won)
    for entry in state["per_request"]:
        n = entry["verify_tokens"]
        if entry["config"].startswith("DDTREE"):
            want = ("flat", n * flat + max(1, min((n - 1) // 2, 15)) * slot)
        else:
            want = ("snapshot", n * snapshot)
        assert (entry["state"], entry["bytes"]) == want, entry
    markdown = (out / "bench.md").read_text()
    assert markdown.rstrip().endswith("```") and "## Recommendation" in markdown
    assert "python -m sglang.launch_server" in markdown and "64 chat prompts" in markdown
    assert "SGLANG_DDTREE_HYBRID_STATE=" not in markdown  # the default state needs no switch


def test_mem_fraction_static_reaches_every_engine() -> None:
    done, envelope = dry_run(*PAIR, "--budgets", "32", "--mem-fraction-static", "0.85")
    assert done.returncode == 0, done.stderr
    assert {g["engine"]["mem_fraction_static"] for g in envelope["data"]["plan"]["groups"]} == {0.85}


def test_nextn_without_overlap_runs_so_and_survives_reanalysis(tmp_path: Path, fake_sglang: None) -> None:
    """The rule `bench` applies for stock sglang 0.5.14 on a hybrid target (bench.nextn_overlap)."""
    setting = settings.make_setting("hybrid", scratch=tmp_path / "models")
    why = crash_reason(hybrid=setting.hybrid, attention_backend="triton", sglang_version="0.5.14")
    config = bp.BenchConfig(budgets=(8,), batch_sizes=(2,), temperatures=(0.0,), max_new_tokens=9, prompts_per_cell=2,
                            primer=False, only=("dflash", "nextn-no-overlap"), baseline_attention_backend="triton")
    plan = bp.plan_sweep(replace(setting, nextn_without_overlap={"triton": why}), config)
    out = tmp_path / "out"
    report = supervision.run_bench(Path(sys.executable), plan, out, context={"gpu": "fake", "sglang": "0.5.14"},
                                   runner_options={"idle_gap_s": 0.01, "health_idle_s": 0.01})
    engines = [json.loads(line) for line in (tmp_path / "engines.log").read_text().splitlines()]
    nextn = next(e for e in engines if e.get("speculative_algorithm") == "NEXTN")
    assert nextn["disable_overlap_schedule"] is True and nextn["speculative_draft_model_path"] == str(HYBRID / "target")
    assert {g["name"]: g["status"] for g in report["groups"]} == {"dflash": "ok", "nextn-no-overlap": "ok"}
    bench_module._result(report, out)
    again = json.loads(run_cli("bench", "--reanalyse", str(out), "--json").stdout)["data"]["report"]
    assert [g["name"] for g in again["groups"]] == ["dflash", "nextn-no-overlap"]
    assert again["cells"] == json.loads(json.dumps(report["cells"]))
    assert any(n.startswith("NEXTN on triton ran without overlap scheduling: in stock sglang 0.5.14") for n in again["notes"])
