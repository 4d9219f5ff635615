"""The hostile corpus (tests/hostile_images.py): every case decodes correctly or is refused clearly."""

import re

import numpy as np
import pytest
from hostile_images import CORPUS, Case

from vitviz.preprocessing import ImageError, load_image


def test_the_corpus_is_broad():
    names = [case.name for case in CORPUS]
    assert len(set(names)) == len(names) >= 25
    assert sum(case.good for case in CORPUS) >= 10 and sum(not case.good for case in CORPUS) >= 15


@pytest.mark.parametrize("case", [c for c in CORPUS if c.good], ids=lambda c: c.name)
def test_good_case_decodes_to_the_right_pixels(case: Case):
    image = load_image(case.make())
    assert image.mode == "RGB" and image.size == case.size
    for (x, y), expected in case.pixels.items():
        actual = image.getpixel((x, y))
        assert all(abs(a - e) <= case.tolerance for a, e in zip(actual, expected)), (x, y, actual, expected)


@pytest.mark.parametrize("case", [c for c in CORPUS if not c.good], ids=lambda c: c.name)
def test_bad_case_is_refused_with_a_message_that_names_the_problem(case: Case):
    with pytest.raises(ImageError) as error:
        load_image(case.make())
    assert re.search(case.error, str(error.value)), str(error.value)
    assert isinstance(error.value, ValueError)  # callers may catch ValueError


def test_interlaced_png_matches_its_source_exactly():
    from hostile_images import encode, noise

    source = noise((9, 7))
    assert np.array_equal(np.asarray(load_image(encode(source, "PNG", interlace=1))), np.asarray(source))
