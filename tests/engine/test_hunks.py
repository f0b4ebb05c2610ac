"""The hunk applier, alone and differentially against GNU patch -F0."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtree_overlay.engine.hunks import (
    PatchParseError,
    apply_hunks,
    parse_patch,
    revert_hunks,
    split_lines,
)

GNU_PATCH = shutil.which("patch")
GNU_DIFF = shutil.which("diff")
needs_gnu = pytest.mark.skipif(not (GNU_PATCH and GNU_DIFF), reason="GNU patch/diff not installed")

WORDS = [b"alpha", b"beta", b"gamma", b"caf\xe9", b"\xff\xfe raw", b"  indented", b"", b"\tx"]


def unified_diff(tmp: Path, before: bytes, after: bytes) -> bytes:
    (tmp / "a").write_bytes(before)
    (tmp / "b").write_bytes(after)
    done = subprocess.run(
        [GNU_DIFF, "-u", "-a", "--label", "a/f", "--label", "b/f", "a", "b"],
        cwd=tmp, capture_output=True, check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def gnu_patch(tmp: Path, target: bytes, patch: bytes) -> bytes | None:
    (tmp / "target").write_bytes(target)
    (tmp / "p.diff").write_bytes(patch)
    out = tmp / "out"
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [GNU_PATCH, "-F0", "-N", "-s", "--no-backup-if-mismatch", "-r", "-", "-o", "out",
         "-i", "p.diff", "target"],
        cwd=tmp, capture_output=True, check=False, stdin=subprocess.DEVNULL,
    )
    return out.read_bytes() if done.returncode == 0 else None


@st.composite
def text_files(draw, min_lines=0):
    words = draw(st.lists(st.sampled_from(WORDS), min_size=min_lines, max_size=24))
    endings = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(words), max_size=len(words)))
    lines = [w + e for w, e in zip(words, endings, strict=True)]
    if lines and draw(st.booleans()):
        lines[-1] = lines[-1].rstrip(b"\r\n") or b"z"
    return lines


@st.composite
def edits(draw, lines):
    edited = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, len(edited)))
        new = draw(st.sampled_from(WORDS)) + draw(st.sampled_from([b"\n", b"\r\n"]))
        if op == "insert" or not edited:
            edited.insert(at, new)
        elif op == "delete":
            edited.pop(min(at, len(edited) - 1))
        else:
            edited[min(at, len(edited) - 1)] = new
    # an unterminated line may only be the last one
    for index, line in enumerate(edited[:-1]):
        if not line.endswith(b"\n"):
            edited[index] = line + b"\n"
    return edited


@st.composite
def drifted(draw, lines):
    """The file the patch is applied to: the original, shifted or damaged a little."""
    target = list(lines)
    kind = draw(st.sampled_from(["same", "prepend", "append", "damage", "duplicate"]))
    extra = [draw(st.sampled_from(WORDS)) + b"\n" for _ in range(draw(st.integers(1, 4)))]
    if kind == "prepend":
        target = extra + target
    elif kind == "append" and (not target or target[-1].endswith(b"\n")):
        target = target + extra
    elif kind == "damage" and target:
        at = draw(st.integers(0, len(target) - 1))
        target[at] = b"damaged" + target[at]
    elif kind == "duplicate":
        target = target + [line if line.endswith(b"\n") else line + b"\n" for line in target]
    return target


@needs_gnu
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_applier_agrees_with_gnu_patch_at_fuzz_zero(tmp_path: Path, data) -> None:
    before = data.draw(text_files())
    after = data.draw(edits(before))
    patch = unified_diff(tmp_path, b"".join(before), b"".join(after))
    if not patch:
        return
    target = b"".join(data.draw(drifted(before)))
    ours = apply_hunks(target, parse_patch(patch)[0].hunks)
    theirs = gnu_patch(tmp_path, target, patch)
    if ours.applied:
        assert theirs == ours.after
    elif theirs is not None:
        # The one allowed disagreement: GNU patch picks the nearest of several matches.
        assert any(h.status == "ambiguous" for h in ours.hunks), (ours, theirs)


@needs_gnu
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_reverted_hunks_give_back_the_source_as_gnu_patch_r_does(tmp_path: Path, data) -> None:
    before = b"".join(data.draw(text_files()))
    after = b"".join(data.draw(edits(data.draw(text_files()))))
    patch = unified_diff(tmp_path, before, after)
    if not patch:
        return
    ours = revert_hunks(after, parse_patch(patch)[0].hunks)
    assert ours == before
    (tmp_path / "p.diff").write_bytes(patch)
    (tmp_path / "target").write_bytes(after)
    done = subprocess.run(
        [GNU_PATCH, "-R", "-F0", "-s", "--no-backup-if-mismatch", "-i", "p.diff", "target"],
        cwd=tmp_path, capture_output=True, check=False, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0 and (tmp_path / "target").read_bytes() == ours


def test_round_trips_crlf_missing_newline_and_non_utf8_bytes(tmp_path: Path) -> None:
    before = b"one\r\ntwo\xff\r\nthree\r\nfour"
    after = b"one\r\nTWO\xff\r\nthree\r\nfour\r\nfive"
    outcome = apply_hunks(before, parse_patch(unified_diff(tmp_path, before, after))[0].hunks)
    assert outcome.after == after


def test_reports_the_offset_a_hunk_moved_by(tmp_path: Path) -> None:
    before = b"".join(b"line %d\n" % i for i in range(20))
    after = before.replace(b"line 10\n", b"line ten\n")
    hunks = parse_patch(unified_diff(tmp_path, before, after))[0].hunks
    outcome = apply_hunks(b"new 1\nnew 2\n" + before, hunks)
    assert outcome.after == b"new 1\nnew 2\n" + after
    assert (outcome.hunks[0].offset, outcome.hunks[0].line) == (2, 10)


def test_refuses_context_that_matches_twice_away_from_the_expected_line(tmp_path: Path) -> None:
    block = b"a\nb\nc\nd\ne\nf\ng\n"
    before = b"head\n" + block
    after = b"head\n" + block.replace(b"d\n", b"D\n")
    hunks = parse_patch(unified_diff(tmp_path, before, after))[0].hunks
    outcome = apply_hunks(b"x\nx\nx\n" + block + b"y\n" + block + b"tail\n", hunks)
    assert outcome.after is None
    assert outcome.hunks[0].status == "ambiguous"
    assert outcome.hunks[0].candidates == (4, 12)


def test_accepts_the_expected_position_even_when_context_repeats(tmp_path: Path) -> None:
    block = b"a\nb\nc\nd\ne\nf\ng\n"
    before = block + b"mid\n" + block
    after = block.replace(b"d\n", b"D\n") + b"mid\n" + block
    hunks = parse_patch(unified_diff(tmp_path, before, after))[0].hunks
    assert apply_hunks(before, hunks).after == after


def test_names_a_line_ending_mismatch(tmp_path: Path) -> None:
    before = b"a\nb\nc\nd\ne\n"
    after = b"a\nb\nC\nd\ne\n"
    hunks = parse_patch(unified_diff(tmp_path, before, after))[0].hunks
    outcome = apply_hunks(before.replace(b"\n", b"\r\n"), hunks)
    assert outcome.after is None
    assert "line endings" in (outcome.hunks[0].hint or "")


def test_names_an_already_applied_hunk(tmp_path: Path) -> None:
    before = b"a\nb\nc\n"
    after = b"a\nb\ninserted\nc\n"
    hunks = parse_patch(unified_diff(tmp_path, before, after))[0].hunks
    outcome = apply_hunks(after, hunks)
    assert outcome.after is None
    assert "already present" in (outcome.hunks[0].hint or "")


def test_reads_a_patch_file_that_was_converted_to_crlf_whole(tmp_path: Path) -> None:
    before = b"a\nb\nc\nd\n"
    after = b"a\nB\nc\nd\n"
    patch = unified_diff(tmp_path, before, after).replace(b"\n", b"\r\n")
    assert apply_hunks(before, parse_patch(patch)[0].hunks).after == after


def test_wrong_hunk_header_counts_name_the_patch_line() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n"
    with pytest.raises(PatchParseError, match="shorter") as raised:
        parse_patch(patch)
    assert raised.value.line == 6


def test_split_lines_keeps_every_byte() -> None:
    data = b"a\r\nb\n\nc"
    assert split_lines(data) == [b"a\r\n", b"b\n", b"\n", b"c"]
    assert b"".join(split_lines(data)) == data
