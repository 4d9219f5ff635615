"""What is built from a loaded model and kept with it: the zero-shot model of a prompt set, shared like the loaded
models themselves (results.get_model), and the precision "auto" settles on for a model, kept the same way under its
ModelKey (not in budget.STORE, which may evict it: timed again, the choice could flip).

Both wrap one library call (vitviz.zero_shot, vitviz.model.precision.measure_precision); what is here is only how
long the result is kept and the progress shown while it is made.
"""

from __future__ import annotations

import streamlit as st

import vitviz
from vitviz.model.precision import PrecisionChoice, measure_precision
from vitviz.text.embeddings import estimated_seconds
from vitviz_dashboard.page import ModelKey
from vitviz_dashboard.widgets.progress import remaining


@st.cache_resource(max_entries=8, show_spinner=False)
def zero_shot_model(
    _model: vitviz.ViT, spec: str, prompts: tuple[str, ...], templates: tuple[str, ...] | None, _bar=None
) -> vitviz.ViT:
    """``vitviz.zero_shot(model, prompts, templates)``, once per (image tower's spec, prompts, templates): a model
    like get_model's, shared, not counted against the budget (its image tower is the loaded model's own weights).
    Not keyed by the whole ModelKey: the precision does not change the head, and knock-outs come after. The text
    embeddings come from the disk cache when they are there, else are computed with a progress bar (``_bar``, a
    tqdm class drawing on the page); a long set's bar states its estimated time before the first prompt is
    embedded."""
    bar = None
    texts = None if templates is None else list(templates)
    seconds = None if _bar is None else estimated_seconds(_model.text_tower, list(prompts), texts)
    if seconds is not None:
        total = len(prompts) * (len(templates) if templates else 1)
        bar = _bar(total=total, desc=f"Embedding prompts (estimated {remaining(seconds)})", unit="prompt")

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if _bar is None:
            return
        if bar is None:
            bar = _bar(total=total, desc="Embedding prompts", unit="prompt")
        bar.update(done - bar.n)

    try:
        return vitviz.zero_shot(_model, list(prompts), texts, progress=progress)
    finally:
        if bar is not None:
            bar.close()


@st.cache_resource(max_entries=8, show_spinner="Timing fp32 against bf16 on this CPU...")
def measured_precision(key: ModelKey, _model: vitviz.ViT) -> PrecisionChoice:
    """What precision "auto" means for the model ``key`` names (its spec; the key's precision is "auto", the choice
    not yet made): timed once, a few seconds at most. A resource, like the model, not a result in the byte budget:
    evicted and timed again, a noisy timing could flip the choice, and with it every result's key."""
    return measure_precision(_model)
