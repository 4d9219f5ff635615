"""The quick loop: `pytest -m "not browser"` leaves out exactly the tests that drive a real browser (conftest.py
marks every test of a module that uses tests/browser_harness.py)."""

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def collected(marker: str, *files: str) -> list[str]:
    """The test ids that ``pytest -m marker`` collects from ``files`` (a subprocess: collection only)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker]
    result = subprocess.run(
        [*command, *(str(TESTS / f) for f in files)], capture_output=True, text=True, cwd=TESTS.parent, timeout=120
    )
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_browser_modules_are_marked_and_left_out_of_the_quick_loop():
    browser = collected("browser", "test_browser_layout.py", "test_layout.py")
    quick = collected("not browser", "test_browser_layout.py", "test_layout.py")
    assert browser and all(test.startswith("tests/test_browser_layout.py::") for test in browser)
    assert len(quick) > 10 and all(test.startswith("tests/test_layout.py::") for test in quick)
