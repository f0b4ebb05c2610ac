"""Where the bundled fixtures are: each pair's folder (target/, draft/ and its held-out prompts),
the dense target's EAGLE-3 drafter and the tokenizer of the byte vocabulary both pairs share."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PAIRS = {"dense": FIXTURES, "hybrid": FIXTURES / "hybrid"}
BYTE_TOKENIZER = FIXTURES / "byte_tokenizer"
EAGLE3_DRAFT = FIXTURES / "eagle3"
