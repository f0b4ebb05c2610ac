"""What a long job tells the person waiting: the step it is on, and each part it finishes.

Jobs (the demo's and the matrix's installs, each matrix release, the bench's engines) call a
`Progress`; `render.progress` picks how it shows: a live line on a terminal, plain lines when
stderr is piped, nothing under `--json`.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def begin(self, total: int | None) -> None:
        """The job has ``total`` parts (None: unknown)."""

    def step(self, text: str) -> None:
        """What runs now, e.g. "sglang 0.5.23: install the wheel"."""

    def detail(self, text: str) -> None:
        """The step's latest word from a child (pip's "Downloading torch-..." line)."""

    def log(self, text: str) -> None:
        """A line that stays, e.g. "engine dflash: ok, started in 41 s"."""

    def done(self, text: str) -> None:
        """One part of ``total`` finished; ``text`` (a line that stays) says how it went."""


class Quiet:
    """A `Progress` that shows nothing."""

    def begin(self, total: int | None) -> None: ...
    def step(self, text: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def log(self, text: str) -> None: ...
    def done(self, text: str) -> None: ...


QUIET = Quiet()
