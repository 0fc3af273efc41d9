"""The README and docs/*.md speak to users: they say what is true now, not the project's
history, which a user cannot follow. No issue or pull-request numbers, no commit hashes in
their prose (code blocks and inline code, which quote commands and outputs such as a
dataset's digest, are left out)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\b(?:issue|pull request|PR)s? ?#?\d+|(?<![\w&])#\d+\b", re.I)
HEX = re.compile(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w/-])")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text without fenced blocks and inline code."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`]*`", "", text)


def history(text: str) -> list[str]:
    """Issue numbers and commit-like hashes (hex with both digits and letters) in ``text``."""
    found = HISTORY.findall(text)
    found += [h for h in HEX.findall(text) if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    return found


def test_the_checker_finds_what_it_refuses():
    assert history("before issue 35 it failed; fixed in #12 at main 2c8038f.") == [
        "issue 35",
        "#12",
        "2c8038f",
    ]
    assert history("about 3,185 ms on 64 chips, 128256 tokens, 1e-3, v5p-128") == []


def test_user_docs_name_no_issue_and_no_commit():
    found = {
        page.relative_to(REPO).as_posix(): history(prose(page.read_text())) for page in pages()
    }
    assert not {page: hits for page, hits in found.items() if hits}, found
