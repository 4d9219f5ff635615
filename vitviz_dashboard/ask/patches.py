"""Patches chosen on the photo (a click on one's marker, a box or a lasso around several): which tokens of the prompt
and of the answer look at them (LVLM-Interpret's patch-to-token view; one recorded pass, vitviz.vlm.attention_rows),
and the answer with them knocked out (the chosen token's and the whole answer's log-probability before and after;
vitviz.vlm.knockout.token_logprobs)."""

from __future__ import annotations

import streamlit as st
from PIL import Image

from vitviz.render.answers import highlighted_tokens, patch_figure, readable_text, token_name, token_text
from vitviz.vlm import Answer
from vitviz_dashboard.ask.maps import MapChoice
from vitviz_dashboard.ask.overview import chart_points
from vitviz_dashboard.ask.words import chosen_layers, layers_words
from vitviz_dashboard.cache.vlm import AnswerKey, knocked_out, patches_attention

CHART = "ask|patch_chart"
CHOSEN = "ask|patches"  # (answer key, the image tokens chosen): kept until another selection or Clear
CHARTED = "ask|patches_charted"  # the chart's selection last read
CLEAR = "ask|patches_clear"
KNOCK = "ask|patch_knockout"  # the button
KNOCKED = "ask|patches_knocked"  # the (answer key, patches) knocked out in this session
TOP = 5  # tokens named in the caption


def chosen_patches(key: AnswerKey, answer: Answer) -> list[int]:
    """The image tokens chosen for this answer, sorted: a new selection on the chart (its markers' customdata)
    replaces them; an empty one (the chart redrawn) keeps them."""
    count = len(answer.image_positions)
    found = {int(p["customdata"][0]) for p in chart_points(st.session_state.get(CHART)) if p.get("customdata")}
    selected = sorted(i for i in found if 0 <= i < count)
    if selected and selected != st.session_state.get(CHARTED):
        st.session_state[CHOSEN] = (key, selected)
    st.session_state[CHARTED] = selected
    kept_key, chosen = st.session_state.get(CHOSEN, (None, []))
    return chosen if kept_key == key else []


def looking_tokens(key: AnswerKey, answer: Answer, patches: list[int], choice: MapChoice):
    """(prompt words, their weights, answer words, their weights): each token's attention summed over ``patches``
    at the choice's layers and head (a prompt token at its own row, an answer token at the row that predicts it)."""
    found = patches_attention(key, tuple(patches), _answer=answer)
    prompt = chosen_layers(found.prompt_weights, choice).sum(axis=1)
    answered = chosen_layers(found.answer_weights, choice).sum(axis=1)
    words = [token_text(answer, i) for i in range(len(answer.token_ids))]
    return found.prompt_words, prompt, words, answered


def draw_patches(key: AnswerKey, answer: Answer, photo: Image.Image, token: int | None, choice: MapChoice) -> None:
    """The photo with its patches' markers, and for the chosen ones: the tokens that look at them, and a button
    that knocks them out."""
    st.subheader("Patches: which tokens look at them")
    patches = chosen_patches(key, answer)
    left, right = st.columns([3, 2])
    with left:
        st.plotly_chart(
            patch_figure(photo, answer, patches),
            on_select="rerun",
            selection_mode=("points", "box", "lasso"),
            key=CHART,
        )
        st.caption("Click a patch's marker; for several, choose the box or lasso tool above the chart and drag.")
        if patches and st.button("Clear the chosen patches", key=CLEAR):
            st.session_state[CHOSEN] = (None, [])
            st.rerun()
    with right:
        if not patches:
            st.info("Choose patches on the photo: the tokens that look at them, and the answer without them.")
            return
        prompt_words, prompt, answer_words, answered = looking_tokens(key, answer, patches, choice)
        high = float(max(prompt.max(initial=0.0), answered.max(initial=0.0)))
        st.markdown("**The question** (each token at its own position)")
        st.markdown(highlighted_tokens(prompt_words, prompt, high), unsafe_allow_html=True)
        st.markdown("**The answer** (each token at the position that predicts it)")
        st.markdown(highlighted_tokens(answer_words, answered, high), unsafe_allow_html=True)
        ranked = sorted(
            [(w, v, "question") for w, v in zip(prompt_words, prompt, strict=True)]
            + [(w, v, "answer") for w, v in zip(answer_words, answered, strict=True)],
            key=lambda item: -item[1],
        )[:TOP]
        named = ", ".join(f"'{readable_text(w.strip() or w)}' ({where}, {v:.3g})" for w, v, where in ranked)
        st.caption(
            f"{len(patches)} patch{'es' if len(patches) > 1 else ''} chosen. Attention on them "
            f"({layers_words(choice)}), summed over the patches, darkest at {high:.3g}. Most: {named}."
        )
    draw_patch_knockout(key, answer, token, patches)


def draw_patch_knockout(key: AnswerKey, answer: Answer, token: int | None, patches: list[int]) -> None:
    """The button, then the chosen token's and the whole answer's log-probability with and without the patches."""
    st.subheader("The answer without them")
    done = st.session_state.setdefault(KNOCKED, set())
    if (key, tuple(patches)) not in done:
        label = f"Knock out the {len(patches)} chosen patch{'es' if len(patches) > 1 else ''} (2 passes of the model)"
        if not st.button(label, key=KNOCK):
            st.caption(
                "Blocks the chosen image tokens from the view of every position after the image, in every layer, "
                "and measures each answer token's log-probability again (teacher-forced)."
            )
            return
        done.add((key, tuple(patches)))
    before = knocked_out(key, (), _answer=answer)
    after = knocked_out(key, tuple(patches), _answer=answer)
    columns = st.columns(2)
    if token is not None:
        columns[0].metric(
            f"log p of {token_name(answer, token)}",
            f"{after[token]:.3f}",
            f"{after[token] - before[token]:+.3f} (was {before[token]:.3f})",
        )
    columns[1].metric(
        "summed log p of the answer",
        f"{after.sum():.3f}",
        f"{after.sum() - before.sum():+.3f} (was {before.sum():.3f})",
    )
    rows = [
        {"token": token_name(answer, i), "log p before": b, "log p after": a, "change": a - b}
        for i, (b, a) in enumerate(zip(before, after, strict=True))
    ]
    st.dataframe(rows, hide_index=True, key="ask|patch_knockout_table")
    st.caption(
        f"With the {len(patches)} chosen image tokens blocked from the view of every position after the image; each "
        "answer token's log-probability given the tokens before it."
    )
