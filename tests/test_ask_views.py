"""The Ask page's views against LVLM-Interpret's (issue 44), through Streamlit's AppTest on tiny VLM folders, each
compared with what vitviz.vlm computes: the logit lens before or after Qwen3-VL's deepstack features; a token's
attention on the question's words; the layer x head overview, whose click sets the map; the whole answer's relevance;
patches chosen on the photo (which tokens look at them, and the answer with them knocked out); two tokens on one
colour scale. The library's attention rows are checked against eager attention."""

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from app_harness import figures, values
from test_app_ask import QUESTION_TEXT, ask_app, captions, checked, kept, photo, press_ask
from tiny_vlms import tiny_vlm_folder
from vlm_harness import eager_model, red_cat

from vitviz.render.answers import token_name
from vitviz.vlm import VLMError, image_relevance, load_vlm, relevance_row, token_attention
from vitviz.vlm.attention_rows import patch_attention, word_attention
from vitviz.vlm.knockout import token_logprobs
from vitviz.vlm.lens import logit_lens
from vitviz_dashboard.ask import compare, lens, overview, patches
from vitviz_dashboard.ask.tokens import ALL, TOKEN

pytestmark = pytest.mark.usefixtures("fresh_caches", "default_model")
GIVEN = "a red cat"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


def weights_of(html: str) -> list[float]:
    return [float(v) for v in re.findall(r'data-weight="([^"]+)"', html)]


def heatmaps(at) -> list[str]:
    """The text heatmaps on the page (markdown holding the tokens' spans), in order."""
    return [m.value for m in at.markdown if "vitviz-token" in m.value]


# --- the library: attention rows against eager attention --------------------------------------------------------


@pytest.mark.parametrize("family", ["llava", "qwen2_vl", "idefics3"])
def test_attention_rows_equal_eager_attention(family, tmp_path_factory):
    folder = tiny_vlm_folder(family, tmp_path_factory)
    answer = red_cat(load_vlm(folder))
    with torch.no_grad():
        output = eager_model(folder)(**answer.inputs, output_attentions=True)
    full = np.stack([a[0].numpy() for a in output.attentions])  # (L, H, T, T)
    words = word_attention(answer)
    expected = full[:, :, answer.rows][:, :, :, words.positions].transpose(2, 0, 1, 3)
    np.testing.assert_allclose(words.weights, expected, atol=2e-5)
    assert not np.isin(words.positions, answer.image_positions).any()
    chosen = [0, len(answer.image_positions) - 1]
    found = patch_attention(answer, chosen)
    columns = answer.image_positions[chosen]
    expected = full[:, :, found.prompt][:, :, :, columns].transpose(2, 0, 1, 3)
    np.testing.assert_allclose(found.prompt_weights, expected, atol=2e-5)
    # the answer's rows on the patches are what the answer recorded
    np.testing.assert_allclose(found.answer_weights, answer.image_attention[..., chosen], atol=1e-6)
    assert found.prompt.max() < answer.answer_start and len(found.prompt_words) == len(found.prompt)
    with pytest.raises(VLMError, match="patches must be one or more image tokens"):
        patch_attention(answer, [len(answer.image_positions)])


def test_attention_rows_from_several_threads_on_one_model_equal_each_alone(folder):
    """Sessions share the model: the pass records in its own thread only (recording.py's context variable)."""
    vlm = load_vlm(folder)
    answer = red_cat(vlm)
    calls = {
        "words": lambda: word_attention(answer).weights,
        "patches": lambda: patch_attention(answer, [1, 2]).prompt_weights,
        "answer": lambda: vlm.answer(photo(), QUESTION_TEXT, max_new_tokens=3).image_attention,
    }
    alone = {name: call() for name, call in calls.items()}
    barrier = threading.Barrier(len(calls) * 2)

    def run(name):
        barrier.wait()
        return name, calls[name]()

    with ThreadPoolExecutor(len(calls) * 2) as pool:
        together = list(pool.map(run, [*calls, *calls]))
    for name, got in together:
        np.testing.assert_allclose(got, alone[name], atol=1e-6, err_msg=name)


