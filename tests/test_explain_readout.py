"""What the head reads (readout tensors, prefix tokens, token norms, the pooling head) and start layers outside the
model."""

import pytest
import torch
from attention_references import random_attentions
from tiny_models import build_tiny_vit

from vitviz import explain
from vitviz.explain import (
    StreamingExplainer,
    attention_gradients,
    attention_rollout,
    cls_attention_all,
    gradient_weighted_attention,
    gradient_weighted_rollout,
)

# --- what the head reads, prefix tokens, token norms, the pooling head ------------------------------------------


def test_a_readout_tensor_gives_the_string_poolings_exactly():
    attentions = random_attentions(prefix=2)
    B, T = 2, attentions[0].shape[-1]
    one_hot = torch.zeros(B, T)
    one_hot[:, 0] = 1
    uniform = torch.zeros(B, T)
    uniform[:, 2:] = 1 / (T - 2)
    for name, tensor in [("cls", one_hot), ("mean", uniform)]:
        args = dict(num_prefix_tokens=2, grid_size=(2, 3))
        torch.testing.assert_close(
            attention_rollout(attentions, readout=tensor, **args),
            attention_rollout(attentions, readout=name, **args),
        )
        torch.testing.assert_close(
            gradient_weighted_attention(attentions, attentions, readout=tensor, **args),
            gradient_weighted_attention(attentions, attentions, readout=name, **args),
        )


def test_a_distilled_models_readout_averages_the_cls_and_distillation_rows():
    # DeiT's head reads [CLS] and the distillation token half each, so its rollout is the mean of those two rows
    attentions = random_attentions(prefix=2)
    readout = torch.zeros(2, 8)
    readout[:, :2] = 0.5
    rollout = attention_rollout(attentions, readout=readout, num_prefix_tokens=2)
    rows = [reference_rollout_row(attentions, token) for token in (0, 1)]
    torch.testing.assert_close(rollout.double(), (rows[0] + rows[1]) / 2)


def reference_rollout_row(attentions, token, prefix=2):
    T = attentions[0].shape[-1]
    rollout = torch.eye(T, dtype=torch.float64).expand(2, T, T)
    for a in attentions:
        fused = a.double().mean(1) + torch.eye(T, dtype=torch.float64)
        rollout = (fused / fused.sum(-1, keepdim=True)) @ rollout
    return rollout[:, token, prefix:]


def test_readout_tensor_is_validated():
    attentions = random_attentions()
    with pytest.raises(ValueError, match="do not match"):
        attention_rollout(attentions, readout=torch.ones(2, 3), num_prefix_tokens=1)
    with pytest.raises(ValueError, match=r"\(B, T\) token weights"):
        attention_rollout(attentions, readout=torch.ones(7), num_prefix_tokens=1)


def test_readout_attention_all_is_the_cls_rows_or_the_weighted_rows():
    attentions = random_attentions(prefix=1)
    args = dict(num_prefix_tokens=1, grid_size=(2, 3))
    torch.testing.assert_close(
        explain.readout_attention_all(attentions, **args, readout="cls"), cls_attention_all(attentions, **args)
    )
    weights = torch.rand(2, 7).softmax(-1)
    expected = torch.stack([torch.einsum("bt,bhtn->bhn", weights, a)[..., 1:] for a in attentions], dim=1)
    torch.testing.assert_close(
        explain.readout_attention_all(attentions, **args, readout=weights), expected.reshape(2, 3, 4, 2, 3)
    )


def test_attention_to_prefix_tokens_known_answer():
    # 1 [CLS] + 2 registers + 2 patches; patch 0 gives 0.5 to register 1, patch 1 gives 0.2 to [CLS]
    attention = torch.zeros(1, 1, 5, 5)
    attention[0, 0, :3] = torch.eye(5)[:3]  # prefix rows: not counted
    attention[0, 0, 3] = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.25])
    attention[0, 0, 4] = torch.tensor([0.2, 0.0, 0.0, 0.4, 0.4])
    shares = explain.attention_to_prefix_tokens([attention, attention], num_prefix_tokens=3)
    assert shares.shape == (1, 2, 1, 4)
    torch.testing.assert_close(shares[0, 0, 0], torch.tensor([0.1, 0.25, 0.0, 0.65]))
    torch.testing.assert_close(random_shares().sum(-1), torch.ones(2, 3, 4))


def random_shares():
    return explain.attention_to_prefix_tokens(random_attentions(prefix=3), num_prefix_tokens=3)


