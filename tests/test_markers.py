"""The quick loops: `pytest -m "not browser"` leaves out exactly the tests that drive a real browser (conftest.py
marks every test of a module that uses tests/browser_harness.py); `-m "not browser and not slow"` the slow ones too."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


# One fresh Python process collects every selection below, one ``pytest.main`` after another (one torch import for
# all of them), and prints each one's test ids after a line naming it.
COLLECTOR = """
import sys
import pytest
for selection in sys.argv[1:]:
    marker, *files = selection.split("|")
    print(f"=== {selection}", flush=True)
    pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker, *files])
"""
SELECTIONS = {
    ("slow", "test_package.py"),
    ("not browser and not slow", "test_package.py"),
    ("browser", "test_browser_layout.py", "test_layout.py"),
    ("not browser", "test_browser_layout.py", "test_layout.py"),
}


@pytest.fixture(scope="module")
def collections() -> dict[tuple[str, ...], list[str]]:
    """The test ids that ``pytest -m marker files...`` collects, for each of SELECTIONS (collection only)."""
    arguments = ["|".join([marker, *(str(TESTS / f) for f in files)]) for marker, *files in SELECTIONS]
    result = subprocess.run(
        [sys.executable, "-c", COLLECTOR, *arguments], capture_output=True, text=True, cwd=TESTS.parent, timeout=300
    )
    found: dict[tuple[str, ...], list[str]] = {}
    current = None
    for line in result.stdout.splitlines():
        if line.startswith("=== "):
            marker, *files = line[4:].split("|")
            current = found.setdefault((marker, *(Path(f).name for f in files)), [])
        elif "::" in line and current is not None:
            current.append(line)
    assert set(found) == SELECTIONS, result.stdout[-2000:] + result.stderr[-2000:]
    return found


def collected(collections, marker: str, *files: str) -> list[str]:
    return collections[(marker, *files)]


def test_the_slow_tests_are_left_out_of_the_quickest_loop(collections):
    """torchrun and the fresh processes of the bench scripts are marked ``slow`` by hand; the rest of their module
    stays in the quickest loop."""
    slow = collected(collections, "slow", "test_package.py")
    quickest = collected(collections, "not browser and not slow", "test_package.py")
    assert len(slow) > 10 and all("bench_scripts_start" in t or "console_command" in t for t in slow)
    assert quickest and not any("bench_scripts_start" in t for t in quickest)


def test_browser_modules_are_marked_and_left_out_of_the_quick_loop(collections):
    browser = collected(collections, "browser", "test_browser_layout.py", "test_layout.py")
    quick = collected(collections, "not browser", "test_browser_layout.py", "test_layout.py")
    assert browser and all(test.startswith("tests/test_browser_layout.py::") for test in browser)
    assert len(quick) > 10 and all(test.startswith("tests/test_layout.py::") for test in quick)
