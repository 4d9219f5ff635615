"""VideoMAE and ViViT from transformers reproduce their sources: logits, every block's attention and the save_pretrained
folder (tiny random models built with transformers' own config and model classes, every weight moved off its initial
value, no downloads): 32-pixel frames, 8-pixel patches, 4 frames in tubelets of 2, so 2 x 4 x 4 tubelet tokens.
"""

import numpy as np
import pytest
import torch
import transformers as hf

import vitviz
from vitviz import ModelLoadError
from vitviz.loading.sources.huggingface import from_huggingface
from vitviz.loading.sources.huggingface_video import DEFAULTS

ATOL = 1e-4  # the bound for logits and attentions, fp32
TINY = dict(
    image_size=32, num_frames=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
)
FAMILIES = {  # model_type: config class, classifier, backbone, the family's size fields
    "videomae": (hf.VideoMAEConfig, hf.VideoMAEForVideoClassification, hf.VideoMAEModel, dict(patch_size=8)),
    "vivit": (hf.VivitConfig, hf.VivitForVideoClassification, hf.VivitModel, dict(tubelet_size=[2, 8, 8])),
}
SIZES = dict(tubelet=2, patch=8, frames=4)


def hf_model(family: str, backbone: bool = False, **overrides) -> torch.nn.Module:
    """A tiny transformers model, every parameter moved by Gaussian noise (seeded): the zero [CLS] and positions,
    the biases, the norms and the head all matter."""
    config_class, classifier, base, sizes = FAMILIES[family]
    torch.manual_seed(0)
    config = config_class(**(TINY | sizes | dict(num_labels=5, attn_implementation="eager") | overrides))
    model = (base if backbone else classifier)(config)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.3)
    return model.eval()


def clips(batch: int = 2) -> torch.Tensor:
    torch.manual_seed(2)
    return torch.randn(batch, SIZES["frames"], 3, 32, 32)  # (B, frames, C, H, W), as the video processors give


def convert(model: torch.nn.Module) -> vitviz.ViT:
    return from_huggingface(model.state_dict(), model.config.to_dict())


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_every_attention_match_transformers(family):
    source = hf_model(family)
    x = clips()
    with torch.no_grad():
        expected = source(x, output_attentions=True)
        out = convert(source)(x, output_attentions=True)
    torch.testing.assert_close(out.logits, expected.logits, atol=ATOL, rtol=0)
    assert len(out.attentions) == len(expected.attentions) == 2
    for ours, theirs in zip(out.attentions, expected.attentions, strict=True):
        assert ours.shape == theirs.shape  # (B, heads, T, T), T = [CLS] (ViViT) + 2 x 4 x 4
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_backbones_match_transformers_last_hidden_state(family):
    """VideoMAEModel (mean pooling: no final norm) and VivitModel (its final LayerNorm; the tanh pooler left out)."""
    source = hf_model(family, backbone=True)
    x = clips()
    with torch.no_grad():
        expected = source(x).last_hidden_state
        out = convert(source)(x)
    assert out.logits is None
    torch.testing.assert_close(out.last_hidden_state, expected, atol=ATOL, rtol=0)


def test_videomae_without_mean_pooling_and_without_biases():
    """use_mean_pooling=False: VideoMAEModel norms every token (config eps); qv_bias=False: no q/k/v biases."""
    source = hf_model("videomae", backbone=True, use_mean_pooling=False, qv_bias=False)
    x = clips()
    with torch.no_grad():
        expected = source(x).last_hidden_state
        model = convert(source)
        out = model(x)
    assert not model.config.qkv_bias and not model.config.fc_norm
    torch.testing.assert_close(out.last_hidden_state, expected, atol=ATOL, rtol=0)
    with pytest.raises(ModelLoadError, match="use_mean_pooling=False"):
        convert(hf_model("videomae", use_mean_pooling=False))


@pytest.mark.parametrize("family", FAMILIES)
def test_save_pretrained_folder_loads_to_the_same_logits(family, tmp_path):
    source = hf_model(family)
    source.config.id2label = {i: f"action {i}" for i in range(5)}
    source.save_pretrained(tmp_path)
    model = vitviz.load_model(str(tmp_path))
    x = clips()
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, source(x).logits, atol=ATOL, rtol=0)
    assert model.class_names[:2] == ["action 0", "action 1"]
    assert model.transform is None  # clips come from the family's video processor, not an image transform


