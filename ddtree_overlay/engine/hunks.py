"""Strict hunk applier on top of unidiff: bytes in, bytes out.

Hunks are located the way GNU patch 2.7 does at fuzz 0 (a hunk may move by an offset, hunks with
less leading or trailing context are anchored to the start or end of the file), with one
difference: where the context matches in several places and none of them is the position the
header predicts, we refuse instead of taking the nearest one.

Every comparison is on raw bytes. CR, a missing final newline and non-UTF-8 bytes all survive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from unidiff import PatchSet, UnidiffParseError
from unidiff.constants import (
    LINE_TYPE_ADDED,
    LINE_TYPE_CONTEXT,
    LINE_TYPE_NO_NEWLINE,
    LINE_TYPE_REMOVED,
)

# latin-1 maps every byte to one code point and back, so unidiff's text API loses nothing.
_BYTES_AS_TEXT = "latin-1"

LineKind = Literal[" ", "-", "+"]


class PatchParseError(ValueError):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Hunk:
    number: int
    source_start: int
    source_length: int
    lines: tuple[tuple[LineKind, bytes], ...]
    patch_line: int
    target_start: int
    target_length: int

    def reversed(self) -> Hunk:
        """The hunk that turns this one's result back into its source (`patch -R`)."""
        swap: dict[LineKind, LineKind] = {" ": " ", "-": "+", "+": "-"}
        return Hunk(
            number=self.number,
            source_start=self.target_start,
            source_length=self.target_length,
            lines=tuple((swap[kind], text) for kind, text in self.lines),
            patch_line=self.patch_line,
            target_start=self.source_start,
            target_length=self.source_length,
        )

    @property
    def source(self) -> tuple[bytes, ...]:
        return tuple(text for kind, text in self.lines if kind != "+")

    @property
    def target(self) -> tuple[bytes, ...]:
        return tuple(text for kind, text in self.lines if kind != "-")

    @property
    def prefix_context(self) -> int:
        return _leading_context(self.lines)

    @property
    def suffix_context(self) -> int:
        return _leading_context(tuple(reversed(self.lines)))


@dataclass(frozen=True)
class FileDiff:
    source_path: str
    target_path: str
    hunks: tuple[Hunk, ...]
    is_added: bool
    is_removed: bool
    is_rename: bool
    is_binary: bool
    mode_change: bool


@dataclass(frozen=True)
class HunkOutcome:
    number: int
    status: Literal["applied", "mismatch", "ambiguous"]
    expected_line: int
    line: int | None = None
    offset: int = 0
    candidates: tuple[int, ...] = ()
    hint: str | None = None

    def describe(self) -> str:
        if self.status == "applied":
            moved = f" (offset {self.offset:+d} lines)" if self.offset else ""
            return f"hunk #{self.number} applied at line {self.line}{moved}"
        if self.status == "ambiguous":
            where = ", ".join(str(line) for line in self.candidates)
            return (
                f"hunk #{self.number} is ambiguous: its context matches at lines {where}, "
                f"none at the expected line {self.expected_line}"
            )
        hint = f": {self.hint}" if self.hint else ""
        return f"hunk #{self.number} does not match near line {self.expected_line}{hint}"


@dataclass(frozen=True)
class PatchOutcome:
    after: bytes | None
    hunks: tuple[HunkOutcome, ...]

    @property
    def applied(self) -> bool:
        return self.after is not None


def split_lines(data: bytes) -> list[bytes]:
    """Lines split on LF only, each keeping its ending; the last may lack one."""
    lines = data.split(b"\n")
    tail = lines.pop()
    return [line + b"\n" for line in lines] + ([tail] if tail else [])


def parse_patch(data: bytes) -> tuple[FileDiff, ...]:
    lines = _normalised_patch_lines(data)
    consumed = _LineCounter(lines)
    try:
        patch_set = PatchSet(consumed)
    except UnidiffParseError as error:
        raise PatchParseError(str(error), consumed.line) from error
    if not patch_set:
        raise PatchParseError("no file sections found", None)
    return tuple(_file_diff(patched_file) for patched_file in patch_set)


def revert_hunks(after: bytes, hunks: Sequence[Hunk]) -> bytes | None:
    """``after`` with `hunks` undone (applied reversed, fuzz 0); None when one does not match."""
    return apply_hunks(after, [hunk.reversed() for hunk in hunks]).after


def apply_hunks(before: bytes, hunks: Sequence[Hunk]) -> PatchOutcome:
    """Apply `hunks` in order to `before`; `after` is None if any hunk failed."""
    state = _ApplyState(split_lines(before))
    outcomes = tuple(state.apply(hunk) for hunk in hunks)
    if any(outcome.status != "applied" for outcome in outcomes):
        return PatchOutcome(after=None, hunks=outcomes)
    return PatchOutcome(after=state.finish(), hunks=outcomes)


def _normalised_patch_lines(data: bytes) -> list[str]:
    """A patch file that went through a CRLF conversion as a whole is read as LF.

    Only the header lines tell the two cases apart: a diff of CRLF files has CR in its body
    lines but never in its `---` / `+++` / `@@` lines.
    """
    lines = split_lines(data)
    headers = [line for line in lines if line.startswith((b"--- ", b"+++ ", b"@@ "))]
    if headers and all(line.endswith(b"\r\n") for line in headers):
        lines = [line[:-2] + b"\n" if line.endswith(b"\r\n") else line for line in lines]
    return [line.decode(_BYTES_AS_TEXT) for line in lines]


