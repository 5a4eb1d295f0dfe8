from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter, because this test process may already have Django loaded
# (pytest-django) and would then prove nothing.
CHECK = """
import sys
import receipts.verdicts.bundle, receipts.verdicts
loaded = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
assert not loaded, loaded
"""


def test_the_bundle_parser_and_the_classifier_import_without_django() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr


def test_the_check_would_notice_a_django_import() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", "import django\n" + CHECK],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode != 0
    assert "AssertionError" in completed.stderr
