"""The Ask page through Streamlit's AppTest, on a tiny LLaVA folder: the answer as clickable tokens, the chosen
token's map, the image-share chart and the logit lens equal what vitviz.vlm computes; bad input gets one line."""

import io

import numpy as np
import pytest
from app_harness import APP, figures, values
from PIL import Image
from streamlit.testing.v1 import AppTest
from tiny_vlms import tiny_vlm_folder

from vitviz.render.answers import token_name
from vitviz.vlm import image_relevance, load_vlm, token_attention
from vitviz.vlm.knockout import answer_logprob
from vitviz.vlm.lens import logit_lens
from vitviz_dashboard.ask.inputs import (
    GIVEN,
    LIMIT,
    MAX_NEW_TOKENS,
    MAX_QUESTION,
    MODEL,
    OUTSIDE,
    QUESTION,
    Question,
    question_problem,
)
from vitviz_dashboard.ask.tokens import TOKEN
from vitviz_dashboard.cache import budget

# fresh caches, no local sample images (tests/conftest.py); default_model: the Photo page's tiny ViT
pytestmark = pytest.mark.usefixtures("fresh_caches", "default_model")
QUESTION_TEXT = "What is in the picture?"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


def photo() -> Image.Image:
    """300 x 200: shown as it is (neither enlarged nor shrunk for the page)."""
    return Image.fromarray(np.random.default_rng(1).integers(0, 256, (200, 300, 3), dtype=np.uint8))


def checked(at: AppTest) -> AppTest:
    assert not at.exception, at.exception
    return at


def ask_app(folder, monkeypatch, model=None, question=QUESTION_TEXT, given="", limit=4) -> AppTest:
    """The app on its Ask page (chosen by the script hash st.navigation registered for it) with the model, a photo
    and the question entered, before Ask is pressed."""
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(folder.parent))
    at = AppTest.from_file(APP, default_timeout=180)
    checked(at.run())
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "ask")
    checked(at.run())
    at.sidebar.text_input(key=MODEL).set_value(str(model or folder))
    buffer = io.BytesIO()
    photo().save(buffer, format="PNG")
    at.file_uploader[0].set_value(("photo.png", buffer.getvalue(), "image/png"))
    checked(at.run())
    at.session_state[QUESTION], at.session_state[GIVEN], at.session_state[LIMIT] = question, given, limit
    return at


def press_ask(at: AppTest) -> AppTest:
    next(button for button in at.button if button.label == "Ask").click()
    return checked(at.run())


def share_curve(at: AppTest) -> np.ndarray:
    figure = next(f for f in figures(at) if f["layout"]["yaxis"]["title"]["text"] == "share of the attention")
    return values(next(t for t in figure["data"] if t["name"] == "image tokens")["y"])


def captions(at: AppTest) -> list[str]:
    return [img.proto.imgs[0].caption for img in at.get("image")]


def kept(name: str) -> list:
    return [value for key, (value, _) in budget.STORE._entries.items() if key[0] == name]


def test_the_page_answers_and_shows_where_each_token_looks(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch))
    assert not at.error
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, max_new_tokens=4)
    assert expected.token_ids  # the tiny model answers something
    assert at.text[0].value == f"Q: {QUESTION_TEXT}\nA: {expected.text}"  # plain text, never Markdown
    assert f"as {expected.image_attention.shape[-1]} image tokens in 1 tile;" in at.caption[0].value
    pills = at.get("button_group")[0]
    assert pills.options[0] == "all tokens" and len(pills.options) == len(expected.token_ids) + 1
    # the first token at first: its map and its image share per layer (the heads' mean)
    assert captions(at)[0] == f"Attention of {token_name(expected, 0)} on the image, layers 0 to 1, the heads' mean"
    np.testing.assert_allclose(share_curve(at), expected.image_share[0].mean(axis=1), atol=1e-6)
    first_map = at.get("image")[0].proto.imgs[0].url
    # a click on the last token: its map and its chart
    last = len(expected.token_ids) - 1
    at.session_state[TOKEN] = last
    checked(at.run())
    assert captions(at)[0] == f"Attention of {token_name(expected, last)} on the image, layers 0 to 1, the heads' mean"
    assert at.get("image")[0].proto.imgs[0].url != first_map
    np.testing.assert_allclose(share_curve(at), expected.image_share[last].mean(axis=1), atol=1e-6)
    # one layer and one head: the map's caption says so, the chart follows the head
    at.slider(key="ask|layers").set_value((1, 1))
    at.selectbox(key="ask|head").set_value(2)
    checked(at.run())
    assert captions(at)[0] == f"Attention of {token_name(expected, last)} on the image, layers 1 to 1, head 2"
    np.testing.assert_allclose(share_curve(at), expected.image_share[last][:, 2], atol=1e-6)


def test_the_question_is_shown_as_typed_not_rendered(folder, monkeypatch):
    typed = "Is $x^2$ a [link](http://example.com) or :dog:?\nA second line"
    at = press_ask(ask_app(folder, monkeypatch, question=typed))
    assert not at.error
    assert at.text[0].value.startswith(f"Q: {typed}\nA: ")  # every character, the line break too
    assert not any(typed in m.value for m in at.markdown)


