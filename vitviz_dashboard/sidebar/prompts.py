"""Prompts in the sidebar: for a model with a text tower (CLIP, SigLIP), the classes are prompts the user types, or a
ready set (ImageNet, CIFAR-10, CIFAR-100) with one template or OpenAI's 80. ``prompt_model`` returns the zero-shot
model every tab then explains (vitviz.zero_shot: the same image tower, a head that scores the prompts) with its key
(the prompts and templates in it), or the model as it is when it has no text tower or the prompts cannot be used
(the message says why)."""

from __future__ import annotations

import dataclasses
import re

import streamlit as st

import vitviz
from vitviz.text import PROMPT_SETS, PromptError, check_prompts, parse_prompts, prompt_set, template_set
from vitviz.text.zero_shot import NO_TEXT_TOWER
from vitviz_dashboard.cache.models import zero_shot_model
from vitviz_dashboard.page import ModelKey
from vitviz_dashboard.state import DEFAULT_PROMPTS, MAX_PROMPTS, MY_PROMPTS, PROMPT_ENSEMBLE, PROMPT_SOURCE, PROMPTS
from vitviz_dashboard.widgets.progress import progress_class

SOURCES = [MY_PROMPTS, *PROMPT_SETS]
ENSEMBLE_HELP = (
    "Each class's text embedding becomes the mean of its 80 templates' embeddings (CLIP's ImageNet "
    "recipe): usually a few points more accurate, and 80x the prompts to embed, once: 80,000 for "
    "ImageNet. On a 2-core CPU a B-sized text tower takes 45-70 ms per prompt, so about an hour for "
    "ImageNet (under a minute with one template). The embeddings are kept on disk, a bar shows the time "
    "left, and an interrupted run resumes where it stopped."
)


def prompt_model(model: vitviz.ViT, key: ModelKey) -> tuple[vitviz.ViT, ModelKey, str]:
    """The sidebar's prompt section for ``model``, and the model the page then uses, its key and why the typed prompts
    cannot be used ("" when they can). A zero-shot model's key holds its prompts and templates, so every cache keeps
    its results apart."""
    tower = model.text_tower
    if tower is None:
        if looks_like_clip(model, key.spec):
            note = model.text_tower_note
            st.sidebar.caption(
                f"No text tower{': ' + note if note else ''}. For prompts as classes, "
                f"{NO_TEXT_TOWER.split('. ', 1)[1]}."
            )
        return model, key, ""
    st.sidebar.header("Prompts")
    source = st.sidebar.selectbox(
        "Classes",
        SOURCES,
        key=str(PROMPT_SOURCE),
        format_func=lambda s: s if s == MY_PROMPTS else PROMPT_SETS[s].description,
        help="Any prompt becomes a class: the text tower embeds it, and the image's "
        "similarity to each embedding is its score.",
    )
    if source == MY_PROMPTS:
        PROMPTS.setdefault(DEFAULT_PROMPTS)
        text = st.sidebar.text_area("One prompt per line", key=str(PROMPTS), height=120)
        try:
            prompts = check_prompts(parse_prompts(text), MAX_PROMPTS)
        except PromptError as error:
            st.sidebar.error(f"{error}. Until then the model is shown as a backbone, without predictions.")
            return model, key, str(error)
        templates = None
    else:
        prompts = list(prompt_set(source))
        ensemble = st.sidebar.toggle("OpenAI's 80 templates", key=str(PROMPT_ENSEMBLE), help=ENSEMBLE_HELP)
        templates = list(template_set("openai-80" if ensemble else "photo"))
        st.sidebar.caption(
            f"{len(prompts):,} classes x {len(templates)} template{'s' if len(templates) > 1 else ''} "
            f"= {len(prompts) * len(templates):,} prompts, "
            f"e.g. '{example_prompt(templates[0], prompts)}'."
        )
    truncation_notes(tower, prompts if templates is None else [])
    kind = (
        "a softmax over the prompts (CLIP)"
        if tower.probabilities == "softmax"
        else "a sigmoid per prompt, each scored on its own (SigLIP)"
    )
    st.sidebar.caption(f"Probabilities: {kind}.")
    key = dataclasses.replace(key, prompts=tuple(prompts), templates=None if templates is None else tuple(templates))
    slot = st.sidebar.empty()
    try:
        zero_shot = zero_shot_model(model, key.spec, key.prompts, key.templates, _bar=progress_class(slot))
    finally:
        slot.empty()
    return zero_shot, key, ""


def truncation_notes(tower, prompts: list[str]) -> None:
    """A note for each typed prompt longer than the text tower reads: it is cut at the context length."""
    for line, prompt in enumerate(prompts, start=1):
        count = tower.token_count(prompt)
        if count is not None and count > tower.context_length:
            st.sidebar.warning(
                f"Prompt {line} is {count} tokens, longer than the text tower's {tower.context_length}: "
                "only its first tokens are read."
            )


def looks_like_clip(model: vitviz.ViT, spec: str) -> bool:
    """An image-text tower loaded without its text half: say how to get it."""
    return model.text_tower_note is not None or any(w in spec.lower() for w in ("clip", "siglip"))


def example_prompt(template: str, classes: list[str]) -> str:
    """One class put through the template, for the sidebar's example. The template is used word for word, as CLIP's
    authors wrote it (zero-shot scores depend on the exact text), so "a photo of a {}." reads "a photo of a
    airplane." for a class that starts with a vowel: the example is the first class that reads correctly."""
    article = re.search(r"\ba \{\}", template) is not None
    reads_well = [name for name in classes if not article or name[:1].lower() not in "aeiou"]
    return template.format((reads_well or classes)[0])
