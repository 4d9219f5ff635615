"""Issue 44's workbench items on tiny VLM folders. The knock-out curve of one chosen answer token follows that
token's own log-probability, the whole answer's its summed log-probability, each equal to the eager transformers
model run with a mask that hides the removed image tokens, and the Ask page names what each chart measures. The
logit lens of Qwen3-VL reads a layer's output before its deepstack features are added, or after them (what the next
layer reads); other families refuse "after"."""

import numpy as np
import pytest
import torch
from app_harness import figures, values
from streamlit.testing.v1 import AppTest
from tiny_vlms import tiny_vlm_folder
from vlm_harness import eager_model, red_cat

from vitviz.vlm import VLMError, load_vlm, token_attention
from vitviz.vlm.knockout import answer_logprob, knockout_curve, knockout_curves
from vitviz.vlm.lens import image_hidden_states, lens_logits, logit_lens

FRACTIONS = (0.0, 0.25, 0.5, 0.75)


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return red_cat(load_vlm(tiny_vlm_folder("qwen3_vl", tmp_path_factory)))


def direct_logprobs(eager, answer, removed: np.ndarray) -> np.ndarray:
    """Each answer token's log-probability (teacher-forced) from the eager transformers model given its attention
    mask whole (a 4D mask transformers uses as it is): causal, and every position after the image blind to the
    removed image tokens."""
    length = int(answer.input_ids.shape[1])
    hidden = torch.ones(length, length, dtype=torch.bool).triu(1)
    hidden[int(answer.image_positions.max()) + 1 :, torch.as_tensor(answer.image_positions[removed])] = True
    mask = torch.zeros(1, 1, length, length).masked_fill(hidden, torch.finfo(torch.float32).min)
    with torch.no_grad():
        logits = eager(**(dict(answer.inputs) | {"attention_mask": mask}), use_cache=False).logits[0].float()
    rows = torch.as_tensor(answer.rows)
    logprobs = torch.log_softmax(logits[rows], -1)[torch.arange(len(rows)), torch.tensor(answer.token_ids)]
    return logprobs.double().numpy()


def test_one_tokens_curve_follows_its_own_logprob_in_its_own_maps_order(llava):
    answer = red_cat(load_vlm(llava))
    eager = eager_model(llava)
    token = 1  # "red"
    count = len(answer.image_positions)
    own, whole = token_attention(answer, token), token_attention(answer)
    assert (np.argsort(-own, kind="stable") != np.argsort(-whole, kind="stable")).any()  # two orders
    one = knockout_curve(answer, own, "most", FRACTIONS, token=token)
    summed = knockout_curve(answer, whole, "most", FRACTIONS)
    assert one.token == token and summed.token is None
    for curve, scores in ((one, own), (summed, whole)):
        ranking = np.argsort(-scores, kind="stable")
        direct = [direct_logprobs(eager, answer, ranking[: round(count * f)]) for f in FRACTIONS]
        expected = [d[token] for d in direct] if curve.token is not None else [d.sum() for d in direct]
        np.testing.assert_allclose(curve.logprob, expected, atol=1e-4)
    assert one.logprob[0] == pytest.approx(answer.logprobs[token], abs=1e-4)
    assert summed.logprob[0] == pytest.approx(answer.logprobs.sum(), abs=1e-4)
    assert np.abs(one.logprob - summed.logprob).min() > 1e-2  # one token's curve is not the answer's
    # the same core: one token's log-probability with the same tokens removed, whatever map ordered them
    assert answer_logprob(answer, np.argsort(-own)[:5], token=token) == pytest.approx(
        direct_logprobs(eager, answer, np.argsort(-own)[:5])[token], abs=1e-4
    )
    with pytest.raises(VLMError, match="token must be an answer token's index, 0 to 2") as error:
        knockout_curve(answer, own, token=3)
    assert "\n" not in str(error.value)


def knockout_section(folder: str, token, kind: str) -> None:
    """The Ask page's knock-out section alone, for the tiny LLaVA's answer "a red cat" (run by AppTest)."""
    import numpy as np
    from PIL import Image

    from vitviz_dashboard.ask.knockout import draw_knockout
    from vitviz_dashboard.ask.maps import MapChoice
    from vitviz_dashboard.cache.vlm import AnswerKey, VLMKey, ask, get_vlm

    model = VLMKey(folder)
    key = AnswerKey(model, "photo", "what is in the picture ?", "a red cat", 4)
    photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (50, 70, 3), dtype=np.uint8))
    answer = ask(key, _model=get_vlm(model), _photo=photo)
    draw_knockout(key, answer, token=token, choice=MapChoice(kind, (0, 1), None, None))


