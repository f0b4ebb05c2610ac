"""`matrix`: the report's shape, and the real run over every DFlash-capable release.

The real run (`-m matrix`) downloads eleven sglang wheels (plus 0.5.11, which must be refused)
and the CPU import closure into ~/.cache/ddtree-overlay/matrix once; later runs reuse them.
It also checks that the committed docs/matrix.md says what a fresh run says.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT

from ddtree_overlay.engine.datadir import bundled_releases
from ddtree_overlay.engine.errors import ExitCode
from ddtree_overlay.engine.releases import why_unsupported
from ddtree_overlay.matrix.envs import wheel_requirements
from ddtree_overlay.matrix.markdown import gpu_runs, render_markdown, statuses_in_markdown
from ddtree_overlay.matrix.run import FAILING, STATUS_MEANINGS, Cell, _import_problems, _report

DFLASH_V2_RELEASES = (
    "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
    "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)


def _base() -> dict[str, object]:
    return {"torch": "2.13.0", "triton": "3.7.1", "torchvision": "0.28.0", "python": "3.11.7",
            "closure_requirements": ["numpy"]}


def test_supported_releases_are_the_bundled_manifests_oldest_first() -> None:
    manifests = sorted(p.stem for p in (REPO_ROOT / "manifests").glob("*.toml"))
    assert sorted(bundled_releases()) == manifests
    assert bundled_releases()[0] == "0.5.14"


def test_markdown_rows_read_back_as_the_cells_statuses() -> None:
    cells = [
        Cell("0.5.14", patch_set="sglang-0.5.14-ddtree", steps={"apply": "ok", "import": "ok", "record": "matches"}),
        Cell("0.5.19", status="unsupported", steps={"apply": "refused (exit 4)"}, details=["no patch set"]),
        Cell("0.5.15", status="import-failed", steps={"apply": "ok", "import": "failed"},
             details=["import x: ModuleNotFoundError"]),
    ]
    text = render_markdown(_report(cells, ("0.5.14", "0.5.15"), _base(), 1.0))
    assert statuses_in_markdown(text) == {"0.5.14": "clean", "0.5.19": "unsupported", "0.5.15": "import-failed"}
    assert "import x: ModuleNotFoundError" in text
    assert all(f"`{status}`" in text for status in STATUS_MEANINGS)
    assert "torchvision" in text and "nms" in text  # the one shim is named
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| 0.5.")}
    assert rows["0.5.14"].endswith("| yes, 2026-12-02: smoke, lossless presets, bench sweeps; dense and hybrid pairs (H200) |")
    assert rows["0.5.15"].endswith("| no |")  # runnable, never run
    assert "| no (sglang-kernel 0.4.6.post1 needs torch 2.13) |" in rows["0.5.19"]


def test_every_release_without_a_gpu_run_is_a_bundled_one() -> None:
    runs = gpu_runs()
    assert set(runs["gpu_checked"]).isdisjoint(runs["not_runnable"])
    assert set(runs["gpu_checked"]) | set(runs["not_runnable"]) <= set(bundled_releases())


def test_wheel_requirements_keep_unconditional_exact_pins_only(tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    metadata = "\n".join([
        "Metadata-Version: 2.1", "Name: sglang", "Version: 9.9.9", "Requires-Python: >=3.11",
        "Requires-Dist: torch==2.14.1", "Requires-Dist: Transformers==5.19.0",
        "Requires-Dist: numpy", "Requires-Dist: av==16.1.0; platform_machine == \"armv7l\"",
        "Requires-Dist: diffusers==0.37.0; extra == \"diffusion\"",
    ])
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sglang-9.9.9.dist-info/METADATA", metadata)
    found = wheel_requirements(wheel)
    assert found == {"python": ">=3.11", "pins": {"torch": "2.14.1", "transformers": "5.19.0"}}


def test_import_problems_name_the_module_the_registry_and_the_contract() -> None:
    report = {
        "modules": {"a": {"ok": True}, "b": {"ok": False, "error": "ImportError: x", "where": "f.py:1"}},
        "registry": {"problems": ["DDTREE's spec class lacks `supports_new`"]},
        "server_args": ["ServerArgs has no `speculative_ddtree_budget` field"],
        "compat": ["DFlashWorkerV2: no member `_mask_token_id`"],
        "verify_width": ["inside the scope (width, capture bs) = (33, [1]), expected (17, [1, 2])"],
        "hybrid_resolution": ["hybrid {'speculative_ddtree_budget': 32}: expected (33, 16, 32, 2), got (33, 16, 32, 1)"],
    }
    problems = _import_problems(report)
    assert problems[0] == "import b: ImportError: x (f.py:1)"
    assert any("supports_new" in p for p in problems)
    assert any("speculative_ddtree_budget" in p for p in problems)
    assert any("_mask_token_id" in p for p in problems)
    assert "verify width scope: inside the scope (width, capture bs) = (33, [1]), expected (17, [1, 2])" in problems
    assert any(p.startswith("hybrid server-args resolution: hybrid") for p in problems)


def test_known_unsupported_releases_have_a_reason() -> None:
    assert "no DFlash" in (why_unsupported("0.5.10") or "")
    assert "registry" in (why_unsupported("0.5.11") or "")
    assert "v1 DFlash worker" in (why_unsupported("0.5.13.post1") or "")
    assert why_unsupported("0.5.14") is None


@pytest.mark.matrix
@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="0.5.22+ wheels need Python >= 3.11")
def test_matrix_over_every_dflash_v2_release_is_green(tmp_path: Path) -> None:
    """CI's matrix: every supported release applies, imports on CPU and rolls back to RECORD.

    The run's progress (a line per step of each release) goes to this test's stderr: live with
    `pytest -s`, and in the report of a failure."""
    out = tmp_path / "matrix"
    versions = ",".join((*DFLASH_V2_RELEASES, "0.5.11"))
    done = subprocess.run(
        [sys.executable, "-m", "ddtree_overlay", "matrix", "--versions", versions, "--out", str(out)],
        stdout=subprocess.PIPE, text=True, check=False, cwd=REPO_ROOT,
    )
    report = json.loads((out / "matrix.json").read_text())
    cells = {cell["release"]: cell for cell in report["cells"]}
    failing = {r: (c["status"], c["details"][:3]) for r, c in cells.items() if c["status"] in FAILING}
    assert done.returncode == ExitCode.OK, (failing, done.stdout[-2000:])
    supported = set(bundled_releases())
    for release, cell in cells.items():
        expected = {"clean", "offset"} if release in supported else {"unsupported"}
        assert cell["status"] in expected, (release, cell["status"], cell["details"][:3])
    assert cells["0.5.11"]["status"] == "unsupported"
    assert "registry" in " ".join(cells["0.5.11"]["details"])
    committed = statuses_in_markdown((REPO_ROOT / "docs" / "matrix.md").read_text())
    fresh = statuses_in_markdown((out / "matrix.md").read_text())
    assert committed == fresh, "docs/matrix.md is stale: regenerate it with `ddtree-overlay matrix --out docs-tmp`"


def test_contract_names_each_missing_parameter_field_member_read_and_unwanted_expression(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from payload_modules import load_payload_module

    contract = load_payload_module("sglang.srt.speculative.ddtree_contract")
    (tmp_path / "fake_dflash.py").write_text(
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class DraftInput:\n"
        "    bonus_tokens: int = 0\n"
        "class Worker:\n"
        "    def __init__(self):\n"
        "        self.block_size = 16\n"
        "    def make(self, *, bonus_tokens, new_seq_lens):\n"
        "        return None\n"
        "@dataclasses.dataclass\n"
        "class Verify:\n"
        "    draft_token: int = 0\n"
        "def sample(verify_input):\n"
        "    return verify_input.draft_token + verify_input.tree_topk\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    problems = contract.contract_problems({
        "fake_dflash:Worker.make": {"params": ("bonus_tokens", "verified_id")},
        "fake_dflash:DraftInput": {"fields": ("bonus_tokens", "nxt_kv_lens_cpu")},
        "fake_dflash:Worker": {"members": ("make", "init_cuda_graphs"), "assigned": ("block_size", "_mask_token_id")},
        "fake_dflash:sample": {
            "reads_subset_of": ("verify_input", "fake_dflash:Verify"),
            "source_reads": ("verify_input.draft_token", "get_spec().speculative_num_draft_tokens"),
            "source_lacks": ("isinstance(verify_input", "verify_input.tree_topk"),
        },
        "fake_dflash:Gone": {},
    })
    assert problems == [
        "fake_dflash:Worker.make: no parameter `verified_id`",
        "fake_dflash:DraftInput: no dataclass field `nxt_kv_lens_cpu`",
        "fake_dflash:Worker: no member `init_cuda_graphs`",
        "fake_dflash:Worker: never assigns `self._mask_token_id`",
        "fake_dflash:sample reads `verify_input.tree_topk`, which fake_dflash:Verify lacks",
        "fake_dflash:sample: no longer reads `get_spec().speculative_num_draft_tokens`",
        "fake_dflash:sample: now contains `verify_input.tree_topk`",
        "fake_dflash:Gone: not found (module 'fake_dflash' has no attribute 'Gone')",
    ]


def test_a_release_that_cannot_be_downloaded_is_setup_failed_and_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ddtree_overlay.matrix.run as matrix_run
    from ddtree_overlay.engine import errors

    def no_such_release(release: str, *args: object, **kwargs: object) -> Path:
        raise errors.pip_failed(f"download sglang=={release}", ["ERROR: No matching distribution found"])

    monkeypatch.setattr(matrix_run, "ensure_wheel", no_such_release)
    monkeypatch.setattr(matrix_run, "cache_root", lambda: tmp_path / "cache")
    result = matrix_run.run_matrix(["9.9.9"], out_dir=tmp_path / "out")  # a release no patch set names
    (cell,) = result.data["cells"]
    assert cell["status"] == matrix_run.SETUP_FAILED and cell["steps"] == {"setup": "failed"}
    assert result.exit_code == ExitCode.VERIFY_FAILED
    assert "could not download sglang==9.9.9" in result.issues[0].message
    assert statuses_in_markdown((tmp_path / "out" / "matrix.md").read_text()) == {"9.9.9": "setup-failed"}
