"""The logit lens on image tokens (vitviz/vlm/lens.py) against a direct computation with output_hidden_states: the
final norm and the unembedding on each image token's hidden state, and at the last layer the model's own logits."""

import numpy as np
import pytest
import torch
from tiny_vlms import tiny_vlm_folder
from vlm_harness import TESTED, red_cat

from vitviz.vlm import VLMError, load_vlm
from vitviz.vlm import lens as lens_module
from vitviz.vlm.lens import logit_lens


@pytest.fixture(scope="module", params=TESTED)
def answer(request, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(request.param, tmp_path_factory))
    return red_cat(vlm)


def direct_probabilities(answer, layer: int) -> torch.Tensor:
    """(N, vocab): output_hidden_states[layer] at the image positions through the final norm and lm_head (the
    last entry is already normed by transformers: there, the model's own logits)."""
    model = answer.model.model
    with torch.no_grad():
        output = model(**answer.inputs, output_hidden_states=True, use_cache=False)
        positions = torch.as_tensor(answer.image_positions)
        if layer == len(output.hidden_states) - 1:
            logits = output.logits[0, positions]
        else:
            norm = answer.model.language_model.norm
            logits = model.get_output_embeddings()(norm(output.hidden_states[layer][0, positions]))
            cap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
            if cap:
                logits = torch.tanh(logits / cap) * cap
    return torch.softmax(logits.float(), -1)


@pytest.mark.parametrize("layer, block", [(0, None), (1, 3), (-1, None)])
def test_lens_equals_direct_computation(answer, layer, block, monkeypatch):
    """At the embeddings, a middle layer (its logits formed 3 image tokens at a time) and the last layer."""
    if block is not None:
        monkeypatch.setattr(lens_module, "LENS_BLOCK_TOKENS", block)
    lens = logit_lens(answer, layer, k=4)
    count = answer.model.num_layers + 1
    assert lens.layer == layer % count
    expected = direct_probabilities(answer, layer % count)
    top = expected.topk(4, -1)
    n = len(answer.image_positions)
    assert lens.ids.shape == lens.words.shape == lens.probabilities.shape == (n, 4)
    np.testing.assert_array_equal(lens.ids, top.indices.numpy())
    np.testing.assert_allclose(lens.probabilities, top.values.numpy(), atol=1e-5)
    assert lens.probabilities.dtype == np.float32 and (np.diff(lens.probabilities, axis=1) <= 0).all()
    tokenizer = answer.model.tokenizer
    assert lens.words[0, 0] == tokenizer.decode([int(lens.ids[0, 0])])
    # the top-1 word of each image token, at its place in its tile's grid
    assert [grid.shape for grid in lens.top_words] == [tile.grid for tile in answer.tiles]
    for j, (tile, row, col) in enumerate(answer.image_token_grid):
        if row >= 0:
            assert lens.top_words[tile][row, col] == lens.words[j, 0]
    assert len(set(lens.ids[:, 0].tolist())) > 1 or n == 1  # tokens differ: a real test of the positions


@pytest.mark.parametrize(
    "layer, k, match", [(3, 5, "layer must"), (-4, 5, "layer must"), (1.0, 5, "layer must"), (1, 0, "k must")]
)
def test_bad_arguments_get_one_line(answer, layer, k, match):
    with pytest.raises(VLMError, match=match) as error:
        logit_lens(answer, layer, k=k)
    assert "\n" not in str(error.value)