def section(folder, token, kind="attention") -> AppTest:
    at = AppTest.from_function(knockout_section, args=(str(folder), token, kind), default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    return at


def charts(at: AppTest) -> dict[str, list[np.ndarray]]:
    """Each chart's curves by its y axis's title."""
    return {f["layout"]["yaxis"]["title"]["text"]: [values(t["y"]) for t in f["data"]] for f in figures(at)}


@pytest.mark.usefixtures("fresh_caches")
def test_the_page_draws_and_names_the_tokens_curve_and_the_answers(llava):
    answer = red_cat(load_vlm(llava))
    at = section(llava, 1)
    assert not figures(at)
    assert at.button(key="ask|knockout").proto.label.endswith("(40 passes of the model)")
    at.button(key="ask|knockout").click().run()
    assert not at.exception, at.exception
    drawn = charts(at)
    token, whole = "log-probability of token 1 'red'", "summed log-probability of the answer"
    assert list(drawn) == [token, whole]
    for title, expected in (
        (token, knockout_curves(answer, token_attention(answer, 1), token=1)),
        (whole, knockout_curves(answer, token_attention(answer))),
    ):
        for curve, order in zip(drawn[title], ("most", "least")):
            np.testing.assert_allclose(curve, expected[order].logprob, atol=1e-5)
    assert drawn[token][0][0] == pytest.approx(answer.logprobs[1], abs=1e-4)
    text = [c.value for c in at.caption]
    assert any(c.startswith(f"The {token}, as image tokens") and "Attention of token 1 'red'" in c for c in text)
    assert any(c.startswith(f"The {whole}, as image tokens") and "Attention of the whole answer" in c for c in text)


@pytest.mark.usefixtures("fresh_caches")
def test_the_page_draws_the_answers_curve_alone_without_a_token_and_the_tokens_alone_for_relevance(llava):
    at = section(llava, None)
    at.button(key="ask|knockout").click().run()
    assert list(charts(at)) == ["summed log-probability of the answer"]
    at = section(llava, 2, "relevance")
    at.button(key="ask|knockout").click().run()
    assert list(charts(at)) == ["log-probability of token 2 'cat'"]
    # the whole answer's relevance is computed on demand: until then its curve is left out, and the page says why
    assert any(c.value.startswith("The whole answer's curve needs the whole answer's relevance") for c in at.caption)


def image_deepstack(answer) -> torch.Tensor:
    """The deepstack features Qwen3-VL adds to the image positions, per deepstack layer: (layers, N, width), read
    from the model's own image features."""
    model = answer.model.model.model
    inputs = answer.inputs
    with torch.no_grad():
        output = model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"], return_dict=True)
    return torch.stack([torch.cat(list(features)) for features in output.deepstack_features])


def test_qwen3_lens_reads_before_the_deepstack_features_or_after(qwen3):
    deepstack = image_deepstack(qwen3)
    assert deepstack.shape[0] == 1  # the tiny tower feeds its first block's features after decoder layer 0
    model = qwen3.model.model
    with torch.no_grad():
        states = model(**qwen3.inputs, output_hidden_states=True, use_cache=False).hidden_states
    positions = torch.as_tensor(qwen3.image_positions)
    before = image_hidden_states(qwen3, 1)
    after = image_hidden_states(qwen3, 1, deepstack="after")
    torch.testing.assert_close(before, states[1][0, positions], atol=1e-5, rtol=1e-5)  # output_hidden_states' own
    torch.testing.assert_close(after, before + deepstack[0], atol=1e-5, rtol=1e-5)
    assert (after - before).abs().max() > 1e-3
    for layer in (0, 2):  # no deepstack features: the same hidden state
        torch.testing.assert_close(
            image_hidden_states(qwen3, layer, deepstack="after"), image_hidden_states(qwen3, layer)
        )
    lens = logit_lens(qwen3, 1, k=3, deepstack="after")
    top = torch.softmax(lens_logits(qwen3, after), -1).topk(3, -1)
    np.testing.assert_array_equal(lens.ids, top.indices.numpy())
    assert lens.deepstack == "after" and logit_lens(qwen3, 1, k=3).deepstack == "before"


def test_lens_after_deepstack_is_refused_without_deepstack(llava, qwen3):
    answer = red_cat(load_vlm(llava))
    with pytest.raises(VLMError, match="llava adds no deepstack features") as error:
        logit_lens(answer, 1, deepstack="after")
    assert "\n" not in str(error.value)
    with pytest.raises(VLMError, match="deepstack must be one of before, after"):
        logit_lens(qwen3, 1, deepstack="during")