def test_the_whole_answers_relevance_is_the_mean_of_its_tokens(folder):
    answer = red_cat(load_vlm(folder))
    per_token = [image_relevance(answer, t) for t in range(len(answer.token_ids))]
    np.testing.assert_allclose(image_relevance(answer, None), np.mean(per_token, axis=0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(relevance_row(answer, None)[answer.image_positions], np.mean(per_token, axis=0))


# --- the page -------------------------------------------------------------------------------------------------------


def test_the_lens_offers_before_or_after_the_deepstack_features_for_qwen3_vl(tmp_path_factory, monkeypatch):
    qwen3 = tiny_vlm_folder("qwen3_vl", tmp_path_factory)
    at = press_ask(ask_app(qwen3, monkeypatch, given=GIVEN))
    expected = load_vlm(qwen3).answer(photo(), QUESTION_TEXT, answer=GIVEN)
    radio = at.radio(key=lens.DEEPSTACK)
    assert radio.value == "before"
    at.session_state[TOKEN] = ALL  # each image token's own top word
    at.slider(key=lens.LAYER).set_value(1)  # after layer 0: a layer where deepstack features are added
    checked(at.run())
    assert any(c.endswith("at layer 1, read before the deepstack features are added") for c in captions(at))
    table = at.dataframe[0].value
    words = logit_lens(expected, 1, lens.TOP_K, "before").words[:, 0]
    assert dict(zip(table["top word"], table["image tokens"], strict=True)) == {
        w.strip() or repr(w): int(sum(v == w for v in words)) for w in set(words)
    }
    at.radio(key=lens.DEEPSTACK).set_value("after")
    checked(at.run())
    assert any(c.endswith("at layer 1, read after the deepstack features are added") for c in captions(at))
    words = logit_lens(expected, 1, lens.TOP_K, "after").words[:, 0]
    table = at.dataframe[0].value
    assert dict(zip(table["top word"], table["image tokens"], strict=True)) == {
        w.strip() or repr(w): int(sum(v == w for v in words)) for w in set(words)
    }


def test_llava_has_no_deepstack_choice(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given=GIVEN))
    assert lens.DEEPSTACK not in [r.key for r in at.radio]
    assert not any("deepstack" in c for c in captions(at))


def test_a_tokens_attention_on_the_words_and_the_layer_head_overview(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given=GIVEN))
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer=GIVEN)
    at.session_state[TOKEN] = 1
    checked(at.run())
    # the words: token 1's row, every layer and the heads' mean; the image as one block holding its image share
    words = word_attention(expected)
    seen = words.positions <= expected.rows[1]
    row = words.weights[1].mean(axis=(0, 1))[seen]
    at_image = int(np.searchsorted(words.positions[seen], expected.image_positions.min()))
    share = expected.image_share[1].mean()
    np.testing.assert_allclose(weights_of(heatmaps(at)[0]), np.insert(row, at_image, share), rtol=1e-4, atol=1e-6)
    assert f"[image: {len(expected.image_positions)} tokens]" in heatmaps(at)[0]
    # the overview: token 1's image share per layer and head
    [figure] = [f for f in figures(at) if f["layout"]["yaxis"]["title"]["text"] == "layer"]
    np.testing.assert_allclose(values(figure["data"][0]["z"]), expected.image_share[1], atol=1e-6)
    at.radio(key=overview.STATISTIC).set_value("largest weight on one image token")
    checked(at.run())
    [figure] = [f for f in figures(at) if f["layout"]["yaxis"]["title"]["text"] == "layer"]
    np.testing.assert_allclose(values(figure["data"][0]["z"]), expected.image_attention[1].max(-1), atol=1e-6)
    # a click on the cell of layer 1, head 2: the map shows that layer and head, and so do the words
    at.session_state[overview.CHART] = {"selection": {"points": [{"customdata": [1, 2, 0.5]}]}}
    checked(at.run())
    assert captions(at)[0] == f"Attention of {token_name(expected, 1)} on the image, layers 1 to 1, head 2"
    row = words.weights[1, 1, 2][seen]
    np.testing.assert_allclose(
        weights_of(heatmaps(at)[0]), np.insert(row, at_image, expected.image_share[1, 1, 2]), rtol=1e-4, atol=1e-6
    )
    # the same click on later runs does not undo a change of the slider
    at.slider(key="ask|layers").set_value((0, 1))
    checked(at.run())
    assert captions(at)[0] == f"Attention of {token_name(expected, 1)} on the image, layers 0 to 1, head 2"


