"""Relevance (vitviz/vlm/relevance.py): Chefer et al. 2021b's rules for self-attention, computed memory-light during
the backward pass, equal a direct implementation of the rules on eager attention with output_attentions and
retain_grad, on the tiny folders of every supported family."""

import numpy as np
import pytest
import torch
from tiny_vlms import tiny_vlm_folder
from vlm_harness import TESTED, eager_model, red_cat

from vitviz.vlm import VLMError, load_vlm
from vitviz.vlm import relevance as relevance_module
from vitviz.vlm.passes import PASS_ATTENTION
from vitviz.vlm.recording import ROWS_ATTENTION
from vitviz.vlm.relevance import image_relevance, relevance_row


@pytest.fixture(scope="module", params=TESTED)
def family(request, tmp_path_factory):
    folder = tiny_vlm_folder(request.param, tmp_path_factory)
    eager = eager_model(folder)
    vlm = load_vlm(folder)
    return vlm, eager, red_cat(vlm)


def direct_relevance(eager, answer, token: int) -> np.ndarray:
    """The rules the obvious way: every layer's (heads, T, T) attention and its gradient, R = I, R += Ā R."""
    with torch.enable_grad():
        output = eager(**answer.inputs, output_attentions=True, use_cache=False)
        for attention in output.attentions:
            attention.retain_grad()
        row = int(answer.rows[token])
        output.logits[0, row, answer.token_ids[token]].backward()
    length = answer.input_ids.shape[1]
    relevance = torch.eye(length)
    for attention in output.attentions:
        cam = (attention.grad[0] * attention[0]).clamp(min=0).mean(0)
        relevance = relevance + cam @ relevance
    eager.zero_grad(set_to_none=True)
    return relevance[row].detach().numpy()


@pytest.mark.parametrize("token, block", [(0, None), (2, 3)])
def test_relevance_equals_the_direct_rules(family, token, block, monkeypatch):
    """With the default block of rows, and with blocks of 3 rows (each re-formed block of attention has at most
    RELEVANCE_BLOCK_ROWS query rows, never a whole layer's (T, T)); the backward pass keeps no layer's attention."""
    vlm, eager, answer = family
    expected = direct_relevance(eager, answer, token)
    blocks = []
    original = relevance_module.row_probabilities

    def watched(module, query, key, mask, rows, *args):
        blocks.append(rows.numel())
        return original(module, query, key, mask, rows, *args)

    monkeypatch.setattr(relevance_module, "row_probabilities", watched)
    if block is not None:
        monkeypatch.setattr(relevance_module, "RELEVANCE_BLOCK_ROWS", block)
    length = answer.input_ids.shape[1]
    square = {}  # what autograd keeps of (T, T) size, by storage: never a layer's attention, only shared masks

    def keep(tensor):
        if tensor.dim() >= 2 and tensor.shape[-2:] == (length, length):
            square[tensor.data_ptr()] = tuple(tensor.shape)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        row = relevance_row(answer, token)
    assert all(shape[:-2].numel() == 1 for shape in map(torch.Size, square.values())), square
    # the mask transformers built (Gemma 3: a sliding-window one beside it), one for all the layers that use it
    assert len(square) <= (2 if vlm.model_type == "gemma3" else 1), square
    assert row.dtype == np.float32 and row.shape == expected.shape
    np.testing.assert_allclose(row, expected, atol=1e-5, rtol=1e-5)
    image = image_relevance(answer, token)
    assert image.shape == (len(answer.image_positions),)
    np.testing.assert_allclose(image, expected[answer.image_positions], atol=1e-5, rtol=1e-5)
    assert image.std() > 1e-4  # the image tokens are told apart: a real test of the columns
    assert max(blocks) <= relevance_module.RELEVANCE_BLOCK_ROWS and max(blocks) < answer.input_ids.shape[1]
    assert vlm.text_config._attn_implementation == ROWS_ATTENTION  # the pass's switch is undone
    assert not any(p.grad is not None for p in vlm.model.parameters())  # no weight gradient accumulates


def test_relevance_with_frozen_weights(family):
    vlm, eager, answer = family
    if vlm.model_type not in ("llava", "qwen2_vl"):
        pytest.skip("one decoder of each kind is enough")
    expected = direct_relevance(eager, answer, 1)
    flags = [p.requires_grad for p in vlm.model.parameters()]
    try:
        vlm.model.requires_grad_(False)
        np.testing.assert_allclose(relevance_row(answer, 1), expected, atol=1e-5, rtol=1e-5)
    finally:
        for param, flag in zip(vlm.model.parameters(), flags, strict=True):
            param.requires_grad_(flag)


def test_relevance_of_the_whole_answer_is_the_mean_over_its_tokens(family):
    vlm, _, answer = family
    if vlm.model_type not in ("llava", "qwen2_vl"):
        pytest.skip("one decoder of each kind is enough")
    rows = [relevance_row(answer, token) for token in range(len(answer.token_ids))]
    np.testing.assert_allclose(relevance_row(answer, None), np.mean(rows, axis=0), atol=1e-6)
    np.testing.assert_allclose(image_relevance(answer, None), np.mean(rows, axis=0)[answer.image_positions], atol=1e-6)


@pytest.mark.parametrize("token", [-1, 3, 1.5, True, "0"])
def test_bad_tokens_get_one_line(family, token):
    _, _, answer = family
    with pytest.raises(VLMError, match="answer token's index") as error:
        image_relevance(answer, token)
    assert "\n" not in str(error.value)
    assert answer.model.text_config._attn_implementation != PASS_ATTENTION