def test_token_norms_and_high_norm_patches():
    hidden = torch.ones(1, 6, 4)  # 2 prefix tokens, 4 patches, each of norm 2
    hidden[0, 4] *= 10  # a patch 10 times the others: Darcet et al.'s artifact
    hidden[0, 0] *= 50  # a high-norm prefix token is not a patch, and not flagged
    norms = explain.token_norms([hidden, hidden * 2])
    torch.testing.assert_close(norms[0, 0], torch.tensor([100.0, 2, 2, 2, 20, 2]))
    assert norms.shape == (1, 2, 6)
    flagged = explain.high_norm_patches(norms, num_prefix_tokens=2)
    assert flagged.tolist() == [[[False, False, True, False]] * 2]
    assert not explain.high_norm_patches(norms, 2, factor=20).any()
    with pytest.raises(ValueError, match="positive"):
        explain.high_norm_patches(norms, 2, factor=0)


def test_pooling_attention_maps_one_head_or_all():
    weights = torch.rand(2, 4, 6).softmax(-1)
    torch.testing.assert_close(explain.pooling_attention(weights, 1, (2, 3)), weights[:, 1].reshape(2, 2, 3))
    torch.testing.assert_close(explain.pooling_attention(weights, "max", (2, 3)), weights.amax(1).reshape(2, 2, 3))
    with pytest.raises(ValueError, match="head must be in"):
        explain.pooling_attention(weights, 4)
    with pytest.raises(ValueError, match="does not hold"):
        explain.pooling_attention(weights, "mean", (3, 3))


def test_class_maps_of_a_map_pooled_model_read_its_pooling_weights():
    # a SigLIP-like model: no [CLS], the head reads the patches through its pooling attention
    model = build_tiny_vit("map-pooled", num_register_tokens=0, num_layers=2, num_classes=3)
    output, gradients = attention_gradients(model, torch.randn(1, 3, 32, 32), target=1)
    attentions = [a.detach() for a in output.attentions]
    relevance = gradient_weighted_attention(attentions, gradients, num_prefix_tokens=0, readout=output.readout.detach())
    by_hand = torch.eye(16)[None]
    for a, g in zip(attentions, gradients):
        by_hand = by_hand + (g * a).clamp(min=0).mean(1) @ by_hand
    torch.testing.assert_close(relevance, (output.readout.detach()[:, None] @ by_hand)[:, 0])


# --- start layers outside the model ----------------------------------------------------------------------------


@pytest.mark.parametrize("start_layer", [3, -1])
@pytest.mark.parametrize("method", ["relevance", "grad-rollout", "rollout"])
def test_a_start_layer_outside_the_blocks_is_refused_with_the_valid_range(method, start_layer):
    # 3 on a 3-block model used to give an all-zero relevance map, and -1 silently meant the last block
    attentions = random_attentions(layers=3)
    gradients = [torch.rand_like(a) for a in attentions]
    compute = {
        "relevance": lambda: gradient_weighted_attention(attentions, gradients, start_layer=start_layer),
        "grad-rollout": lambda: gradient_weighted_rollout(attentions, gradients, start_layer=start_layer),
        "rollout": lambda: attention_rollout(attentions, start_layer=start_layer),
    }[method]
    with pytest.raises(ValueError, match=r"start_layer must be in \[0, 2\]"):
        compute()


def test_streaming_start_layer_past_the_last_block_names_the_valid_range():
    # the explainer cannot know the block count before the pass; afterwards it must not blame the caller's wiring
    model = build_tiny_vit("non-square")
    streamer = StreamingExplainer(model.config.grid_size, 8, 1, start_layer=3)
    with torch.no_grad():
        model(torch.randn(1, 3, 16, 24), attention_sink=streamer)
    with pytest.raises(ValueError, match=r"start_layer must be in \[0, 2\] for a model with 3 blocks; got 3"):
        streamer.results()
    with torch.no_grad():  # a second pass: still 3 blocks, not the 6 seen in all
        model(torch.randn(1, 3, 16, 24), attention_sink=streamer)
    with pytest.raises(ValueError, match=r"start_layer must be in \[0, 2\] for a model with 3 blocks; got 3"):
        streamer.results()
    with pytest.raises(ValueError, match="start_layer must be in"):
        StreamingExplainer(model.config.grid_size, 8, 1, start_layer=-1)
    with pytest.raises(ValueError, match="no attention was streamed"):
        StreamingExplainer(model.config.grid_size, 8, 1).results()
