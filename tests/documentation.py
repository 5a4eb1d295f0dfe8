"""The documentation site's pages as the tests read them: their sections and their code blocks (issue 31 §3).

Docs pages are what users copy from, so the tests run the code they print rather than a copy of it. A fenced
`python` block is run by a test; the HTML comment just above it says which one (docs/contributing.md):

- no comment: tests/sidewisp/test_docs.py runs the block as written, alone, in a fresh namespace;
- `<!-- docs-test: NAME -->`: the test that asks for `block("NAME")` runs it, with the names or the server it
  needs (`RUN_BY` says which file; test_docs.py checks that the file asks for it);
- `<!-- docs-test: fragment -->`: a sketch with names that are not defined on the page, never run; its text
  names the tested code it is cut from.

Code included with `--8<--` from a file the tests run is tested through that file. Shell, JSON and YAML blocks
are never run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Each named block, and the test file that runs it.
RUN_BY = {
    "observed": "tests/agents/test_docs_examples.py",
    "react-swarm": "tests/agents/test_docs_examples.py",
}

_FENCE = re.compile(
    r"^(?:<!-- docs-test: (?P<marker>[^>]+?) -->\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)^```$", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    marker: str | None
    code: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def pages() -> list[str]:
    return sorted(path.name for path in DOCS.glob("*.md"))


def blocks(name: str) -> list[Block]:
    text = page(name)
    return [
        Block(name, text.count("\n", 0, found.start("lang")) + 1, found["lang"], found["marker"], found["code"])
        for found in _FENCE.finditer(text)
    ]


def every_block() -> list[Block]:
    return [found for name in pages() for found in blocks(name)]


def block(marker: str) -> str:
    """The code of the one block marked `<!-- docs-test: marker -->`, wherever it is."""
    (found,) = [found for found in every_block() if found.marker == marker]
    return found.code


def section(name: str, title: str) -> str:
    """The text under the heading that starts with `title` (any level), up to the next heading of that level.

    Lines in code blocks are never headings (a shell block's `# or: ...` comment is not one)."""
    lines, fence, start, level = page(name).split("\n"), False, None, 0
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        heading = None if fence else re.match(r"^(#+) (.*)$", line)
        if heading and start is None and heading.group(2).startswith(title):
            start, level = number, len(heading.group(1))
        elif heading and start is not None and len(heading.group(1)) <= level:
            return "\n".join(lines[start:number])
    assert start is not None, f"docs/{name} has no heading starting {title!r}"
    return "\n".join(lines[start:])
