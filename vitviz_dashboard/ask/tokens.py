"""The answer shown as clickable tokens (st.pills): the chosen token, or the whole answer (the mean over its tokens)."""

from __future__ import annotations

import re

import streamlit as st

from vitviz.render.answers import token_text
from vitviz.vlm import Answer

ALL = -1  # the pill for the whole answer: the mean over its tokens
TOKEN = "ask|token"  # the picker's session-state key


def token_labels(answer: Answer) -> dict[int, str]:
    """What each pill shows, by token index (ALL: "all tokens"): the token as the tokenizer writes it back. A token
    repeated in the answer gets one zero-width space per earlier occurrence: Streamlit tells pills apart by their
    labels, so two pills labelled alike would both select the last of them."""
    labels, seen = {ALL: "all tokens"}, {}
    for index in range(len(answer.token_ids)):
        text = visible_text(answer, index)
        labels[index] = text + "\u200b" * seen.get(text, 0)
        seen[text] = seen.get(text, 0) + 1
    return labels


def visible_text(answer: Answer, index: int) -> str:
    """The token as the tokenizer writes it back, stripped, or where that leaves nothing its whitespace made visible
    (readable_text: a line break as ↵, a space as ·); the token's string where decoding gives nothing at all (a
    special token, an id with no string: "<id 151665>"); its markdown escaped."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$])", r"\\\1", token_text(answer, index))


def pick_token(answer: Answer) -> int | None:
    """The answer's tokens as pills, the first chosen at first; returns the chosen token's index, or None for the
    whole answer."""
    options = [ALL, *range(len(answer.token_ids))]
    if st.session_state.get(TOKEN) not in options:  # a new answer with fewer tokens, or nothing chosen yet
        st.session_state[TOKEN] = 0
    labels = token_labels(answer)
    chosen = st.pills(
        "Answer",
        options,
        format_func=labels.__getitem__,
        key=TOKEN,
        help="Click a token to see where it looks; 'all tokens' shows the mean over the answer.",
    )
    return None if chosen in (None, ALL) else int(chosen)
