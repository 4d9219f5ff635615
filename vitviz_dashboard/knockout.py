"""Knocking heads and tokens out of the model the whole page shows.

What the user removed lives in session state per image tower (heads chosen in Heads & layers, prefix tokens in
Tokens): a new prompt set changes only the head that scores the prompts, so what was removed stays removed. Before
any tab is drawn, ``knocked_out_model`` turns the model into ``model.knock_out(...)``, which shares every weight,
and puts a banner above the tabs with one click to restore the model. The knock-outs join the model's key
(page.ModelKey), so every cache keeps the intervened model's results apart. Every tab then shows the intervened
model: the prediction line, the predictions and the maps; the tab where the intervention was made shows what it
changed (``what_changes``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import streamlit as st

import vitviz
from vitviz_dashboard.cache.results import intact_analysis
from vitviz_dashboard.names import class_name, classes_by_probability, has_classifier, prefix_token_names
from vitviz_dashboard.page import ModelKey, Page
from vitviz_dashboard.state import knocked_heads, knocked_tokens


def head_label(layer: int, head: int) -> str:
    return f"L{layer} H{head}"


def head_labels(model: vitviz.ViT) -> list[str]:
    return [
        head_label(layer, head) for layer in range(model.config.num_layers) for head in range(model.config.num_heads)
    ]


def parse_head(label: str) -> tuple[int, int]:
    layer, head = label.split()
    return int(layer[1:]), int(head[1:])


def removed(model: vitviz.ViT, spec: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The (layer, head) pairs and prefix token indices removed from this model (its image tower's ``spec``), those
    that fit it."""
    labels = set(head_labels(model))
    heads = [parse_head(label) for label in knocked_heads(spec).get() or [] if label in labels]
    names = prefix_token_names(model.config)
    tokens = [names.index(name) for name in knocked_tokens(spec).get() or [] if name in names]
    return sorted(heads), sorted(tokens)


def restore(spec: str) -> None:
    knocked_heads(spec).set([])
    knocked_tokens(spec).set([])


def knocked_out_model(model: vitviz.ViT, key: ModelKey, slot) -> tuple[vitviz.ViT, ModelKey]:
    """The model the page shows and its key: with the heads and tokens the user removed, a banner saying so and a
    restore button, drawn in ``slot`` (an st.empty() the page draws in every run); or the model itself."""
    heads, tokens = removed(model, key.spec)
    if not heads and not tokens:
        return model, key
    names = prefix_token_names(model.config)
    parts = []
    if heads:
        parts.append(f"Heads removed: {', '.join(head_label(*h) for h in heads)}")
    if tokens:
        parts.append(f"{'t' if heads else 'T'}aken out of the attention: {', '.join(names[t] for t in tokens)}")
    text, button = slot.container().columns([3, 1], vertical_alignment="center")
    text.warning(
        f"**Intervened model.** {'; '.join(parts)}. The predictions and every map below are this model's.",
        icon=":material/content_cut:",
    )
    button.button(
        "Restore the model",
        on_click=restore,
        args=(key.spec,),
        key="restore_model",
        help="Put every head and token back",
    )
    knocked_key = dataclasses.replace(key, knocked_heads=tuple(heads), knocked_tokens=tuple(tokens))
    return model.knock_out(heads, tokens), knocked_key


def compared_classes(before: np.ndarray, after: np.ndarray, k: int = 5) -> list[int]:
    """The classes the before/after table lists: the intact model's top k, then those of the intervened model's top
    k that are not among them (a class the edit raised from further down), each list most probable first."""
    first = classes_by_probability(before)[:k]
    return first + [c for c in classes_by_probability(after)[:k] if c not in first]


def what_changes(page: Page) -> None:
    """With heads or tokens removed, or an SAE edit: both models' top classes (the union of the two top 5s), their
    probabilities before and after, and the change in percentage points, with enough digits to see a small one
    (92.030 % → 92.005 %, −0.025 pp)."""
    if page.intact_model is None or not has_classifier(page.model):
        return
    intact = intact_analysis(page)
    before, after = intact.probabilities, page.analysis.probabilities
    top = compared_classes(before, after)
    changes = [100 * (float(after[k]) - float(before[k])) for k in top]
    decimals = change_decimals(max(abs(change) for change in changes))
    rows = [
        f"| {class_name(page.model, k)} | {percent(before[k], decimals)} | {percent(after[k], decimals)} | "
        f"{signed(change)} pp |"
        for k, change in zip(top, changes)
    ]
    now = classes_by_probability(after)[0]
    moved = "" if now == top[0] else f" The top prediction is now '{class_name(page.model, now)}'."
    header = "| class | intact | intervened | change |\n| --- | ---: | ---: | ---: |\n"
    st.markdown(
        f"**What the intervention changes**: the top classes of either model, before and after.{moved}\n\n"
        + header
        + "\n".join(rows)
    )
    st.caption(
        f"Probabilities to {decimals} decimal{'s' if decimals > 1 else ''}, enough to see the largest change; "
        "the change is intervened minus intact, in percentage points (pp)."
    )


def change_decimals(largest_pp: float) -> int:
    """Decimals of a percentage that show a change of ``largest_pp`` points with about two digits: 5 pp -> 1,
    0.5 -> 2, 0.025 -> 3; at most 6 (a change below that reads as 0)."""
    if not largest_pp > 0:
        return 1
    return int(np.clip(math.ceil(-math.log10(largest_pp)) + 1, 1, 6))


def percent(probability: float, decimals: int) -> str:
    return f"{100 * float(probability):.{decimals}f} %"


def signed(value: float) -> str:
    """+0.5, −0.025 (a true minus sign), 0 for no change."""
    text = f"{value:+.2g}"
    return "0" if value == 0 else "−" + text[1:] if text.startswith("-") else text
