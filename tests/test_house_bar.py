"""The house rules of issue 37, held by reading the code (tests/code_reading.py): each piece of state, cache, model
run and statistic name has one place. Each rule's detector is also shown to find a planted break, so none of these
tests can pass by finding nothing."""

from __future__ import annotations

import pytest
from code_reading import attribute_names, called_names, code_strings, keyword_names, product_files, relative

from vitviz.explain.head_statistics import HEAD_STATISTICS

RECORDS = "vitviz/explain/head_statistics.py"
CACHE = "vitviz_dashboard/cache/"
STREAMLIT_CACHES = {"cache_data", "cache_resource"}
# what running a model looks like: calling it (``model(x)``, ``_model.forward``), autograd, or a pass's switches
MODEL_NAMES = {"model", "_model", "intact_model", "forward"}
PASS_CALLS = {"inference_mode", "no_grad", "enable_grad", "backward", "autocast"}
PASS_KEYWORDS = {"attention_sink", "output_attentions", "output_hidden_states"}


def statistic_names() -> set[str]:
    """Every head statistic's name and stored column (the per-prefix columns are built from prefix names)."""
    return {s.name for s in HEAD_STATISTICS} | {c for s in HEAD_STATISTICS if not s.per_prefix for c in s.columns([])}


def spells_a_statistic(source_strings: list[str]) -> bool:
    return bool(statistic_names() & set(source_strings))


def caches_with_streamlit(source: str) -> bool:
    return bool(STREAMLIT_CACHES & attribute_names(source))


def runs_a_model(source: str) -> bool:
    return bool((MODEL_NAMES | PASS_CALLS) & called_names(source) or PASS_KEYWORDS & keyword_names(source))


def test_a_statistic_name_is_spelled_only_in_its_record():
    """Code names a statistic by its record (``DISTANCE_PX.name``), so adding or renaming one is one edit."""
    found = [relative(p) for p in product_files() if relative(p) != RECORDS and spells_a_statistic(code_strings(p))]
    assert found == []


def test_caches_live_only_in_cache():
    """Every cached result is in vitviz_dashboard/cache/, keyed by a typed key and under the byte budget."""
    found = [
        relative(p)
        for p in product_files("vitviz_dashboard")
        if not relative(p).startswith(CACHE) and caches_with_streamlit(p.read_text())
    ]
    assert found == []


def test_the_dashboard_runs_no_model():
    """The dashboard lays out widgets and calls vitviz/: no module of it calls a model, its forward, autograd or a
    pass's switches (the cache calls library functions such as explain.method_maps with the model)."""
    found = [relative(p) for p in product_files("vitviz_dashboard") if runs_a_model(p.read_text())]
    assert found == []


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("@st.cache_data\ndef f(): ...", caches_with_streamlit),
        ("x = st.cache_resource(max_entries=2)(f)", caches_with_streamlit),
        ("out = model(pixels)", runs_a_model),
        ("out = _model.forward(pixels)", runs_a_model),
        ("with torch.inference_mode():\n    pass", runs_a_model),
        ("loss.backward()", runs_a_model),
        ("explain(m, x, attention_sink=s)", runs_a_model),
    ],
)
def test_each_detector_finds_a_planted_break(source, rule):
    assert rule(source)


def test_the_statistic_detector_finds_a_planted_name():
    assert spells_a_statistic(["layer", "distance_px"]) and not spells_a_statistic(["layer", "head"])
    assert {"entropy", "distance_px", "distance_patches", "prefix_shares"} <= statistic_names()