def test_the_whole_answers_relevance_on_demand(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given=GIVEN))
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer=GIVEN)
    at.session_state[TOKEN] = ALL
    at.radio(key="ask|kind").set_value("relevance")
    checked(at.run())
    count = len(expected.token_ids)
    at.button(key="ask|relevance_all").click()
    checked(at.run())
    assert (
        captions(at)[0]
        == f"Relevance of the whole answer: the mean of its {count} tokens' relevance (Chefer et al. 2021b)"
    )
    stored = sorted(kept("token_relevance"), key=lambda v: tuple(v))
    assert len(stored) == count  # one backward pass per token, each kept
    mean = np.mean([image_relevance(expected, t) for t in range(count)], axis=0)
    np.testing.assert_allclose(np.mean(stored, axis=0), mean, rtol=1e-5, atol=1e-7)


def test_patches_chosen_on_the_photo_who_looks_at_them_and_the_answer_without_them(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given=GIVEN))
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer=GIVEN)
    at.session_state[TOKEN] = 2
    checked(at.run())
    [figure] = [f for f in figures(at) if f["layout"]["yaxis"]["title"]["text"] == "y (pixels)"]
    assert [c[0] for c in figure["data"][1]["customdata"]] == list(range(len(expected.image_positions)))
    chosen = [3, 5, 6]
    points = [{"customdata": [i], "x": 0.0, "y": 0.0} for i in chosen]
    at.session_state[patches.CHART] = {"selection": {"points": points, "box": [], "lasso": []}}
    checked(at.run())
    found = patch_attention(expected, chosen)
    question, answered = heatmaps(at)[1:3]
    np.testing.assert_allclose(
        weights_of(question), found.prompt_weights.mean(axis=(1, 2)).sum(-1), rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(
        weights_of(answered), found.answer_weights.mean(axis=(1, 2)).sum(-1), rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(weights_of(answered), token_attention_sum(expected, chosen), rtol=1e-4, atol=1e-6)
    assert any(c.startswith("3 patches chosen.") for c in (c.value for c in at.caption))
    at.button(key=patches.KNOCK).click()
    checked(at.run())
    before, after = token_logprobs(expected, []), token_logprobs(expected, chosen)
    metrics = {m.proto.label: m for m in at.metric}
    assert metrics[f"log p of {token_name(expected, 2)}"].value == f"{after[2]:.3f}"
    assert metrics["summed log p of the answer"].value == f"{after.sum():.3f}"
    table = at.dataframe[-1].value
    np.testing.assert_allclose(table["log p before"], before, atol=1e-6)
    np.testing.assert_allclose(table["log p after"], after, atol=1e-6)
    assert not np.allclose(before, after)  # three of 16 patches out of sight change the answer's probabilities


def token_attention_sum(answer, chosen) -> np.ndarray:
    """Each answer token's recorded attention on ``chosen`` (every layer, the heads' mean), summed."""
    return answer.image_attention[..., chosen].mean(axis=(1, 2)).sum(-1)


def test_two_tokens_side_by_side_on_one_colour_scale(folder, monkeypatch):
    at = press_ask(ask_app(folder, monkeypatch, given=GIVEN))
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer=GIVEN)
    at.selectbox(key=compare.FIRST).set_value(0)
    at.selectbox(key=compare.SECOND).set_value(2)
    checked(at.run())
    names = captions(at)
    assert f"Attention of {token_name(expected, 0)} on the image, layers 0 to 1, the heads' mean" in names[1:]
    assert f"Attention of {token_name(expected, 2)} on the image, layers 0 to 1, the heads' mean" in names[1:]
    both = np.concatenate([token_attention(expected, 0), token_attention(expected, 2)])
    scale = next(c for c in names if c.endswith("one scale for both maps"))
    assert scale == f"Colour scale: {both.min():.3g} to {both.max():.3g}; one scale for both maps"
