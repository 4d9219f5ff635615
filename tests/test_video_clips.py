"""A video model carries its own clip transform (``model.clip_transform``), read by vitviz.load_model from its video
processor's file, from a folder or an offline Hub cache; vitviz.video_clips makes the clip each family's own video
processor in transformers makes (VideoMAE, ViViT, TimeSformer, V-JEPA 2; tiny random models and processors saved
with transformers' own classes, with settings other than their defaults): the same frames scaled, cropped, rescaled
and normalised, to 1e-5. Without a processor file the family's defaults are used, with a note; a file transformers
would not read, frames that are not uint8 (F, H, W, 3) and an image model are refused in one line. A clip's
prediction is transformers' own."""

import json

import numpy as np
import pytest
import torch
import transformers as hf
from hostile_videos import squares
from hub_cache import cached_snapshot
from test_import_video import convert, hf_model
from test_import_vjepa2 import hf_model as vjepa2_model
from tiny_models import build_tiny_vit
from tiny_videos import moving_clip

import vitviz
from vitviz.video import VideoError
from vitviz.video_clips import (
    ClipPreprocessing,
    clip_preprocessing,
    clip_probabilities,
    clip_tensor,
    family_preprocessing,
    model_frames,
)

ATOL = 1e-5
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PROCESSORS = {
    "videomae": hf.VideoMAEVideoProcessor,
    "vivit": hf.VivitVideoProcessor,
    "timesformer": hf.TimesformerVideoProcessor,
    "vjepa2": hf.VJEPA2VideoProcessor,
}
SETTINGS = {  # each family's processor with settings other than its defaults, for 32-pixel models
    # the Hub's VideoMAE checkpoints: ImageNet's mean and std, where the processor's default is 0.5
    "videomae": dict(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}, image_mean=IMAGENET_MEAN,
                     image_std=IMAGENET_STD),
    "vivit": dict(size={"shortest_edge": 48}, crop_size={"height": 32, "width": 32}, resample=3,
                  image_mean=[0.45, 0.4, 0.35], image_std=[0.25, 0.3, 0.35]),
    "timesformer": dict(size={"height": 36, "width": 44}, crop_size={"height": 32, "width": 32}, resample=0,
                        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]),
    "vjepa2": dict(crop_size=32, image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.3, 0.4]),  # size: 256/224 of it
}  # fmt: skip


def source_model(family: str) -> torch.nn.Module:
    """A tiny random transformers classifier of ``family`` (32-pixel frames, 4 frames, 8-pixel patches)."""
    if family == "vjepa2":
        return vjepa2_model()
    if family != "timesformer":
        return hf_model(family)
    torch.manual_seed(0)
    sizes = dict(image_size=32, patch_size=8, num_frames=4, hidden_size=32, num_hidden_layers=2)
    config = hf.TimesformerConfig(**sizes, num_attention_heads=4, intermediate_size=64, num_labels=5)
    return hf.TimesformerForVideoClassification(config).eval()


def saved(folder, family: str, processor: bool = True):
    """``folder`` holding a tiny ``family`` model and (``processor``) its video processor with SETTINGS."""
    source_model(family).save_pretrained(folder)
    if processor:
        PROCESSORS[family](**SETTINGS[family]).save_pretrained(folder)
    return folder


def reference(folder, family: str, frames: np.ndarray) -> torch.Tensor:
    """transformers' clip (1, F, 3, H, W): the family's video processor read from ``folder``, given ``frames``."""
    output = PROCESSORS[family].from_pretrained(folder)([frames], return_tensors="pt")
    return output["pixel_values_videos" if family == "vjepa2" else "pixel_values"]


def clip_data() -> bytes:
    """A 70 x 60 clip (a square moving right): every family's processor scales it, down or up."""
    return squares(12, height=60, side=20, step=3)


