"""The README and docs/ pages: every link reaches a file and, where it names one, a heading;
every repository path they quote exists; the exit-code page says what the code says."""

from __future__ import annotations

import itertools
import re
import unicodedata
from pathlib import Path

import pytest
from overlay_helpers import REPO_ROOT

from ddtree_overlay.engine.errors import EXIT_CODE_MEANINGS

PAGES = sorted(
    [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md"), *(REPO_ROOT / "ddtree_overlay").rglob("README.md")]
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
REPO_DIRS = ("docs/", "scripts/", "tests/", "ddtree_overlay/", "overlay/", "patches/", "manifests/", ".github/", ".ci/")


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lowercased, punctuation dropped, spaces as
    hyphens, repeats numbered."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = match.group(1).lower()
        slug = "".join(
            ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Mn"
        ).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def _expand_braces(text: str) -> list[str]:
    parts = re.split(r"\{([^{}]*)\}", text)
    choices = [[piece] if i % 2 == 0 else piece.split(",") for i, piece in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def quoted_paths(page: Path) -> list[str]:
    """Repository paths a page quotes in backticks (braces expanded; placeholders skipped)."""
    found = []
    for span in CODE_SPAN.findall(FENCE.sub("", page.read_text())):
        candidate = span.split("::")[0].rstrip("/")
        if not candidate.startswith(REPO_DIRS) or " " in candidate:
            continue
        if any(mark in candidate for mark in ("…", "<", "*", "$", "RUN", "DIR")) or re.search(r"/[A-Z]+(\.|$)", candidate):
            continue
        found.extend(_expand_braces(candidate))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: outside the repository
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in heading_anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(REPO_ROOT)}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_quoted_repository_path_exists(page: Path) -> None:
    missing = [path for path in quoted_paths(page) if not (REPO_ROOT / path).exists()]
    assert not missing, missing


def test_the_anchor_rule_matches_github_on_punctuation_and_repeats(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Fixture, bs 1 / 4: B = 256 (`81f68f6`)\n## Notes\n## Notes\n```\n# not a heading\n```\n")
    assert heading_anchors(page) == {"fixture-bs-1--4-b--256-81f68f6", "notes", "notes-1"}


def test_exit_code_page_lists_the_codes_the_cli_returns() -> None:
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`?([A-Z_]+)`?\s*\|", (REPO_ROOT / "docs" / "exit-codes.md").read_text(), re.M)
    assert {int(code): name for code, name in rows} == {int(code): code.name for code in EXIT_CODE_MEANINGS}
