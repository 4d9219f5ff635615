"""How the AppTests read the page's numbers (tested in tests/test_app_reading.py).

Two things made page tests fail by chance on a busy machine, and these helpers rule both out:
- The page's precision "auto" times fp32 against bf16 and keeps the faster, so a loaded machine could switch the
  page to bf16 and move a probability from 3.9 % to 4.0 %. ``fix_precision`` settles "auto" without timing
  (fp32), so every AppTest knows the precision the page computes in.
- A rounded string compared with a rounded reference fails whenever the two values sit on either side of a
  rounding boundary. ``same_text`` compares the words exactly and the numbers with a tolerance: one unit of the
  last digit shown.
"""

from __future__ import annotations

import math
import re

import pytest

from vitviz.model.precision import PrecisionChoice

NUMBER = re.compile(r"[-+−]?(?:\d+\.\d*|\.\d+|\d+)(?:e[-+]?\d+)?")


def fix_precision(monkeypatch, precision: str = "fp32") -> None:
    """Precision "auto" settles on ``precision`` without timing anything (AppTest runs the page in this process)."""
    from vitviz_dashboard.cache import models

    choice = PrecisionChoice(precision, math.nan, math.nan, f"{precision}, fixed by the tests")
    monkeypatch.setattr(models, "measure_precision", lambda model: choice)


def _unit(number: str) -> float:
    """One unit of the last digit written: "3.9" -> 0.1, "1.25e-05" -> 1e-07; 0 for a whole number (exact)."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    if not decimals and not exponent:
        return 0.0
    return 10.0 ** (int(exponent or 0) - decimals)


def _value(number: str) -> float:
    return float(number.replace("−", "-"))


def same_text(shown: str, expected: str) -> bool:
    """Whether ``shown`` reads as ``expected`` (the test's own numbers put through the page's format): the same
    words, and every number within one unit of the last digit either writes (3.9 % and 4.0 % match: the values
    3.949 and 3.951 round apart). Whole numbers (layer 1, 32x32) must be equal."""
    shown_numbers, expected_numbers = NUMBER.findall(shown), NUMBER.findall(expected)
    if NUMBER.split(shown) != NUMBER.split(expected) or len(shown_numbers) != len(expected_numbers):
        return False
    for a, b in zip(shown_numbers, expected_numbers):
        tolerance = max(_unit(a), _unit(b)) * 1.0001
        if abs(_value(a) - _value(b)) > tolerance:
            return False
    return True


def shown_in(expected: str, texts) -> bool:
    """Whether one of ``texts`` reads as ``expected`` (same_text)."""
    return any(same_text(text, expected) for text in texts)


def percent_after(text: str, before: str) -> float:
    """The percentage the page wrote right after ``before``: "...'a dog' (3.9%" -> 3.9."""
    match = re.search(re.escape(before) + r"\s*(" + NUMBER.pattern + r")\s*%", text)
    assert match, f"no percentage after {before!r} in {text!r}"
    return _value(match.group(1))


def assert_percent(text: str, before: str, probability: float, decimals: int = 1) -> None:
    """The page wrote ``probability`` after ``before``, as a percentage with ``decimals`` decimals: within half a unit
    of its last digit, and a little more for the rounding of the reference."""
    shown = percent_after(text, before)
    assert shown == pytest.approx(100 * probability, abs=0.5001 * 10.0**-decimals + 1e-4), text
