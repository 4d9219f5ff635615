"""A flat map (every patch the same value, as Chefer et al.'s relevance is on a tiny random Swin) is drawn dark and
said to be flat, not coloured on the top class's scale from 0 as one bright wash."""

import numpy as np
import pytest
from app_harness import open_tab, uploaded_app

from vitviz.render.overlays import is_flat
from vitviz_dashboard.tabs import class_specific

pytestmark = pytest.mark.usefixtures("fresh_caches", "default_model")


def test_a_map_is_flat_when_its_spread_is_next_to_nothing_beside_its_size():
    assert is_flat(np.full((4, 4), 1 / 256)) and is_flat(np.full((4, 4), 1 / 256) + 2.9e-9 * np.eye(4))
    assert is_flat(np.zeros((2, 3)))
    assert not is_flat(np.array([[0.0, 1.0]])) and not is_flat(np.full((4, 4), 1 / 256) + 1e-4 * np.eye(4))
    assert not is_flat(np.array([[np.nan, 1.0]]))


def test_the_class_specific_tab_says_a_flat_map_is_flat(monkeypatch):
    flat = np.full((4, 4), 1 / 16, dtype=np.float32)
    monkeypatch.setattr(class_specific, "class_map", lambda *args, **kwargs: flat)
    at = open_tab(uploaded_app(), "Class-specific")
    notes = [c.value for c in at.caption if c.value.startswith("Flat map")]
    assert len(notes) == 2 and "every patch is 0.0625" in notes[0]  # relevance and LeGrad, the defaults
