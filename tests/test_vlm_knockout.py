"""Knock-outs (vitviz/vlm/knockout.py): removing no image token gives the answer's own log-probability; removing
every image token (or a chosen few) equals an eager run whose attention masks block the same (rows, columns); the
curves follow the map's order and their area is the trapezoid over the fractions."""

import sys

import numpy as np
import pytest
import torch
from tiny_vlms import tiny_vlm_folder
from vlm_harness import TESTED, eager_model, red_cat

from vitviz.vlm import VLMError, load_vlm
from vitviz.vlm.knockout import answer_logprob, knockout_curve, knockout_curves
from vitviz.vlm.maps import token_attention
from vitviz.vlm.model import language_layers
from vitviz.vlm.recording import ROWS_ATTENTION


@pytest.fixture(scope="module", params=TESTED)
def family(request, tmp_path_factory):
    folder = tiny_vlm_folder(request.param, tmp_path_factory)
    eager = eager_model(folder)
    vlm = load_vlm(folder)
    return eager, red_cat(vlm)


def eager_logprob(eager, answer, monkeypatch, start: int, removed: np.ndarray) -> float:
    """The eager model's answer log-probability, its eager attention function given masks in which queries from
    ``start`` on cannot see the removed image tokens' positions (the obvious way: -inf added to their scores)."""
    columns = torch.as_tensor(answer.image_positions[removed], dtype=torch.long)
    _, _, attentions = language_layers(eager)
    language = {id(module) for module in attentions}
    modeling = sys.modules[type(attentions[0]).__module__]
    original = modeling.eager_attention_forward

    def masked(module, query, key, value, attention_mask, *args, **kwargs):
        if id(module) not in language:  # a vision tower's attention (Qwen's share the function)
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        length = key.shape[2]
        mask = torch.zeros(1, 1, query.shape[2], length) if attention_mask is None else attention_mask[..., :length]
        if attention_mask is None:  # causal
            mask = mask.masked_fill(torch.ones(query.shape[2], length, dtype=torch.bool).triu(1), float("-inf"))
        mask = mask.clone()
        rows = torch.arange(length - query.shape[2], length) >= start
        mask[:, :, rows.nonzero().flatten()[:, None], columns[None, :]] = float("-inf")
        return original(module, query, key, value, mask, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(modeling, "eager_attention_forward", masked)
        with torch.no_grad():
            logits = eager(**answer.inputs, use_cache=False).logits[0].float()
    rows = torch.as_tensor(answer.rows)
    logprobs = torch.log_softmax(logits[rows], -1)[torch.arange(len(rows)), torch.tensor(answer.token_ids)]
    return float(logprobs.sum())


def test_removing_nothing_is_the_answers_own_logprob(family):
    _, answer = family
    np.testing.assert_allclose(answer_logprob(answer, []), answer.logprobs.sum(dtype=np.float64), atol=1e-4)
    np.testing.assert_allclose(answer_logprob(answer, [], "answer"), answer.logprobs.sum(dtype=np.float64), atol=1e-4)
    assert answer.model.text_config._attn_implementation == ROWS_ATTENTION


@pytest.mark.parametrize("view", ["after_image", "answer"])
def test_removing_every_image_token_equals_eager_masking(family, view, monkeypatch):
    eager, answer = family
    count = len(answer.image_positions)
    start = int(answer.image_positions.max()) + 1 if view == "after_image" else answer.answer_start - 1
    everything = np.arange(count)
    expected = eager_logprob(eager, answer, monkeypatch, start, everything)
    got = answer_logprob(answer, everything, view)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert abs(got - answer.logprobs.sum()) > 1e-3  # the knock-out changes the answer: a real test of the mask
    some = np.array([0, count // 2, count - 1])
    np.testing.assert_allclose(
        answer_logprob(answer, some, view), eager_logprob(eager, answer, monkeypatch, start, some), atol=1e-4
    )


def test_curves_follow_the_maps_order(family):
    _, answer = family
    if answer.model.model_type not in ("llava", "qwen2_vl", "llava_next"):
        pytest.skip("the curves' bookkeeping is the same for every family")
    scores = token_attention(answer)
    count = len(scores)
    fractions = (0.0, 0.25, 0.5, 1.0)
    curves = knockout_curves(answer, scores, fractions)
    most, least = curves["most"], curves["least"]
    assert most.removed.tolist() == [round(count * f) for f in fractions] == least.removed.tolist()
    assert most.logprob[0] == pytest.approx(answer.logprobs.sum(), abs=1e-4) == least.logprob[0]
    assert most.logprob[-1] == pytest.approx(least.logprob[-1], abs=1e-9)  # everything removed either way
    ranking = np.argsort(-scores, kind="stable")
    assert most.logprob[1] == pytest.approx(answer_logprob(answer, ranking[: most.removed[1]]), abs=1e-9)
    assert least.logprob[2] == pytest.approx(answer_logprob(answer, ranking[::-1][: least.removed[2]]), abs=1e-9)
    assert most.area == pytest.approx(np.trapezoid(most.logprob, fractions), abs=1e-9)
    default = knockout_curve(answer, scores, "least", view="answer")
    assert default.fractions.tolist() == pytest.approx([0.1 * i for i in range(10)])
    assert default.view == "answer" and default.order == "least" and len(default.logprob) == 10


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda a: answer_logprob(a, [len(a.image_positions)]), "indices 0 to"),
        (lambda a: answer_logprob(a, [-1]), "indices 0 to"),
        (lambda a: answer_logprob(a, [], view="all"), "view must"),
        (lambda a: knockout_curve(a, np.zeros(3)), "one per image token"),
        (lambda a: knockout_curve(a, np.full(len(a.image_positions), np.nan)), "finite"),
        (lambda a: knockout_curve(a, np.zeros(len(a.image_positions)), "best"), "order must"),
        (lambda a: knockout_curve(a, np.zeros(len(a.image_positions)), fractions=(0.5, 0.2)), "increase"),
        (lambda a: knockout_curve(a, np.zeros(len(a.image_positions)), fractions=(0.0, 1.5)), "from 0 to 1"),
        (lambda a: knockout_curve(a, np.zeros(len(a.image_positions)), fractions=[]), "fractions must"),
    ],
)
def test_bad_arguments_get_one_line(family, call, match):
    _, answer = family
    with pytest.raises(VLMError, match=match) as error:
        call(answer)
    assert "\n" not in str(error.value)