class _LineCounter:
    """Feeds unidiff and remembers the last line it read, for error messages."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        self.line = 0

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(self._lines, 1):
            self.line = number
            yield line


def _file_diff(patched_file) -> FileDiff:  # unidiff.PatchedFile
    hunks = tuple(_hunk(number, hunk) for number, hunk in enumerate(patched_file, 1))
    return FileDiff(
        source_path=patched_file.source_file,
        target_path=patched_file.target_file,
        hunks=hunks,
        is_added=patched_file.is_added_file,
        is_removed=patched_file.is_removed_file,
        is_rename=patched_file.is_rename,
        is_binary=patched_file.is_binary_file,
        mode_change=patched_file.source_mode != patched_file.target_mode,
    )


def _hunk(number: int, hunk) -> Hunk:  # unidiff.Hunk
    lines: list[tuple[LineKind, bytes]] = []
    kinds = {LINE_TYPE_CONTEXT: " ", LINE_TYPE_REMOVED: "-", LINE_TYPE_ADDED: "+"}
    for line in hunk:
        if line.line_type == LINE_TYPE_NO_NEWLINE:
            if not lines:
                raise PatchParseError("`\\ No newline` marker before any line", line.diff_line_no)
            kind, text = lines[-1]
            lines[-1] = (kind, text.removesuffix(b"\n"))
        elif line.line_type in kinds:
            lines.append((kinds[line.line_type], line.value.encode(_BYTES_AS_TEXT)))
    header_line = hunk[0].diff_line_no - 1 if len(hunk) else 0
    return Hunk(
        number=number,
        source_start=hunk.source_start,
        source_length=hunk.source_length,
        lines=tuple(lines),
        patch_line=header_line,
        target_start=hunk.target_start,
        target_length=hunk.target_length,
    )


def _leading_context(lines: tuple[tuple[LineKind, bytes], ...]) -> int:
    count = 0
    for kind, _ in lines:
        if kind != " ":
            break
        count += 1
    return count


class _ApplyState:
    """GNU patch's walk: `frozen` input lines are already copied or deleted."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.out: list[bytes] = []
        self.frozen = 0
        self.offset = 0

    def apply(self, hunk: Hunk) -> HunkOutcome:
        first_guess = hunk.source_start + self.offset + (0 if hunk.source_length else 1)
        candidates = self._candidates(hunk, first_guess)
        if first_guess in candidates:
            where = first_guess
        elif len(candidates) == 1:
            where = candidates[0]
        elif candidates:
            return HunkOutcome(hunk.number, "ambiguous", first_guess, candidates=candidates)
        else:
            hint = _mismatch_hint(self.lines, hunk)
            return HunkOutcome(hunk.number, "mismatch", first_guess, hint=hint)
        self.offset += where - first_guess
        self._write(hunk, where)
        return HunkOutcome(hunk.number, "applied", first_guess, line=where, offset=where - first_guess)

    def finish(self) -> bytes:
        self._copy_till(len(self.lines))
        return b"".join(self.out)

    def _candidates(self, hunk: Hunk, first_guess: int) -> tuple[int, ...]:
        """1-based lines where the hunk's source matches, within GNU patch's window."""
        pattern = hunk.source
        if not pattern:
            return (first_guess,)
        lowest = self.frozen + 1
        highest = len(self.lines) - len(pattern) + 1
        prefix, suffix = hunk.prefix_context, hunk.suffix_context
        if prefix < suffix and hunk.source_start <= 1:
            # Less leading than trailing context: diff saw the start of the file.
            window = [1] if self.frozen <= prefix else []
        elif suffix < prefix:
            # Less trailing context: diff saw the end of the file.
            window = [highest]
        else:
            window = list(range(lowest, highest + 1))
        return tuple(w for w in window if lowest <= w <= highest and self._matches(pattern, w))

    def _matches(self, pattern: tuple[bytes, ...], where: int) -> bool:
        start = where - 1
        return tuple(self.lines[start : start + len(pattern)]) == pattern

    def _write(self, hunk: Hunk, where: int) -> None:
        position = where - 1
        for kind, text in hunk.lines:
            if kind == " ":
                position += 1
            elif kind == "-":
                self._copy_till(position)
                self.frozen += 1
                position += 1
            else:
                self._copy_till(position)
                self._emit(text)

    def _copy_till(self, end: int) -> None:
        for line in self.lines[self.frozen : end]:
            self._emit(line)
        self.frozen = max(self.frozen, end)

    def _emit(self, text: bytes) -> None:
        # GNU patch ends an unterminated line before writing more after it.
        if self.out and not self.out[-1].endswith(b"\n"):
            self.out[-1] += b"\n"
        self.out.append(text)


def _mismatch_hint(lines: list[bytes], hunk: Hunk) -> str | None:
    """Name the near miss, if there is an obvious one."""
    if _occurs(lines, hunk.target) and hunk.target != hunk.source:
        return "its result is already present (applied before, or merged upstream?)"
    if _occurs([_strip_eol(line) for line in lines], tuple(_strip_eol(t) for t in hunk.source)):
        return "it matches only if line endings are ignored (CRLF vs LF)"
    if _occurs([_squash(line) for line in lines], tuple(_squash(t) for t in hunk.source)):
        return "it matches only if whitespace is ignored"
    return None


def _occurs(lines: Sequence[bytes], pattern: tuple[bytes, ...]) -> bool:
    if not pattern:
        return False
    size = len(pattern)
    return any(tuple(lines[i : i + size]) == pattern for i in range(len(lines) - size + 1))


def _strip_eol(line: bytes) -> bytes:
    return line.rstrip(b"\r\n")


def _squash(line: bytes) -> bytes:
    return b" ".join(line.split())
