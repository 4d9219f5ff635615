"""Head importance: each head's number is a forward pass with that head masked, whatever the batching."""

import pytest
import torch
from tiny_models import build_tiny_vit

from vitviz import explain


def masked_target(model, images, mask, targets, ablation="zero"):
    """The reference: one plain forward pass with ``head_mask``, the target's logit and probability."""
    with torch.no_grad():
        logits = model(images, head_mask=mask, head_ablation=ablation).logits
    return logits.gather(1, targets[:, None])[:, 0], model.probabilities(logits).gather(1, targets[:, None])[:, 0]


@pytest.mark.parametrize("ablation,max_batch", [("zero", 64), ("zero", 3), ("mean", 64)])
def test_each_heads_change_is_a_forward_pass_with_that_head_masked(ablation, max_batch):
    model = build_tiny_vit("registers", num_register_tokens=1)
    images = torch.randn(2, 3, 32, 32)
    done = []
    result = explain.head_importance(model, images, ablation=ablation, max_batch=max_batch, progress=done.append)
    assert done == [0, 1, 2]  # progress after each layer
    with torch.no_grad():
        intact = model(images).logits
    targets = intact.argmax(dim=-1)
    assert result.target.tolist() == targets.tolist()
    torch.testing.assert_close(result.logit, intact.gather(1, targets[:, None])[:, 0])
    for layer in range(3):
        for head in range(4):
            mask = torch.ones(3, 4)
            mask[layer, head] = 0
            logit, probability = masked_target(model, images, mask, targets, ablation)
            torch.testing.assert_close(result.logit_change[:, layer, head], logit - result.logit, atol=1e-5, rtol=0)
            torch.testing.assert_close(
                result.probability_change[:, layer, head], probability - result.probability, atol=1e-6, rtol=0
            )
    assert result.logit_change.abs().max() > 1e-3  # heads matter in this model


def test_a_chosen_target_and_a_knocked_out_model():
    model = build_tiny_vit().knock_out(heads=[(0, 0)])
    images = torch.randn(1, 3, 32, 32)
    result = explain.head_importance(model, images, target=4)
    assert result.target.tolist() == [4]
    assert abs(float(result.logit_change[0, 0, 0])) < 1e-5  # removing a head already removed changes nothing
    mask = torch.ones(3, 4)
    mask[2, 1] = 0
    logit, _ = masked_target(model, images, mask, torch.tensor([4]))
    torch.testing.assert_close(result.logit_change[0, 2, 1], logit[0] - result.logit[0], atol=1e-5, rtol=0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="needs a classifier"):
        explain.head_importance(build_tiny_vit(num_classes=0), torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="ablation must be 'zero' or 'mean'"):
        explain.head_importance(build_tiny_vit(), torch.randn(1, 3, 32, 32), ablation="half")
    with pytest.raises(ValueError, match="target must be one class or one per image"):
        explain.head_importance(build_tiny_vit(), torch.randn(1, 3, 32, 32), target=9)
