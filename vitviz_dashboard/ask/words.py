"""Where the chosen token looks in the text: its attention on the prompt's words (the chat template's tokens and the
question) and on the answer's earlier tokens, as a text heatmap beside its map; the image stands in the text as one
block holding the token's share on all the image tokens. One recorded pass (vitviz.vlm.attention_rows), on demand."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz.render.answers import highlighted_tokens, token_name
from vitviz.vlm import Answer
from vitviz_dashboard.ask.maps import MapChoice
from vitviz_dashboard.cache.vlm import AnswerKey, words_attention


def chosen_layers(weights: np.ndarray, choice: MapChoice) -> np.ndarray:
    """(R, L, H, C) weights -> (R, C): the mean over the choice's layers and heads (its head alone where one is
    chosen); for a relevance map, over every layer and head."""
    if choice.kind == "relevance":
        return weights.mean(axis=(1, 2))
    first, last = choice.layers
    chosen = weights[:, first : last + 1]
    chosen = chosen if choice.head is None else chosen[:, :, choice.head : choice.head + 1]
    return chosen.mean(axis=(1, 2))


def layers_words(choice: MapChoice) -> str:
    """The layers and heads ``chosen_layers`` averages, in words."""
    if choice.kind == "relevance":
        return "every layer, the heads' mean"
    head = "the heads' mean" if choice.head is None else f"head {choice.head}"
    return f"layers {choice.layers[0]} to {choice.layers[1]}, {head}"


def image_share(answer: Answer, token: int | None, choice: MapChoice) -> float:
    """The token's (None: the answer's mean) share of attention on all the image tokens, over the choice's layers
    and heads."""
    shares = answer.image_share[:, :, :, None]  # (n, L, H, 1)
    shares = chosen_layers(shares, choice)[:, 0]
    return float(shares.mean() if token is None else shares[token])


def text_weights(
    key: AnswerKey, answer: Answer, token: int | None, choice: MapChoice
) -> tuple[list[str], np.ndarray, int]:
    """The words the chosen token's row sees (None: the last answer row's) with the image as one block, the token's
    (None: the answer's mean) attention on each, float (C + 1,), and where the image block stands."""
    found = words_attention(key, _answer=answer)
    weights = chosen_layers(found.weights, choice)  # (n, C)
    row = weights.mean(axis=0) if token is None else weights[token]
    seen = found.positions <= (answer.rows[-1] if token is None else answer.rows[token])
    words, row, positions = [w for w, s in zip(found.words, seen, strict=True) if s], row[seen], found.positions[seen]
    at = int(np.searchsorted(positions, answer.image_positions.min())) if len(answer.image_positions) else 0
    count = len(answer.image_positions)
    words = [*words[:at], f"[image: {count} tokens]", *words[at:]]
    return words, np.insert(row, at, image_share(answer, token, choice)), at


def draw_words(key: AnswerKey, answer: Answer, token: int | None, choice: MapChoice) -> None:
    """The text heatmap of the chosen token's attention on the words before it."""
    st.subheader("Attention on the text")
    words, weights, image = text_weights(key, answer, token, choice)
    text = np.delete(weights, image)
    high = float(text.max()) if text.size else 0.0
    st.markdown(highlighted_tokens(words, weights, high), unsafe_allow_html=True)
    who = "the answer's tokens (their mean)" if token is None else token_name(answer, token)
    st.caption(
        f"Attention of {who} on the prompt's words and the answer's earlier tokens ({layers_words(choice)}), "
        f"darkest at {high:.3g}; the image block holds the share on all the image tokens ({weights[image]:.3g}). "
        "Hover a word for its weight."
    )
