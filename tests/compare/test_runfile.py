"""Reading a run of the DDTree reference code: the committed fixture run, and every refusal."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ddtree_overlay.compare.runfile import arm_of, read_run
from ddtree_overlay.engine.errors import ExitCode, RunFileInvalid

RUN = Path(__file__).with_name("data") / "ddtree-benchmark-fixture-dense.pt"
PROMPTS = Path(__file__).parents[2] / "ddtree_overlay" / "fixtures" / "heldout_prompts.json"


def test_the_committed_fixture_run_reads_as_typed_turns() -> None:
    run = read_run(RUN)
    assert run.method_keys == ("baseline", "dflash", "ddtree_tb16", "ddtree_tb64")
    assert run.budgets == (16, 64) and run.block_size == 16
    assert (run.temperature, run.max_new_tokens, run.target_attention) == (0.0, 64, "sdpa")
    assert run.target == "ddtree_overlay/fixtures/target"
    assert [list(t.prompt) for t in run.turns] == json.loads(PROMPTS.read_text())[:8]
    for turn in run.turns:
        baseline = turn.methods["baseline"]
        assert set(baseline.acceptance_lengths) == {1}  # target-only: one token per round
        assert 0 < len(baseline.tokens) <= 64 and baseline.time_per_output_token > 0
        for key in run.method_keys[1:]:
            assert sum(turn.methods[key].acceptance_lengths) + 1 >= len(turn.methods[key].tokens)


@pytest.mark.parametrize(
    ("key", "label"),
    [("baseline", "target-only"), ("dflash", "DFLASH"), ("ddtree_tb32", "DDTREE B=32")],
)
def test_reference_method_keys_are_the_tools_arms(key: str, label: str) -> None:
    assert arm_of(key).label == label


def result(prompt: list[int], generated: list[int], lengths: list[int]) -> SimpleNamespace:
    return SimpleNamespace(
        output_ids=torch.tensor([prompt + generated]), num_input_tokens=len(prompt),
        num_output_tokens=len(generated), acceptance_lengths=lengths,
        time_per_output_token=0.01, time_to_first_token=0.1,
    )


def run_data(**changes: object) -> dict:
    turn = {"baseline": result([1, 2], [3, 4, 5], [1, 1]), "dflash": result([1, 2], [3, 4, 5], [3])}
    data = {
        "responses": [turn], "block_size": 16, "draft_attn_implementation": "sdpa",
        "target_attn_implementation": "sdpa",
        "args": {"model_name_or_path": "t", "draft_name_or_path": "d", "temperature": 0.0, "max_new_tokens": 3},
    }
    data.update(changes)
    return data


def refused(path: Path, fragment: str) -> None:
    with pytest.raises(RunFileInvalid, match=fragment) as caught:
        read_run(path)
    assert caught.value.exit_code == ExitCode.BAD_RUN_FILE


def test_a_minimal_run_reads(tmp_path: Path) -> None:
    torch.save(run_data(), tmp_path / "run.pt")
    run = read_run(tmp_path / "run.pt")
    assert run.turns[0].prompt == (1, 2) and run.turns[0].methods["dflash"].tokens == (3, 4, 5)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (["not", "a", "dict"], "holds a list, not the run_data dict"),
        (run_data(responses=[]), "holds no turn"),
        ({k: v for k, v in run_data().items() if k != "args"}, "no key 'args'"),
        (run_data(responses=[{"baseline": result([1], [2], [1]), "eagle": result([1], [2], [1])}]), "unknown method 'eagle'"),
        (run_data(responses=[{"dflash": result([1], [2], [1])}]), "no `baseline`"),
        (run_data(responses=[{"baseline": result([1], [2], [1]), "dflash": result([9], [2], [1])}]), "prompts differ"),
        (run_data(responses=[{"baseline": result([1], [2], [0]), "dflash": result([1], [2], [1])}]), "integers >= 1"),
        (run_data(args={"model_name_or_path": "t", "draft_name_or_path": "d", "temperature": 0.0}), "no `max_new_tokens`"),
        (run_data(block_size="16"), "`block_size` is a str"),
    ],
)
def test_a_malformed_run_is_refused_with_its_reason(tmp_path: Path, data: object, fragment: str) -> None:
    torch.save(data, tmp_path / "run.pt")
    refused(tmp_path / "run.pt", fragment)


class Payload:
    def __reduce__(self):  # would run code on an unrestricted load
        return (print, ("loaded",))


def test_a_file_that_is_not_plain_saved_data_is_refused_unloaded(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch.save({"responses": [Payload()]}, tmp_path / "evil.pt")
    refused(tmp_path / "evil.pt", "objects other than tensors")
    assert "loaded" not in capsys.readouterr().out


def test_missing_and_foreign_files_are_refused(tmp_path: Path) -> None:
    refused(tmp_path / "nope.pt", "no such file")
    refused(tmp_path, "it is a directory")
    (tmp_path / "run.json").write_text("{}")
    refused(tmp_path / "run.json", r"not a torch.save file \(not a zip archive\)")
    (tmp_path / "run.pkl").write_bytes(pickle.dumps(run_data()))
    refused(tmp_path / "run.pkl", r"not a torch.save file \(not a zip archive\)")
