"""bench.grammar_outputs: a constrained output read in the byte vocabulary and judged against
its regex."""

from __future__ import annotations

from ddtree_overlay.bench.check_presets import DIGITS_REGEX, GRAMMAR_CYCLE, LINE_REGEX
from ddtree_overlay.bench.grammar_outputs import grammar_problem, grammar_verdict, output_text

EOS_ID, MASK_ID = 257, 259  # fixtures/README.md


def ids(text: str, *, eos: bool = True) -> list[int]:
    return [*text.encode(), *([EOS_ID] if eos else [])]


def test_an_output_reads_as_the_tokenizer_decodes_it_its_special_tokens_skipped() -> None:
    assert output_text(ids("12;")) == output_text(ids("12;", eos=False)) == "12;"
    # xgrammar allows the empty-text specials anywhere (seen with the byte tokenizer, 0.5.17)
    assert output_text([49, MASK_ID, 50, 59, EOS_ID]) == "12;"
    assert output_text([]) == ""


def test_each_request_is_judged_by_the_regex_its_turn_gave_it() -> None:
    outputs = [ids("x = 1\n"), ids("1,22,333;"), ids("anything at all"), ids("def f():\n")]
    verdict = grammar_verdict({"arm": "a", "outputs": outputs}, GRAMMAR_CYCLE)
    assert (verdict["constrained"], verdict["matched"], verdict["passed"]) == (3, 3, True)


def test_a_partial_match_a_wrong_token_or_no_constrained_request_fails() -> None:
    partial = grammar_verdict({"arm": "a", "outputs": [ids("x = 1\n"), ids("1,22")]}, GRAMMAR_CYCLE)
    assert [f["prompt"] for f in partial["failures"]] == [1] and not partial["passed"]
    assert grammar_problem(partial) == (
        f"a: 1 of 2 constrained outputs are not a full match of their regex (prompt 1, {DIGITS_REGEX!r}: '1,22')"
    )
    long_line = grammar_verdict({"arm": "a", "outputs": [ids("x" * 81 + "\n")]}, (LINE_REGEX,))
    assert not long_line["passed"]  # 80 characters at most before the newline
    letter = grammar_verdict({"arm": "a", "outputs": [[49, MASK_ID, ord("a"), 59, EOS_ID]]}, (DIGITS_REGEX,))
    assert letter["failures"][0]["output"] == "1a;"
    none = grammar_verdict({"arm": "a", "outputs": [ids("free text")]}, (None,))
    assert grammar_problem(none) == "a: no constrained request decoded" and not none["passed"]
