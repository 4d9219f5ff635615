"""vitviz.analysis: an analysis that keeps only its streamed views gives the page what one that keeps every
block's attention gives, in fp32 and under bf16, for every kind of readout."""

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_models import build_tiny_vit

from vitviz import Preprocessing, ViT, explain
from vitviz.analysis import analyse_image, attention_bytes, patch_attention, rollout
from vitviz.explain.head_statistics import HEAD_STATISTICS

CONFIGS = {
    "cls": dict(),
    "registers": dict(num_register_tokens=2),
    "mean": dict(class_token=False, pooling="mean"),
    "map": dict(class_token=False, pooling="map"),  # the readout is known only after the pass
    "deit": dict(distillation_token=True, distillation_head=True),
}


def model_for(config: dict) -> ViT:
    """A tiny ViT on a 24 x 40 input (a 3 x 5 grid), fed that size."""
    model = build_tiny_vit(image_size=(24, 40), **config)
    model.transform = Preprocessing(resize=(24, 40), crop=None)
    return model


def photo() -> Image.Image:
    return Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_streamed_views_equal_the_keep_everything_views(name, precision):
    model = model_for(CONFIGS[name])
    whole = analyse_image(model, photo(), precision)
    streamed = analyse_image(model, photo(), precision, max_attention_bytes=0)
    assert whole.attentions is not None and streamed.attentions is None
    # the views, against the keep-everything functions on the kept attentions
    args = whole.readout_args
    torch.testing.assert_close(
        whole.readout_attention,
        explain.readout_attention_all(whole.attentions, **whole.maps_args, readout=whole.readout)[0],
    )
    torch.testing.assert_close(whole.rollout, explain.attention_rollout(whole.attentions, **args)[0])
    torch.testing.assert_close(
        whole.statistics["prefix_shares"],
        explain.attention_to_prefix_tokens(whole.attentions, whole.num_prefix_tokens)[0],
    )
    torch.testing.assert_close(whole.statistics["entropy"], explain.attention_entropy(whole.attentions)[0])
    assert set(whole.statistics) == {s.name for s in HEAD_STATISTICS}
    # and the streamed analysis holds the same, in fp32
    views = {name: lambda a, name=name: getattr(a, name) for name in ("readout_attention", "rollout", "readout")}
    views |= {"token_norms": lambda a: a.token_norms}
    views |= {s.name: lambda a, name=s.name: a.statistics[name] for s in HEAD_STATISTICS}
    for field, view in views.items():
        kept, streamed_value = view(whole), view(streamed)
        assert streamed_value.dtype == torch.float32, field
        torch.testing.assert_close(streamed_value, kept, rtol=1e-5, atol=1e-6, msg=field)
    np.testing.assert_allclose(streamed.probabilities, whole.probabilities, rtol=1e-5)
    # views the pass did not make: a streaming pass for the streamed analysis
    for settings in [("max", 0.5, 1), ("min", 0.0, 2), ("mean", 0.9, 0)]:
        torch.testing.assert_close(
            rollout(model, streamed, *settings), rollout(model, whole, *settings), rtol=1e-5, atol=1e-7
        )
    for layer, query in [(0, (0, 0)), (1, (2, 4)), (2, (1, 3))]:
        torch.testing.assert_close(
            patch_attention(model, streamed, layer, query), patch_attention(model, whole, layer, query)
        )


def test_a_patch_pass_stops_after_its_block_and_reports_progress():
    model = model_for({})
    streamed = analyse_image(model, photo(), max_attention_bytes=0)
    blocks = []
    patch_attention(model, streamed, 1, (0, 0), progress=blocks.append)
    assert blocks == [0, 1]  # block 2 never ran
    blocks.clear()
    rollout(model, streamed, "max", progress=blocks.append)
    assert blocks == [0, 1, 2]
    with pytest.raises(ValueError, match="outside 3 blocks of 3x5"):
        patch_attention(model, streamed, 3, (0, 0))
    with pytest.raises(ValueError, match="outside"):
        patch_attention(model, streamed, 0, (3, 0))


def test_the_analysis_keeps_attentions_only_within_the_limit():
    model = model_for({})
    size = attention_bytes(model, 24, 40)
    assert size == 3 * 4 * 16 * 16 * 4  # layers x heads x T x T x 4 bytes, T = 1 + 3 x 5
    assert analyse_image(model, photo(), max_attention_bytes=size).attentions is not None
    assert analyse_image(model, photo(), max_attention_bytes=size - 1).attentions is None
    progress = []
    analyse_image(model, photo(), max_attention_bytes=0, progress=progress.append)
    assert progress == [0, 1, 2]


def test_a_map_pooled_models_streamed_analysis_reads_its_pooling_weights():
    model = model_for(CONFIGS["map"])
    streamed = analyse_image(model, photo(), max_attention_bytes=0)
    with torch.inference_mode():
        output = model(model.transform(photo())[None], output_attentions=True)
    expected = explain.readout_attention_all(output.attentions, 0, (3, 5), readout=output.readout)
    torch.testing.assert_close(streamed.readout_attention, expected[0])
    assert not torch.allclose(
        streamed.readout_attention,
        explain.readout_attention_all(output.attentions, 0, (3, 5), readout="mean")[0],
    )  # the weights matter


def test_a_kept_patch_row_does_not_hold_its_whole_attention_block():
    model = model_for({})
    whole = analyse_image(model, photo())
    rows = patch_attention(model, whole, 1, (1, 2))
    assert rows.untyped_storage().nbytes() == 4 * 15 * 4  # heads x patches x 4 bytes, not the (1, 4, 16, 16) block


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_batch_holds_what_each_image_analysed_alone_holds(name):
    """The index's batched pass and the Photo page's one-image pass are the same analysis: image i of a batch
    equals image i alone, for the last block's readout rows too when only those are asked for."""
    from vitviz.analysis import analyse

    model = model_for(CONFIGS[name])
    pixels = torch.randn(3, 3, 24, 40, generator=torch.Generator().manual_seed(1))
    batch = analyse(model, pixels, keep_blocks=(0, 2))
    last = analyse(model, pixels, readout_blocks="last")
    assert batch.readout_attention.shape == (3, 3, 4, 3, 5) and last.readout_attention.shape == (3, 1, 4, 3, 5)
    torch.testing.assert_close(last.readout_attention, batch.readout_attention[:, -1:], rtol=1e-5, atol=1e-6)
    for i in range(3):
        alone = analyse(model, pixels[i : i + 1], keep_attentions=True)
        one = batch.image(i, (0.0, 0.0, 40.0, 24.0))
        torch.testing.assert_close(one.readout_attention, alone.readout_attention[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(one.rollout, alone.rollout[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(one.token_norms, alone.token_norms[0], rtol=1e-5, atol=1e-5)
        for statistic in HEAD_STATISTICS:
            torch.testing.assert_close(
                one.statistics[statistic.name], alone.statistics[statistic.name][0], rtol=1e-5, atol=1e-6
            )
        np.testing.assert_allclose(one.probabilities, alone.probabilities[0].numpy(), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(batch.pooled[i], alone.pooled[0], rtol=1e-5, atol=1e-6)
    # the kept blocks' outputs are the model's hidden states after them
    hidden = model(pixels, output_hidden_states=True).hidden_states
    assert sorted(batch.tokens) == [0, 2]
    torch.testing.assert_close(batch.tokens[2], hidden[2].detach(), rtol=1e-4, atol=1e-4)
