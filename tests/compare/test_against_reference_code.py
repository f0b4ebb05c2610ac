"""The tool's offline reference decoder against the DDTree reference code's own run.

`data/ddtree-benchmark-fixture-dense.pt` was made by the reference repository's
`dflash_generate` / `ddtree_generate` on the bundled dense fixture pair, fp32 on a CPU
(docs/compare.md has the command). Replaying its prompts through `ddtree_overlay.reference`
must give the same greedy outputs and acceptance within 3 % per method and budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddtree_overlay.compare.analysis import compare_runs
from ddtree_overlay.compare.replay import replay_with_reference
from ddtree_overlay.compare.runfile import read_run

FIXTURES = Path(__file__).parents[2] / "ddtree_overlay" / "fixtures"
RUN = Path(__file__).with_name("data") / "ddtree-benchmark-fixture-dense.pt"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
def test_the_reference_decoder_agrees_with_the_reference_codes_run() -> None:
    run = read_run(RUN)
    result = compare_runs(run, replay_with_reference(run, FIXTURES / "target", FIXTURES / "draft"))
    assert result["matched_prompts"] == 8 and not result["missing_arms"]
    for method in result["methods"]:
        assert method["greedy_equal"] == 8, method
        if method["method"] != "baseline":
            assert method["acceptance_within"], method
    assert result["agrees"]