@pytest.mark.parametrize("family", PROCESSORS)
def test_a_folder_model_carries_its_processor_file_and_makes_transformers_clip(tmp_path, family):
    model = vitviz.load_model(str(saved(tmp_path, family)))
    assert model.transform is None and isinstance(model.clip_transform, ClipPreprocessing)
    assert "video_preprocessor_config.json" in model.clip_transform.note
    assert model.clip_transform != family_preprocessing(model)  # the file's settings, not the defaults
    data = clip_data()
    frames = vitviz.load_video(data, frames=4)
    theirs = reference(tmp_path, family, frames)
    assert theirs.shape == (1, 4, 3, 32, 32)
    torch.testing.assert_close(model.clip_transform(frames)[None], theirs, atol=ATOL, rtol=0)
    ours = clip_tensor(model, model_frames(model, data))  # what `vitviz explain` and the Video page compute
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("family", "name"), [("videomae", "preprocessor_config.json"), ("vjepa2", None)])
def test_a_hub_model_reads_its_processor_file_from_the_cache_offline(offline, family, name):
    """VideoMAE as the Hub keeps it: an image processor's preprocessor_config.json stating ImageNet's statistics;
    V-JEPA 2 with the video_preprocessor_config.json its processor saves."""
    snapshot = saved(cached_snapshot(offline, f"someone/tiny-{family}"), family, processor=name is None)
    if name:
        settings = SETTINGS[family] | dict(image_processor_type="VideoMAEImageProcessor", do_center_crop=True)
        (snapshot / name).write_text(json.dumps(settings | dict(resample=2, rescale_factor=1 / 255)))
    model = vitviz.load_model(f"hf:someone/tiny-{family}")
    assert (name or "video_preprocessor_config.json") in model.clip_transform.note
    if family == "videomae":
        assert model.clip_transform.mean == tuple(IMAGENET_MEAN) and model.clip_transform.resize == 40
    data = clip_data()
    theirs = reference(snapshot, family, vitviz.load_video(data, frames=4))
    torch.testing.assert_close(clip_tensor(model, model_frames(model, data)), theirs, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", PROCESSORS)
def test_without_a_processor_file_the_family_defaults_come_with_a_note(tmp_path, family):
    model = vitviz.load_model(str(saved(tmp_path, family, processor=False)))
    found = model.clip_transform
    assert found == family_preprocessing(model, family) and found.crop == (32, 32)
    assert "defaults in transformers" in found.note and "no video processor file" in found.note
    # transformers' processor with its defaults at this model's size (ViViT, V-JEPA 2: shorter side 256/224 of it)
    sizes = dict(crop_size=32) if family == "vjepa2" else dict(size={"shortest_edge": found.resize}, crop_size=32)
    data = clip_data()
    processor = PROCESSORS[family](**sizes)
    output = processor([vitviz.load_video(data, frames=4)], return_tensors="pt")
    theirs = output["pixel_values_videos" if family == "vjepa2" else "pixel_values"]
    torch.testing.assert_close(clip_tensor(model, model_frames(model, data)), theirs, atol=ATOL, rtol=0)


def test_processor_config_json_video_processor_comes_first_as_in_transformers(tmp_path):
    saved(tmp_path, "videomae")  # video_preprocessor_config.json: SETTINGS
    nested = {"video_processor": SETTINGS["videomae"] | {"size": {"shortest_edge": 44}}}
    (tmp_path / "processor_config.json").write_text(json.dumps(nested))
    model = vitviz.load_model(str(tmp_path))
    assert model.clip_transform.resize == 44 and "processor_config.json (video_processor)" in model.clip_transform.note
    frames = vitviz.load_video(clip_data(), frames=4)
    theirs = reference(tmp_path, "videomae", frames)
    torch.testing.assert_close(model.clip_transform(frames)[None], theirs, atol=ATOL, rtol=0)


def test_a_model_without_a_clip_transform_gets_its_family_defaults():
    model = convert(hf_model("vivit"))  # converted by hand: no loader, no processor file
    found = clip_preprocessing(model)
    assert found == family_preprocessing(model, "vivit") and found.offset and found.resize == 37
    assert "carries no clip transform" in found.note
    frames = model_frames(model, moving_clip(12))
    assert frames.shape == (4, 32, 32, 3) and frames.dtype == np.uint8


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"size": {"longest_edge": 40}}, "size must be a side, {shortest_edge} or {height, width} in pixels"),
        ({"crop_size": "big"}, "crop_size must be a side or {height, width} in pixels"),
        ({"resample": 1}, "resample must be one of"),
        ({"image_std": [0.5, 0.0, 0.5]}, "std must be 1 to 4 positive numbers"),
        ({"rescale_factor": "x"}, "rescale must be a positive number"),
    ],
)
def test_a_processor_file_transformers_would_not_read_is_refused_in_one_line(tmp_path, settings, message):
    saved(tmp_path, "videomae", processor=False)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(settings))
    with pytest.raises(vitviz.ModelLoadError, match="preprocessor_config.json") as error:
        vitviz.load_model(str(tmp_path))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_clip_too_large_at_full_size_is_read_at_the_processor_shorter_side(monkeypatch):
    model = convert(hf_model("videomae"))
    asked = []

    def load_video(source, frames, size=None):
        asked.append(size)
        if size is None:  # as load_video refuses 64 frames of 1024 x 1024
            raise VideoError("the frames would take 201 MB, above 200 MB: ask for fewer frames or a smaller size")
        return vitviz.load_video(source, frames=frames, size=size)

    monkeypatch.setattr("vitviz.video_clips.load_video", load_video)
    frames = model_frames(model, moving_clip(12))
    assert asked == [None, 32] and frames.shape == (4, 32, 32, 3)


def test_frames_that_are_not_uint8_rgb_are_refused_in_one_line():
    transform = ClipPreprocessing(32, (32, 32))
    with pytest.raises(ValueError, match=r"takes uint8 frames \(F, H, W, 3\), as load_video gives them; got float32"):
        transform(np.zeros((4, 32, 32, 3), np.float32))


def test_an_image_model_is_refused_in_one_line():
    with pytest.raises(VideoError, match="is an image model: it reads photos, not videos"):
        model_frames(build_tiny_vit("cls"), moving_clip(12))


def test_a_clips_probabilities_are_transformers_prediction_and_a_backbone_has_none():
    source = hf_model("videomae")
    model = convert(source)
    clip = clip_tensor(model, model_frames(model, moving_clip(12)))
    with torch.no_grad():
        theirs = torch.softmax(source(pixel_values=clip).logits[0], dim=-1).numpy()
    chances = clip_probabilities(model, clip)
    assert chances.dtype == np.float32 and chances.shape == theirs.shape
    np.testing.assert_allclose(chances, theirs, rtol=1e-4, atol=1e-6)
    given = torch.tensor([[0.0, 1.0, 2.0]])  # a map's pass gave the logits: no pass of its own
    np.testing.assert_allclose(clip_probabilities(model, clip, given), torch.softmax(given[0], -1).numpy(), atol=1e-7)
    backbone = convert(hf_model("videomae", backbone=True))
    assert clip_probabilities(backbone, clip).shape == (0,)
