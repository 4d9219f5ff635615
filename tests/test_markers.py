"""The quick loops: `pytest -m "not browser"` leaves out exactly the tests that drive a real browser (conftest.py
marks every test of a module that uses tests/browser_harness.py); `-m "not browser and not slow"` the slow ones too."""

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


def test_the_slow_tests_are_left_out_of_the_quickest_loop():
    """torchrun and the fresh processes of the bench scripts are marked ``slow`` by hand; the rest of their module
    stays in the quickest loop."""
    slow = collected("slow", "test_package.py")
    quickest = collected("not browser and not slow", "test_package.py")
    assert len(slow) > 10 and all("bench_scripts_start" in t or "console_command" in t for t in slow)
    assert quickest and not any("bench_scripts_start" in t for t in quickest)


def test_browser_modules_are_marked_and_left_out_of_the_quick_loop():
    browser = collected("browser", "test_browser_layout.py", "test_layout.py")
    quick = collected("not browser", "test_browser_layout.py", "test_layout.py")
    assert browser and all(test.startswith("tests/test_browser_layout.py::") for test in browser)
    assert len(quick) > 10 and all(test.startswith("tests/test_layout.py::") for test in quick)