def test_a_given_answer_its_lens_and_relevance(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given="a cat a cat"))
    assert not at.error
    # a repeated token's pill differs from the first by an invisible mark: Streamlit tells pills apart by label
    assert at.get("button_group")[0].options == ["all tokens", "a", "cat", "a\u200b", "cat\u200b"]
    assert "the answer given (teacher-forced), 4 tokens" in at.caption[0].value
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer="a cat a cat")
    last = 1  # the first "cat", not the second
    at.session_state[TOKEN] = last
    checked(at.run())
    assert captions(at)[0] == f"Attention of {token_name(expected, last)} on the image, layers 0 to 1, the heads' mean"
    # the logit lens at the last layer: the table counts each image token's top word
    lens = logit_lens(expected, 2, 5)
    counts = {word: int((lens.words[:, 0] == word).sum()) for word in set(lens.words[:, 0])}
    table = at.dataframe[0].value
    for word, count in zip(table["top word"], table["image tokens"], strict=True):
        assert counts[next(w for w in counts if (w.strip() or repr(w)) == word)] == count
    assert [b.proto.label for b in at.get("download_button")] == ["answer.json", "attention.npz", "Map (PNG)"]
    # relevance of the chosen token: Chefer et al.'s, as the library computes it
    at.radio(key="ask|kind").set_value("relevance")
    checked(at.run())
    assert captions(at)[0] == f"Relevance of {token_name(expected, last)} (Chefer et al. 2021b, every layer)"
    np.testing.assert_allclose(kept("token_relevance")[0], image_relevance(expected, last), rtol=1e-5, atol=1e-7)


def test_the_knockout_curves_of_the_map_shown_on_demand(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given="a red cat"))
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer="a red cat")
    assert captions(at)[0] == f"Attention of {token_name(expected, 0)} on the image, layers 0 to 1, the heads' mean"
    measured = [f"log-probability of {token_name(expected, 0)}", "summed log-probability of the answer"]
    assert not [f for f in figures(at) if f["layout"]["yaxis"]["title"]["text"] in measured]
    at.button(key="ask|knockout").click()
    checked(at.run())
    # token 0's curves (and the whole answer's, in its own map's order: tests/test_vlm_workbench.py)
    assert [t for t in (f["layout"]["yaxis"]["title"]["text"] for f in figures(at)) if t in measured] == measured
    [figure] = [f for f in figures(at) if f["layout"]["yaxis"]["title"]["text"] == measured[0]]
    # each curve starts at the intact token's log-probability and ends, 90 % of the image tokens removed in the
    # map's order, where one direct pass with those tokens knocked out ends (each step is such a pass)
    scores = token_attention(expected, 0)
    removed = round(0.9 * len(scores))
    for trace, ranking in zip(figure["data"], (np.argsort(-scores, kind="stable"), np.argsort(scores, kind="stable"))):
        curve = values(trace["y"])
        assert len(curve) == 10 and curve[0] == pytest.approx(float(expected.logprobs[0]), abs=1e-4)
        assert curve[-1] == pytest.approx(answer_logprob(expected, ranking[:removed], token=0), abs=1e-5)
    assert [t["name"].split(" (area ")[0] for t in figure["data"]] == ["most relevant first", "least relevant first"]


def test_bad_input_gets_one_line_and_the_page_goes_on(folder, monkeypatch, tmp_path):
    at = ask_app(folder, monkeypatch, model=tmp_path / "elsewhere")  # outside the allowed folders
    assert [e.value for e in at.sidebar.error] == [OUTSIDE]
    no_processor = folder.parent / "no_processor"
    no_processor.mkdir(exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        (no_processor / name).write_bytes((folder / name).read_bytes())
    at.sidebar.text_input(key=MODEL).set_value(str(no_processor))
    press_ask(checked(at.run()))
    [error] = [e.value for e in at.error]
    assert error.startswith(f"Could not ask `{no_processor}`:") and "has no processor" in error and "\n" not in error
    at.sidebar.text_input(key=MODEL).set_value("not a model id")
    checked(at.run())
    assert "neither a Hugging Face repository id" in at.sidebar.error[0].value
    at.sidebar.text_input(key=MODEL).set_value(str(folder))
    checked(at.run())
    # no limit in the box itself (a browser's maxlength drops a longer paste without a word): a question past
    # MAX_QUESTION reaches the page, and the page says why it is not asked
    assert at.text_area(key=QUESTION).proto.max_chars == 0
    at.text_area(key=QUESTION).set_value("y" * (MAX_QUESTION + 100))
    press_ask(at)
    assert [e.value for e in at.error] == [f"The question has 600 characters; this page takes at most {MAX_QUESTION}."]
    at.text_area(key=QUESTION).set_value("  ")
    press_ask(at)
    assert [e.value for e in at.error] == ["Type a question."]
    long = Question("x" * (MAX_QUESTION + 1), None, 4)  # one that reaches the page past the field
    assert question_problem(long) == f"The question has 501 characters; this page takes at most {MAX_QUESTION}."
    assert question_problem(Question("What?", None, MAX_NEW_TOKENS + 1)).startswith("The answer may have 1 to")
