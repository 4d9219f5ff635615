"""Tests of how the AppTests read the page's numbers (tests/page_reading.py)."""

from __future__ import annotations

import pytest
from page_reading import assert_percent, fix_precision, percent_after, same_text


def test_numbers_match_within_one_unit_of_their_last_digit_and_words_exactly():
    assert same_text("P(cat) 4.0% after 2 blocks", "P(cat) 3.9% after 2 blocks")
    assert not same_text("P(cat) 4.1% after 2 blocks", "P(cat) 3.9% after 2 blocks")
    assert not same_text("P(dog) 3.9% after 2 blocks", "P(cat) 3.9% after 2 blocks")
    assert not same_text("P(cat) 3.9% after 3 blocks", "P(cat) 3.9% after 2 blocks")  # whole numbers: exact
    assert same_text("from 1.24e-05 to 0.5", "from 1.25e-05 to 0.5")
    assert same_text("Δ −0.025 pp", "Δ -0.026 pp")
    assert not same_text("32x32 input", "32x48 input")


def test_a_percentage_is_read_after_its_words():
    assert percent_after("**Zero-shot prediction: 'a dog' (4.0%, sigmoid)**", "'a dog' (") == 4.0
    assert_percent("'a dog' (4.0%", "'a dog' (", 0.0396)
    with pytest.raises(AssertionError):
        assert_percent("'a dog' (4.2%", "'a dog' (", 0.0396)


def test_fixed_precision_settles_auto_without_timing(monkeypatch):
    from vitviz_dashboard.cache import models

    fix_precision(monkeypatch, "bf16")
    assert models.measure_precision(None).precision == "bf16"
