"""`ddtree-overlay compare` end to end: a refused run file, other models, SGLang records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from overlay_helpers import run_cli

from ddtree_overlay.compare.records import acceptance_length
from ddtree_overlay.compare.runfile import read_run
from ddtree_overlay.engine.errors import ExitCode

RUN = Path(__file__).with_name("data") / "ddtree-benchmark-fixture-dense.pt"
FIXTURES = Path(__file__).parents[2] / "ddtree_overlay" / "fixtures"


def test_a_file_that_is_no_run_is_refused_with_its_own_exit_code(tmp_path: Path) -> None:
    (tmp_path / "run.pt").write_text("not a run")
    done = run_cli("compare", "--baseline", str(tmp_path / "run.pt"), "--out", str(tmp_path / "out"))
    assert done.returncode == ExitCode.BAD_RUN_FILE, done.stderr
    assert done.stderr.startswith(f"error: cannot read the run file `{tmp_path / 'run.pt'}`: not a torch.save file")
    assert not (tmp_path / "out").exists()


def test_a_run_made_with_other_models_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "Qwen3-8B"
    other.mkdir()
    (other / "config.json").write_text("{}")
    done = run_cli("compare", "--baseline", str(RUN), "--target", str(other), "--draft", str(FIXTURES / "draft"))
    assert done.returncode == ExitCode.BAD_RUN_FILE, done.stderr
    assert "was made with `ddtree_overlay/fixtures/target`" in done.stderr and "its name is `qwen3-8b`" in done.stderr
    narrow = tmp_path / "target"
    narrow.mkdir()
    (narrow / "config.json").write_text(json.dumps({"vocab_size": 256}))
    done = run_cli("compare", "--baseline", str(RUN), "--target", str(narrow), "--draft", str(FIXTURES / "draft"))
    assert done.returncode == ExitCode.BAD_RUN_FILE and "outside its vocabulary of 256" in done.stderr


def test_a_recorded_model_path_that_is_not_there_from_here_says_so(tmp_path: Path) -> None:
    # the committed run recorded its models relative to the repository root
    done = subprocess.run(
        [sys.executable, "-m", "ddtree_overlay", "compare", "--baseline", str(RUN), "--records", str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert done.returncode == ExitCode.BAD_RUN_FILE, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.endswith("was made with `ddtree_overlay/fixtures/target`, which is no model directory here"), first


def engine_records(run, *, scale: float) -> list[dict]:
    """SGLang-shaped records that reproduce the run's outputs, DDTREE's acceptance scaled."""
    records = []
    for key in run.method_keys:
        arm = {"baseline": "target-only", "dflash": "dflash"}.get(key, key.replace("ddtree_tb", "ddtree-b"))
        metas = []
        for turn in run.turns:
            gen = turn.methods[key]
            factor = scale if key.startswith("ddtree") else 1.0
            rounds = (len(gen.tokens) - 1) / acceptance_length(gen.acceptance_lengths, len(gen.tokens)) / factor
            metas.append({"completion_tokens": len(gen.tokens), "spec_verify_ct": round(rounds)})
        records.append({
            "arm": arm, "ok": True, "tok_per_s": 100.0,
            "outputs": [list(turn.methods["baseline"].tokens) for turn in run.turns], "meta": metas,
        })
    return records


def test_sglang_records_are_judged_against_the_run(tmp_path: Path) -> None:
    run = read_run(RUN)
    for scale, code in ((1.0, ExitCode.OK), (1.5, ExitCode.VERIFY_FAILED)):
        records = tmp_path / f"records-{scale}.jsonl"
        records.write_text("".join(json.dumps(r) + "\n" for r in engine_records(run, scale=scale)))
        out = tmp_path / f"out-{scale}"
        done = run_cli("compare", "--baseline", str(RUN), "--records", str(records), "--out", str(out),
                       "--target", str(FIXTURES / "target"), "--draft", str(FIXTURES / "draft"), "--json")
        assert done.returncode == code, done.stderr
        envelope = json.loads(done.stdout)
        assert envelope["data"]["side"] == "sglang" and envelope["data"]["matched_prompts"] == 8
        assert (out / "compare.md").exists() and json.loads((out / "compare.json").read_text())["agrees"] == (scale == 1.0)
