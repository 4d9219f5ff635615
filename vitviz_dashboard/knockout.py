"""Knocking heads and tokens out of the model the whole page shows.

What the user removed lives in session state per model (heads chosen in Heads & layers, prefix tokens in Tokens).
Before any tab is drawn, ``knocked_out_model`` turns it into ``model.knock_out(...)``, which shares every weight,
under a spec of its own so every cache keeps its results apart, and puts a banner above the tabs with one click to
restore the model. Every tab then shows the intervened model: the prediction line, the predictions and the maps.
"""

from __future__ import annotations

import dataclasses

import streamlit as st

import vitviz

from vitviz_dashboard.common import KEPT, KNOCKOUT, Settings, prefix_token_names


def heads_key(base_spec: str) -> str:
    """The session-state key of the heads knocked out of this model: labels "L3 H2"."""
    return f"{KEPT}{base_spec}|knocked_heads"


def tokens_key(base_spec: str) -> str:
    """The session-state key of the prefix tokens taken out of this model's attention: names "[CLS]", "register 1"."""
    return f"{KEPT}{base_spec}|knocked_tokens"


def head_label(layer: int, head: int) -> str:
    return f"L{layer} H{head}"


def head_labels(model: vitviz.ViT) -> list[str]:
    return [head_label(layer, head) for layer in range(model.config.num_layers) for head in range(model.config.num_heads)]


def parse_head(label: str) -> tuple[int, int]:
    layer, head = label.split()
    return int(layer[1:]), int(head[1:])


def removed(model: vitviz.ViT, base_spec: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The (layer, head) pairs and prefix token indices removed from this model, those that fit it."""
    labels = set(head_labels(model))
    heads = [parse_head(label) for label in st.session_state.get(heads_key(base_spec), []) if label in labels]
    names = prefix_token_names(model.config)
    tokens = [names.index(name) for name in st.session_state.get(tokens_key(base_spec), []) if name in names]
    return sorted(heads), sorted(tokens)


def restore(base_spec: str) -> None:
    st.session_state[heads_key(base_spec)] = []
    st.session_state[tokens_key(base_spec)] = []


def knocked_out_model(model: vitviz.ViT, settings: Settings) -> tuple[vitviz.ViT, Settings]:
    """The model the page shows: with the heads and tokens the user removed, a banner saying so and a restore
    button; or the model itself."""
    base_spec = settings.model_spec
    heads, tokens = removed(model, base_spec)
    if not heads and not tokens:
        return model, settings
    names = prefix_token_names(model.config)
    parts = []
    if heads:
        parts.append(f"Heads removed: {', '.join(head_label(*h) for h in heads)}")
    if tokens:
        parts.append(f"{'t' if heads else 'T'}aken out of the attention: {', '.join(names[t] for t in tokens)}")
    text, button = st.columns([3, 1], vertical_alignment="center")
    text.warning(f"**Intervened model.** {'; '.join(parts)}. The predictions and every map below are this model's.",
                 icon=":material/content_cut:")  # fmt: skip
    button.button("Restore the model", on_click=restore, args=(base_spec,), key="restore_model",
                  help="Put every head and token back")  # fmt: skip
    suffix = ",".join(head_label(*h).replace(" ", "") for h in heads) + ";" + ",".join(map(str, tokens))
    return model.knock_out(heads, tokens), dataclasses.replace(settings, model_spec=f"{base_spec}{KNOCKOUT}{suffix}")
