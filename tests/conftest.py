"""Fixtures shared by the test modules (pytest finds them here; no test module imports another's fixtures).

- ``tiny_vit``: a small random ViT of each family in tiny_models.TINY_FAMILIES (a test that takes it runs once per
  family); ``@pytest.mark.parametrize("tiny_vit", [...], indirect=True)`` picks families by name.
- ``offline``: no network and an empty Hugging Face Hub cache.
- ``built``: the block counts of the ViTs built during a test.
- ``fresh_caches`` and ``default_model``: for the page's AppTests, which run the page in this process.

Every test of a module that uses tests/browser_harness.py is marked ``browser``, so ``pytest -m "not browser"`` is
the quick loop (pytest_collection_modifyitems below).
"""

import socket
from pathlib import Path

import pytest
from huggingface_hub import constants
from tiny_models import TINY_FAMILIES, build_tiny_vit, tiny_checkpoint

from vitviz import ViT


def uses_the_browser(module) -> bool:
    """Whether a test module drives a real browser: it imports tests/browser_harness.py or something from it."""
    return any(
        getattr(value, "__name__", None) == "browser_harness" or getattr(value, "__module__", None) == "browser_harness"
        for value in vars(module).values()
    )


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and uses_the_browser(module):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(params=list(TINY_FAMILIES))
def tiny_vit(request) -> ViT:
    """A ``build_tiny_vit`` model of the family named by the parameter, its weights perturbed by noise 0.3."""
    return build_tiny_vit(request.param)


@pytest.fixture
def offline(tmp_path, monkeypatch) -> Path:
    """No network at all (every connection and name lookup fails at once) and an empty Hub cache; returns the cache."""

    def unreachable(*args, **kwargs):
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket.socket, "connect", unreachable)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(socket.gaierror(-3, "no DNS")))
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def built(monkeypatch) -> list[int]:
    """The block counts of every ViT built (on any device) during the test."""
    counts, build = [], ViT.__init__

    def counted(self, config):
        counts.append(config.num_layers)
        build(self, config)

    monkeypatch.setattr(ViT, "__init__", counted)
    return counts


@pytest.fixture
def fresh_caches(monkeypatch) -> None:
    """Empty page caches, no local sample images, and precision "auto" fixed at fp32 (whatever the machine's load,
    page_reading.py). AppTest runs every page in this process, so Streamlit's caches outlive a test; the page
    test modules use this fixture for every test (``pytestmark``)."""
    import streamlit as st
    from page_reading import fix_precision

    from vitviz_dashboard.cache import budget

    st.cache_resource.clear()
    st.cache_data.clear()
    budget.STORE.clear()  # and the page's own store, bounded by the memory budget
    monkeypatch.setenv("VITVIZ_SAMPLES", "")
    fix_precision(monkeypatch)


@pytest.fixture
def default_model(tmp_path, monkeypatch) -> Path:
    """A small checkpoint standing in for the shipped default (AppTest runs the page in this process)."""
    import vitviz.loading.specs

    path = tiny_checkpoint(tmp_path / "default.pt")
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    return path
