"""The Ask page: a vision-language model asked about one of the session's photos, and where each token of its answer
looks. The inputs (inputs.py), the answer as clickable tokens (tokens.py), the chosen token's map (maps.py), the
image-share chart (shares.py), the logit lens (lens.py), the knock-out curve on demand (knockout.py) and the
downloads (downloads.py) are drawn from one cached answer (cache/vlm.py); tower.py opens the model's vision tower in
the Photo page."""

from __future__ import annotations

import streamlit as st

from vitviz.preprocessing import ImageError
from vitviz.render.answers import map_picture, map_raster, readable_text
from vitviz.vlm import Answer, VLMError
from vitviz_dashboard.ask.compare import draw_compare
from vitviz_dashboard.ask.downloads import draw_downloads
from vitviz_dashboard.ask.inputs import model_inputs, question_inputs, question_problem
from vitviz_dashboard.ask.knockout import draw_knockout
from vitviz_dashboard.ask.lens import draw_lens
from vitviz_dashboard.ask.maps import display_controls, draw_map, map_caption, map_controls, map_fields
from vitviz_dashboard.ask.overview import apply_click, draw_overview
from vitviz_dashboard.ask.patches import draw_patches
from vitviz_dashboard.ask.shares import draw_shares
from vitviz_dashboard.ask.tokens import pick_token
from vitviz_dashboard.ask.tower import offer_tower
from vitviz_dashboard.ask.words import draw_words
from vitviz_dashboard.cache.pictures import display_photo
from vitviz_dashboard.cache.vlm import AnswerKey, ask, get_vlm
from vitviz_dashboard.images import choose_image
from vitviz_dashboard.state import keep_widgets

ASKED = "ask|asked"  # the AnswerKey of the question last asked in this session


def ask_page(photo_page: st.Page) -> None:
    """The page; ``photo_page`` is where "Open the vision tower in Photo" goes."""
    st.title("vitviz: where does a vision-language model's answer look?")
    keep_widgets()  # the other pages' kept values survive a visit here
    model_key = model_inputs()
    colormap, alpha = display_controls()
    chosen = choose_image()
    if chosen is None or model_key is None:
        return
    name, images = chosen
    file = images[name]
    question, pressed = question_inputs()
    try:
        photo = display_photo(file)
    except ImageError as error:
        st.error(f"Could not read {name}: {error}")
        return
    if pressed:
        problem = question_problem(question)
        if problem:
            st.error(problem)
            return
        st.session_state[ASKED] = AnswerKey(
            model_key, file.key, question.text, question.answer, question.max_new_tokens
        )
    key = st.session_state.get(ASKED)
    if key is None or key.model != model_key or key.image != file.key:
        st.info("Type a question about the photo and press **Ask**.")
        return
    answer = answered(key, photo)
    if answer is None:
        return
    offer_tower(key.model, name, photo_page)
    describe(answer)
    if not answer.token_ids:
        st.warning(
            "The model ended its answer at once (its first token was an end-of-sequence token, or its own image "
            "placeholder)."
        )
        return
    token = pick_token(answer)
    apply_click(answer)  # a click on the layer x head overview sets the map's controls, before they are drawn
    choice = map_controls(answer, token)
    left, right = st.columns([3, 2])
    with left:
        shown = draw_map(key, answer, photo, token, choice, colormap, alpha)
    with right:
        draw_shares(answer, token, choice.head)
        draw_words(key, answer, token, choice)
    draw_overview(answer, token, choice)
    draw_compare(key, answer, photo, choice, colormap, alpha)
    draw_lens(key, answer, photo, token, colormap, alpha)
    draw_patches(key, answer, photo, token, choice)
    draw_knockout(key, answer, token, choice)
    caption = map_caption(answer, token, choice)
    if shown is None:
        draw_downloads(answer, key.model.spec, name, None, None)
        return
    about = map_fields(answer, token, choice, caption)

    def picture():
        return map_picture(photo, map_raster(answer, shown, choice.tile), colormap, alpha, caption)

    draw_downloads(answer, key.model.spec, name, (shown, about), picture)


def answered(key: AnswerKey, photo) -> Answer | None:
    """The answer for ``key``: the model loaded and the answer generated with progress shown while they run, or
    taken from the cache; None when either fails (said in one line)."""
    slot = st.empty()
    try:
        with slot.status("Loading the model...", expanded=False) as status:
            model = get_vlm(key.model)
            status.update(label="Generating the answer and recording where its tokens look...")
            answer = ask(key, _model=model, _photo=photo)
    except VLMError as error:
        slot.empty()
        st.error(f"Could not ask `{key.model.spec}`: {error}")
        return None
    except RuntimeError as error:  # torch's own (out of memory ...): one line, the server goes on
        slot.empty()
        st.error(f"The model failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
        return None
    slot.empty()
    return answer


def describe(answer: Answer) -> None:
    """The question and the answer, and what the model read of the photo."""
    _, layers, heads, count = answer.image_attention.shape
    how = "its answer" if answer.generated else "the answer given (teacher-forced)"
    text = readable_text(answer.text)
    if not text and answer.token_ids:  # tokens that decode to nothing: ids with no string, special tokens
        text = "(no text: " + " ".join(answer.tokens) + ")"
    # plain text, never Markdown: a question's $x^2$, [link](...), :dog: and line breaks are shown as typed
    st.text(f"Q: {answer.question}\nA: {text or '(no token)'}")
    st.caption(
        f"The processor read the {answer.photo_size[0]}x{answer.photo_size[1]} photo as {count:,} image tokens in "
        f"{len(answer.tiles)} tile{'s' if len(answer.tiles) > 1 else ''}; the language model has {layers} layers x "
        f"{heads} heads. Shown: {how}, {len(answer.token_ids)} tokens."
    )
