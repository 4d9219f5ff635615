"""The views beyond the attention maps on Swin and Swin v2, against the source library: the logit lens of the last
stage's blocks (each token read by transformers' own final norm and classifier, drawn on the first stage's patches
by integer division of their coordinates), its readout against transformers' probabilities."""

from __future__ import annotations

import pytest
import torch
from tiny_swins import huggingface_swin

import vitviz
from vitviz.explain import method_maps

SIZE = (32, 32)  # a 16 x 16 first stage, 4 x 4 last stage: two blocks in each of three stages


@pytest.mark.parametrize("family", ["swin", "swinv2"])
def test_the_lens_reads_the_last_stages_tokens_through_transformers_head(family):
    reference = huggingface_swin(family)
    model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    pixels = torch.randn(1, 3, *SIZE, generator=torch.Generator().manual_seed(2))
    target = 1
    result = method_maps(model, pixels, ["lens"], target)
    lens = result.lens
    assert lens.probability.shape == (2, 1, 16, 16)  # the last stage's two blocks, on the first stage's grid
    with torch.no_grad():
        out = reference(pixels, output_hidden_states=True)
        base = getattr(reference, reference.base_model_prefix)
        tokens = base(pixels).last_hidden_state[0]  # (16, D) the last block's tokens after the final norm
        per_token = reference.classifier(tokens).softmax(dim=-1)  # (16, classes)
    rows, cols = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    holder = (rows // 4) * 4 + cols // 4  # the last-stage token over each first-stage patch
    torch.testing.assert_close(lens.probability[-1, 0], per_token[holder, target], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lens.votes[-1, 0], per_token.argmax(dim=-1)[holder])
    probabilities = out.logits.softmax(dim=-1)[0]
    assert lens.readout_probability[-1, 0].item() == pytest.approx(probabilities[target].item(), abs=1e-5)
    torch.testing.assert_close(result.maps["lens"], lens.probability[-1, 0])
    # the mean of the per-token logits is the model's logit: the head is linear after the mean pooling
    assert torch.allclose(reference.classifier(tokens).mean(dim=0), out.logits[0], atol=1e-4)


@pytest.mark.parametrize("family", ["swin", "swinv2"])
def test_head_importance_zeroes_each_head_as_transformers_output_projection_would(family):
    """Each head knocked out in transformers' own model (its channels zeroed at the input of the block's output
    projection, a hook) against explain.head_importance on the converted model."""
    from vitviz.explain import head_importance

    reference = huggingface_swin(family)
    model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    pixels = torch.randn(2, 3, *SIZE, generator=torch.Generator().manual_seed(3))
    result = head_importance(model, pixels, target=1, max_batch=8)
    heads = model.config.num_heads
    assert result.logit_change.shape == (2, 6, max(heads))
    assert torch.isnan(result.logit_change[:, :4, 2:]).all()  # the first stages' 2 heads of the 4 columns
    with torch.no_grad():
        intact = reference(pixels).logits[:, 1]
    base = getattr(reference, reference.base_model_prefix)
    for layer, (stage, block) in enumerate((s, b) for s in range(3) for b in range(2)):
        projection = base.encoder.layers[stage].blocks[block].attention
        projection = getattr(projection, "o_proj", None) or projection.output.dense  # transformers 5 / 4 names
        width = model.config.width(stage) // heads[stage]
        for head in range(heads[stage]):

            def zero(module, args, head=head, width=width):
                hidden = args[0].clone()
                hidden[..., head * width : (head + 1) * width] = 0
                return (hidden,)

            handle = projection.register_forward_pre_hook(zero)
            with torch.no_grad():
                removed = reference(pixels).logits[:, 1]
            handle.remove()
            torch.testing.assert_close(result.logit_change[:, layer, head], removed - intact, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"head_mask must be \(layers, heads\) = \(6, 4\)"):
        model(pixels, head_mask=torch.ones(6, 2))
