"""docs/BENCHMARKS.md's recurrent-state memory table for Qwen3.6-27B at TP = 2 and 8 requests,
and the 48 GB card arithmetic under it, recomputed from bench.state_memory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddtree_overlay.bench import state_memory as sm
from ddtree_overlay.bench.arms import verify_width
from ddtree_overlay.bench.settings import qwen3_6_27b_configs
from ddtree_overlay.bench.target_config import target_config

DASH, TIMES = "\u2013", "\u00d7"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"
GDN = target_config(qwen3_6_27b_configs()[0]).gated_deltanet
REQUESTS, TP = 8, 2
A6000_BYTES = 49140 * sm.MIB
STATIC_FRACTION = 0.9
WEIGHTS_PER_CARD = (50.1 + 3.2) / 2 * sm.GIB  # bench.md's target and drafter bf16 weights, halved


def section() -> str:
    text = PAGE.read_text()
    return text.split("## How much recurrent-state memory does a hybrid verify keep?", 1)[1].split("\n## ", 1)[0]


def entry(state: str, width: int, tp_size: int = TP) -> dict:
    return sm.memory_entry(GDN, state, verify_width=width, concurrency=REQUESTS, tp_size=tp_size)


def with_live(e: dict) -> float:
    return (e["total_bytes"] + e["live_bytes"]) / sm.GIB


@pytest.mark.parametrize("budget", [8, 16, 32, 64, 128, 256])
def test_each_budgets_row(budget):
    width = verify_width(budget)  # the pools are at least a draft block wide
    flat, snap = entry(sm.FLAT, width), entry(sm.SNAPSHOT, width)
    cells = [
        sm.size_text(flat["per_request_bytes"]),
        sm.size_text(flat["total_bytes"]),
        sm.size_text(snap["per_request_bytes"]),
        sm.size_text(snap["total_bytes"]),
    ]
    assert f"| DDTREE B = {budget} | {width} | " + " | ".join(cells) + " |" in section()


def test_dflash_row_and_live_states():
    dflash = entry(sm.SNAPSHOT, 16)
    text = section()
    row = f"| DFLASH (block 16) | 16 | {DASH} | {DASH} | {sm.size_text(dflash['per_request_bytes'])} | {sm.size_text(dflash['total_bytes'])} |"
    assert row in text
    assert f"({sm.size_text(dflash['live_bytes'])})" in text


def test_flat_against_dflash_per_request_at_b64():
    flat, dflash = entry(sm.FLAT, 65, tp_size=1), entry(sm.SNAPSHOT, 16, tp_size=1)
    ratio = flat["per_request_bytes"] / dflash["per_request_bytes"]
    cited = f"flat {sm.size_text(flat['per_request_bytes'])} against DFLASH's {sm.size_text(dflash['per_request_bytes'])}, {ratio:.2f}{TIMES}"
    assert cited in section()


def test_the_48_gb_card_arithmetic():
    free = STATIC_FRACTION * A6000_BYTES / sm.GIB - WEIGHTS_PER_CARD / sm.GIB
    dflash = with_live(entry(sm.SNAPSHOT, 16))
    widest_snapshot = max(w for w in range(2, 300) if with_live(entry(sm.SNAPSHOT, w)) <= free) - 1
    text = " ".join(section().split())
    assert f"take {WEIGHTS_PER_CARD / sm.GIB:.1f} GiB per card" in text
    assert f"leaving {free:.1f} GiB" in text
    assert f"DFLASH at 8 requests keeps {dflash:.1f} GiB of state" in text
    assert f"leaves {free - dflash:.1f} GiB of KV cache" in text
    assert f"keeps {with_live(entry(sm.FLAT, 17)):.1f} GiB at B = 16" in text
    assert f"and {with_live(entry(sm.FLAT, 257)):.1f} GiB at B = 256" in text
    assert re.search(rf"fits 8 requests at all is {widest_snapshot}\b", text)
