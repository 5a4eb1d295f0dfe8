"""The documentation site builds without a warning, and every code block it prints that runs is run (issue 31 §3).

`mkdocs build --strict` turns every warning into a failure: a broken link or anchor, a page missing from the
nav, a missing included file. The build runs without Django settings (mkdocstrings reads the source without
importing it) and fetches nothing. Which test runs which block is in tests/documentation.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import documentation
from tests.documentation import DOCS, ROOT, RUN_BY

INCLUDE = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"$')


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["NO_MKDOCS_2_WARNING"] = "1"  # Material's notice about its successor, printed on every build
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_the_site_builds_strictly_without_django_settings(tmp_path):
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("SidewispMiddleware", "observe", "aobserve", "await_decision", "instrument", "uninstrument"):
        assert f'id="sidewisp_agent.{name}"' in api, name
    for name in ("configure", "ConfigurationError", "WaitPolicy", "Outcome", "conclude", "flush"):
        assert f'id="sidewisp_agent.{name}"' in api, name
    first_graph = (tmp_path / "site" / "getting-started" / "index.html").read_text()
    assert "make_graph" in first_graph and "--8&lt;--" not in first_graph  # included from the tested file


@pytest.fixture
def copy_of_the_site(tmp_path) -> Path:
    """The docs and mkdocs.yml copied, the code they read linked: a page can be broken without touching ours."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    for name in ("agents", "receipts", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


@pytest.mark.parametrize(
    ("breakage", "named"),
    [
        (lambda docs: (docs / "index.md").write_text("[gone](no-such-page.md)\n"), "no-such-page.md"),
        (lambda docs: (docs / "index.md").write_text("[gone](observe.md#no-such-heading)\n"), "no-such-heading"),
        (lambda docs: (docs / "orphan.md").write_text("# Not in the nav\n"), "orphan.md"),
    ],
    ids=["broken link", "broken anchor", "page missing from the nav"],
)
def test_a_broken_link_or_a_page_missing_from_the_nav_fails_the_build(copy_of_the_site, breakage, named):
    breakage(copy_of_the_site / "docs")

    result = build(copy_of_the_site / "mkdocs.yml", copy_of_the_site / "site")

    assert result.returncode != 0
    assert named in result.stdout + result.stderr


def test_every_page_is_in_the_nav_and_the_readme_links_only_to_pages_that_exist():
    config = (ROOT / "mkdocs.yml").read_text()
    assert sorted(re.findall(r"^  - [^:]+: (\S+\.md)$", config, re.M)) == documentation.pages()
    readme = (ROOT / "README.md").read_text()
    linked = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert linked, "the README links into the docs"
    for path in linked:
        assert (ROOT / path).is_file(), path


# --- the code blocks ----------------------------------------------------------------------------------------


def python_blocks() -> list[documentation.Block]:
    return [found for found in documentation.every_block() if found.lang in ("python", "py")]


def included(found: documentation.Block) -> list[re.Match]:
    lines = [line for line in found.code.splitlines() if line.strip()]
    matches = [INCLUDE.match(line) for line in lines]
    return matches if lines and all(matches) else []


def test_every_code_block_says_its_language():
    unmarked = [found.where for found in documentation.every_block() if not found.lang]
    assert not unmarked, f"say the language (python, sh, json, text) of {unmarked}"


def test_every_python_block_is_run_included_from_a_tested_file_or_marked_a_fragment():
    markers = [found.marker for found in python_blocks() if found.marker]
    allowed = {"fragment", *RUN_BY}
    assert not set(markers) - allowed, f"unknown markers {set(markers) - allowed}: add them to RUN_BY"
    for name, test_file in RUN_BY.items():
        assert markers.count(name) == 1, f"the block {name!r} is marked {markers.count(name)} times in docs/"
        assert f'block("{name}")' in (ROOT / test_file).read_text(), f"{test_file} does not run {name!r}"


@pytest.mark.parametrize("found", [b for b in python_blocks() if included(b)], ids=lambda b: b.where)
def test_an_included_block_comes_from_a_file_the_tests_run(found):
    for include in included(found):
        path = ROOT / include["path"]
        assert path.is_file() and include["path"].startswith("tests/"), include["path"]
        if include["section"]:
            assert f"# --8<-- [start:{include['section']}]" in path.read_text(), include.group(0)


@pytest.mark.parametrize(
    "found", [b for b in python_blocks() if not b.marker and not included(b)], ids=lambda b: b.where
)
def test_a_block_with_no_marker_runs_as_written(found, db):
    exec(compile(found.code, found.where, "exec"), {"__name__": "docs_example"})


def test_a_block_with_no_marker_would_be_run():
    """The extraction sees an unmarked block, so a new one cannot hide from the test above."""
    text = "Prose.\n\n```python\nanswer = 6 * 7\n```\n\n<!-- docs-test: fragment -->\n```python\nmodel(...)\n```\n"
    found = list(documentation._FENCE.finditer(text))
    assert [(match["lang"], match["marker"], match["code"]) for match in found] == [
        ("python", None, "answer = 6 * 7\n"),
        ("python", "fragment", "model(...)\n"),
    ]


# --- the README ----------------------------------------------------------------------------------------------


def first_graph(text: str) -> tuple[str, str]:
    (graphs,) = re.findall(r"^export SIDEWISP_GRAPHS='(.+)'$", text, re.M)
    (graph_input,) = re.findall(r"^(?:\.venv/bin/)?python manage.py start_run desk --input '(.+)'$", text, re.M)
    return graphs, graph_input


def test_the_readme_is_one_screen_of_what_a_newcomer_needs():
    readme = (ROOT / "README.md").read_text()

    assert len(readme.splitlines()) <= 300
    # The Makefile and .ci/run name "the two commands" of the README.
    assert "## The two commands" in readme
    assert "make run    # everything, from a fresh clone" in readme and "make test   # the whole test suite" in readme
    (image,) = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", readme)
    assert (ROOT / image).is_file(), image


def test_the_readmes_slowest_tests_are_twenty_tests_that_exist_each_with_what_it_proves():
    """Issue 32 §5: the README lists the suite's slowest twenty; a test renamed or removed fails here."""
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| [\d.]+ \| `(tests/[\w/]+\.py)::(\w+)(?:\[[^\]]*\])?` \| (.+) \|$", readme, re.M)

    assert len(rows) == 20, rows
    for path, name, proves in rows:
        assert re.search(rf"^\s*(?:async )?def {name}\(", (ROOT / path).read_text(), re.M), f"{path}::{name}"
        assert len(proves.split()) >= 4, f"{name}: say what it proves"


def test_the_first_graph_is_the_same_in_the_readme_getting_started_and_observe():
    """tests/agents/test_hosted.py runs the README's lines and test_docs_examples.py the Observe page's."""
    readme = first_graph((ROOT / "README.md").read_text())

    assert first_graph(documentation.section("getting-started.md", "Your first graph")) == readme
    assert first_graph(documentation.section("observe.md", "Hosted")) == readme