@pytest.mark.parametrize("family", FAMILIES)
def test_layout_is_one_token_per_tubelet(family):
    model = convert(hf_model(family))
    out = model(clips(1))
    layout = out.layout
    prefix = 1 if family == "vivit" else 0
    assert out.grid_size == layout.grid == (2, 4, 4)
    assert layout.num_frames == 4 and len(layout) == prefix + 32
    assert out.attentions is None and out.readout.shape == (1, prefix + 32)
    # time-major: token prefix + t * 16 + r * 4 + c covers frames (2t, 2t + 1) and pixels [8c, 8c + 8) x [8r, 8r + 8)
    t, r, c = 1, 2, 3
    index = prefix + t * 16 + r * 4 + c
    assert layout.frames[index].tolist() == [2, 3]
    assert layout.boxes[index].tolist() == [24, 16, 32, 24]
    assert layout.frames[prefix:, 0].tolist() == [0] * 16 + [2] * 16
    assert (layout.frames[prefix:, 1] - layout.frames[prefix:, 0] == 1).all()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("frame", [0, 3])
def test_a_region_painted_in_one_frame_changes_exactly_the_tubelets_that_hold_it(family, frame):
    """Paint pixels (y 10..21, x 3..12) of one frame: the patch embeddings that change are those of the tubelets
    whose boxes and frames hold a painted pixel, and no others."""
    model = convert(hf_model(family))
    x = clips(1)
    painted = x.clone()
    painted[0, frame, :, 10:22, 3:13] = 5.0
    with torch.no_grad():
        changed = (model.patch_embed(painted) - model.patch_embed(x)).abs().amax(dim=-1)[0] > 1e-5  # (N,)
    layout = model(x).layout
    boxes, frames = layout.boxes[layout.patch_indices], layout.frames[layout.patch_indices]
    holds = (
        (frames[:, 0] <= frame)
        & (frame <= frames[:, 1])
        & (boxes[:, 0] < 13)
        & (boxes[:, 2] > 3)
        & (boxes[:, 1] < 22)
        & (boxes[:, 3] > 10)
    )
    assert holds.sum() == 4  # 2 rows x 2 columns of patches, in the one tubelet that holds the frame
    np.testing.assert_array_equal(changed.numpy(), holds)


@pytest.mark.parametrize("family", FAMILIES)
def test_an_image_is_refused_with_the_frames_the_model_needs(family):
    """The families' video processors read one image as a clip of one frame, which their models cannot read (their
    positions are for num_frames): refused with one line naming the count, not repeated."""
    model = convert(hf_model(family))
    with pytest.raises(ValueError, match=r"needs clips of 4 frames, \(B, 4, 3, H, W\).*give it 4 frames"):
        model(torch.randn(1, 3, 32, 32))


def test_a_video_model_names_the_clip_it_needs():
    model = convert(hf_model("videomae"))
    with pytest.raises(ValueError, match=r"clips of shape \(B, 4, 3, H, W\)"):
        model(torch.randn(1, 2, 3, 32, 32))
    with pytest.raises(ValueError, match="4 frames of 32x32"):
        model(torch.randn(1, 4, 3, 48, 48))


@pytest.mark.parametrize("family", FAMILIES)
def test_defaults_match_transformers_config_classes(family):
    config = FAMILIES[family][0]()
    for key, value in DEFAULTS[family].items():
        expected = getattr(config, key)
        assert (list(expected) if isinstance(expected, (list, tuple)) else expected) == value, key


def test_images_keep_their_layout():
    layout = vitviz.layout.grid_layout(("cls",), (2, 3), 8)
    assert layout.grid == (1, 2, 3) and layout.frames[1:].tolist() == [[0, 0]] * 6
    video = vitviz.layout.grid_layout((), (2, 3), 8, 4, tubelet=2)
    assert video.grid == (2, 2, 3) and video.num_frames == 4
    assert video.frames.tolist() == [[0, 1]] * 6 + [[2, 3]] * 6
    with pytest.raises(ValueError, match="tubelets of 2"):
        vitviz.layout.grid_layout((), (2, 3), 8, 3, tubelet=2)
