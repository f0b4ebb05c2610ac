"""The grammar arms' own verdict: every constrained request's output, read in the fixtures'
byte vocabulary, is a full match of its regex (the arms' ``grammars``, taken in turn by the
requests as `in_target/engine_runner.py` sends them)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

BYTE_IDS = 256  # ids 0..255 are the text's bytes (fixtures/README.md)
EOS_ID = 257  # the token a terminated grammar allows, which ends its request


def output_text(ids: Sequence[int]) -> str | None:
    """The text of byte ``ids``, less one final EOS; None where any other id is not a byte."""
    body = ids[:-1] if ids and ids[-1] == EOS_ID else ids
    if any(not 0 <= token < BYTE_IDS for token in body):
        return None
    return bytes(body).decode("latin-1")


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
        if text is None or re.fullmatch(regex, text) is None:
            failures.append({"prompt": index, "regex": regex, "output": ids if text is None else text})
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
