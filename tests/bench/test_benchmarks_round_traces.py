"""The round-trace and stage-profile numbers docs/BENCHMARKS.md cites, recomputed from the
records committed under docs/bench/ and looked up in the section that cites them."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

from test_benchmarks_records import section, summary, x

DOCS = Path(__file__).resolve().parents[2] / "docs"
SPLIT_RUN = DOCS / "bench" / "2026-12-04-qwen3-8b-bs16-kernel-split-splitkv"
B16_RUN = DOCS / "bench" / "2026-12-04-qwen3-8b-bs16-b16-splitkv"
STALL_RUN = DOCS / "bench" / "2026-12-04-fresh-engine-stall-own-kv-mover"
TIMES = "\N{MULTIPLICATION SIGN}"


def xz_text(path: Path) -> str:
    return lzma.decompress(path.read_bytes()).decode()


def three_figures(ms: float) -> str:
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def split_kv_records(run: Path = SPLIT_RUN) -> dict[str, dict]:
    records = json.loads(xz_text(run / "round_trace.json.xz"))
    return {r["arm"]: r for r in records if "error" not in r}


def test_the_batch_16_kernel_split_table_is_the_records():
    text = section("Batch 16 at the Qwen3-8B shape, by kernel family: the KV mover gone, the split-KV verify in an engine")
    records = split_kv_records()
    rows = {
        "DDTREE B = 15": records["ddtree-b15"],
        "DFLASH": records["dflash"],
        "DDTREE B = 15, split-KV verify": records["ddtree-b15@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv"],
    }
    for label, record in rows.items():
        gpu = record["trace"]["gpu"]
        families = gpu["families"]
        cells = [
            f"{record['step_ms']:.3f}",
            f"{gpu['kernel_ms']:.3f}",
            f"{families['attention']:.3f}",
            f"{families['gemm']:.3f}",
            f"{families['sampling/top-k']:.3f}",
            f"{families.get('ddtree', 0.0):.3f}".replace("0.000", "0"),
            f"{families['norm/act/rope/elementwise']:.3f}",
        ]
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        assert [c.strip("* ") for c in row.split("|")[2:-1]] == cells, label


def test_the_batch_16_differences_and_ratios_are_the_records():
    text = section("Batch 16 at the Qwen3-8B shape, by kernel family: the KV mover gone, the split-KV verify in an engine")
    records = split_kv_records()
    tree, chain = records["ddtree-b15"], records["dflash"]
    split = records["ddtree-b15@SGLANG_DDTREE_VERIFY_ATTENTION=splitkv"]
    kernel = {name: r["trace"]["gpu"]["kernel_ms"] for name, r in (("tree", tree), ("chain", chain), ("split", split))}
    assert f"+{kernel['tree'] - kernel['chain']:.3f} kernel" in text
    assert f"({kernel['split'] / kernel['chain']:.2f}{TIMES})" in text
    assert f"({split['step_ms'] / chain['step_ms']:.2f}{TIMES})" in text
    assert f"without it {kernel['tree'] / kernel['chain']:.2f}{TIMES} and {tree['step_ms'] / chain['step_ms']:.2f}{TIMES}" in text
    grown = split["trace"]["gpu"]["families"]["ddtree"] - tree["trace"]["gpu"]["families"]["ddtree"]
    assert f"growth, {grown:.3f} ms" in text


def test_the_fresh_engine_windows_are_the_profile():
    text = section("A fresh engine's first rounds with the commit's own KV mover")
    windows = [json.loads(line) for line in xz_text(STALL_RUN / "profile.jsonl.xz").splitlines() if line.strip()]
    rows = {
        "rounds": [str(w["rounds"]) for w in windows],
        "slowest round, ms": [three_figures(w["ms_max"]["round"]) for w in windows],
        "slowest commit, ms": [f"{w['ms_max']['commit']:.2f}" for w in windows],
        "slowest draft, ms": [three_figures(w["ms_max"]["draft"]) for w in windows],
    }
    for label, cells in rows.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        assert [c.strip() for c in row.split("|")[2:-1]] == cells, label
    slowest_commit = max(w["ms_max"]["commit"] for w in windows)
    assert f"no commit above {slowest_commit:.2f} ms" in text


def test_the_b16_split_kv_round_against_dflash_is_the_round_trace():
    by_arm = split_kv_records(B16_RUN)
    dflash = by_arm["dflash"]
    text = section("Batch 16 at the Qwen3-8B shape with the split-KV verify: B = 16 and B = 15 against DFLASH")
    rows = {"DDTREE B = 16, split-KV verify": "ddtree-b16", "DFLASH": "dflash", "DDTREE B = 15, split-KV verify": "ddtree-b15"}
    families = ("attention", "gemm", "sampling/top-k", "ddtree", "norm/act/rope/elementwise")
    wall, kernel = [], []
    for label, prefix in rows.items():
        record = next(r for arm, r in by_arm.items() if arm.split("@")[0] == prefix)
        gpu = record["trace"]["gpu"]
        ratios = ["–", "–"]
        if prefix != "dflash":
            wall.append(record["step_ms"] / dflash["step_ms"])
            kernel.append(gpu["kernel_ms"] / dflash["trace"]["gpu"]["kernel_ms"])
            ratios = [f"**{x(wall[-1])}**", x(kernel[-1])]
        cells = [label, f"{record['step_ms']:.3f}", ratios[0], f"{gpu['kernel_ms']:.3f}", ratios[1]]
        cells += [f"{gpu['families'][f]:.3f}" if f in gpu["families"] else "0" for f in families]
        assert "| " + " | ".join(cells) + " |" in text, cells
    assert " / ".join(map(x, wall)) == "1.07× / 0.90×" and " / ".join(map(x, kernel)) == "1.09× / 0.94×"
    assert "**1.07× / 0.90×**" in summary() and "kernel ms 1.09× / 0.94×" in summary()
