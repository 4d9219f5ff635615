"""vitviz.video_clips makes the clip each family's own video processor in transformers makes (VideoMAE, ViViT,
TimeSformer; tiny random models built with transformers' classes): the same frames sampled, cropped, rescaled and
normalised; a save_pretrained folder's processor file overrides the family's defaults; an image model is refused in
one line."""

import json

import numpy as np
import pytest
import torch
import transformers as hf
from test_import_video import convert, hf_model
from tiny_models import build_tiny_vit
from tiny_videos import moving_clip

import vitviz
from vitviz.video import VideoError
from vitviz.video_clips import clip_preprocessing, clip_tensor, model_frames

PROCESSORS = {
    "videomae": hf.VideoMAEVideoProcessor,
    "vivit": hf.VivitVideoProcessor,
    "timesformer": hf.TimesformerVideoProcessor,
}


def tiny(family: str):
    """A tiny random model of ``family`` read into vitviz (TimeSformer: 4 frames of 32 px, 8-pixel patches)."""
    if family != "timesformer":
        return convert(hf_model(family))
    torch.manual_seed(0)
    sizes = dict(image_size=32, patch_size=8, num_frames=4, hidden_size=32, num_hidden_layers=2)
    config = hf.TimesformerConfig(**sizes, num_attention_heads=4, intermediate_size=64, num_labels=5)
    source = hf.TimesformerForVideoClassification(config).eval()
    return convert(source)


@pytest.mark.parametrize("family", PROCESSORS)
def test_the_clip_is_what_the_family_video_processor_makes(family):
    model = tiny(family)
    data = moving_clip(12)
    preprocessing = clip_preprocessing(model)
    assert preprocessing.crop == (32, 32)
    ours = clip_tensor(model, model_frames(model, data))
    # the processor's defaults at this model's size (ViViT: shorter side 256/224 of the crop), given the frames
    # load_video samples at that shorter side, so that its own resize changes nothing
    edge = preprocessing.shortest_edge
    processor = PROCESSORS[family](size={"shortest_edge": edge}, crop_size={"height": 32, "width": 32})
    frames = vitviz.load_video(data, frames=4, size=edge)
    theirs = processor([frames], return_tensors="pt")["pixel_values"]
    assert ours.shape == theirs.shape == (1, 4, 3, 32, 32)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_a_folder_processor_file_overrides_the_defaults(tmp_path):
    model = convert(hf_model("videomae"))
    assert clip_preprocessing(model).mean == (0.5, 0.5, 0.5)  # transformers' VideoMAEVideoProcessor's default
    settings = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "size": {"shortest_edge": 40}}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(settings))
    found = clip_preprocessing(model, tmp_path)
    assert found.mean == (0.485, 0.456, 0.406) and found.shortest_edge == 40 and found.crop == (32, 32)
    frames = model_frames(model, moving_clip(12), found)
    clip = clip_tensor(model, frames, found)
    expected = (frames / 255.0 - np.array(settings["image_mean"])) / np.array(settings["image_std"])
    np.testing.assert_allclose(clip[0].permute(0, 2, 3, 1).numpy(), expected, atol=1e-5)


def test_an_image_model_is_refused_in_one_line():
    with pytest.raises(VideoError, match="is an image model: it reads photos, not videos"):
        model_frames(build_tiny_vit("cls"), moving_clip(12))
