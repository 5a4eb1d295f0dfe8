"""Reading the JSON and JSON Lines files the management commands take, refusing bad input cleanly.

Every problem becomes a `CommandError` with exit code 2 that names the file
(and the line), never a traceback: unreadable or non-UTF-8 files, invalid
JSON, nesting deep enough to exhaust the parser's recursion, and integers too
long to convert. Lines are split on "\\n" only: U+2028 and friends are valid
inside a JSON string and must not cut a line in two.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from django.core.management.base import CommandError


def read_document(path: Path) -> object:
    """The one JSON document in `path`."""
    return _loads(_read_text(path), path.name)


def read_lines(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) for each non-blank line of a JSON Lines file; the whole file is decoded first."""
    text = _read_text(path)
    for line_no, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield line_no, _loads(line, f"{path.name}:{line_no}")


def loads(text: str, where: str) -> object:
    """One JSON value from `text` (a command-line argument, say); `where` names it in the error."""
    return _loads(text, where)


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise CommandError(f"{path.name}: cannot read ({exc.strerror})", returncode=2) from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path.name}: not UTF-8 text (byte {exc.start})", returncode=2) from None


def _loads(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg})"
    except RecursionError:
        problem = "not valid JSON (nested too deeply)"
    except ValueError:
        # int() refuses integers longer than sys.get_int_max_str_digits() (CVE-2020-10735).
        problem = "not valid JSON (a number is too long)"
    raise CommandError(f"{where}: {problem}", returncode=2)
