"""The grammar arms' own verdict: every constrained request's output, read in the fixtures'
byte vocabulary, is a full match of its regex (the arms' ``grammars``, taken in turn by the
requests as `in_target/engine_runner.py` sends them).

The text is what the byte tokenizer decodes with its special tokens skipped: xgrammar allows
a token whose text is empty (the fixtures' BOS, PAD, MASK and padding ids) anywhere, as it
changes no grammar state, and EOS is what a terminated grammar allows. That an arm emitted
the same tokens as target-only, special ones included, is the lossless verdict's to judge."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

BYTE_IDS = 256  # ids 0..255 are the text's bytes; the rest are special (fixtures/README.md)


def output_text(ids: Sequence[int]) -> str:
    """The text of ``ids``: their bytes, the special tokens skipped."""
    return bytes(token for token in ids if 0 <= token < BYTE_IDS).decode("latin-1")


def grammar_verdict(record: Mapping[str, Any], grammars: Sequence[str | None]) -> dict[str, Any]:
    """How many of ``record``'s constrained outputs fully match their regex, and the rest."""
    failures = []
    constrained = 0
    for index, ids in enumerate(record["outputs"]):
        regex = grammars[index % len(grammars)]
        if regex is None:
            continue
        constrained += 1
        text = output_text(ids)
        if re.fullmatch(regex, text) is None:
            failures.append({"prompt": index, "regex": regex, "output": text})
    return {
        "arm": record["arm"],
        "constrained": constrained,
        "matched": constrained - len(failures),
        "failures": failures,
        "passed": constrained > 0 and not failures,
    }


def grammar_problem(verdict: Mapping[str, Any]) -> str:
    """One line for a verdict that did not pass."""
    if not verdict["constrained"]:
        return f"{verdict['arm']}: no constrained request decoded"
    first = verdict["failures"][0]
    return (
        f"{verdict['arm']}: {len(verdict['failures'])} of {verdict['constrained']} constrained outputs are not "
        f"a full match of their regex (prompt {first['prompt']}, {first['regex']!r}: {first['output']!r})"
    )
