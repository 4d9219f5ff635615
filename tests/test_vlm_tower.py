"""A VLM's vision tower as a vitviz ViT (vitviz/vlm/tower.py): the converted tower reproduces transformers' tower
on the processor's own pixel values, carries the processor's base-image preprocessing, and Qwen's towers (and an
Idefics3 tower whose positions vitviz cannot follow) are refused by name."""

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_vlms import make_tiny_vlm, tiny_vlm_folder

from vitviz.model import ViT
from vitviz.vlm import VLMError, load_vlm
from vitviz.vlm.tower import tower_module, vision_tower

READABLE = ["llava", "llava_next", "llava_onevision", "paligemma", "paligemma2", "idefics3", "smolvlm", "gemma3"]
QWEN = {"qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL", "qwen3_vl": "Qwen3-VL"}
TOLERANCE = 1e-5


def photo() -> Image.Image:
    """A 90 x 130 photo: smooth gradients with a bright square, so the tiled families split it."""
    rows, cols = np.mgrid[0:90, 0:130]
    pixels = np.stack([rows * 2.5, cols * 1.9, (rows + cols) % 256], axis=-1)
    pixels[20:50, 60:100] = [250, 240, 30]
    return Image.fromarray(pixels.astype(np.uint8))


def base_pixels(vlm, image: Image.Image) -> torch.Tensor:
    """The processor's pixel values of the base image: the first (LLaVA-NeXT's, OneVision's base image before its
    tiles) or, for Idefics3 / SmolVLM, the last (the global image after the split tiles)."""
    pixels = vlm.processor.image_processor(images=[image], return_tensors="pt")["pixel_values"]
    pixels = pixels.reshape(-1, *pixels.shape[-3:])
    return pixels[-1:] if vlm.model_type in ("idefics3", "smolvlm") else pixels[:1]


@pytest.mark.parametrize("family", READABLE)
def test_the_tower_reproduces_every_hidden_state_and_attention(family, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(family, tmp_path_factory))
    vit = vision_tower(vlm)
    assert isinstance(vit, ViT) and vit.config.num_classes == 0 and vit.head is None
    reference = tower_module(vlm.model, vlm.model.config.vision_config)
    reference.config._attn_implementation = "eager"  # this test's own copy of the model: attentions come back
    pixels = base_pixels(vlm, photo())
    with torch.inference_mode():
        ours = vit(pixels, output_attentions=True, output_hidden_states=True)
        theirs = reference(pixel_values=pixels, output_attentions=True, output_hidden_states=True)
    layers = vlm.model.config.vision_config.num_hidden_layers
    assert len(ours.hidden_states) == len(ours.attentions) == len(theirs.attentions) == layers
    assert len(theirs.hidden_states) == layers + 1  # the embeddings first
    for index in range(layers):
        assert (ours.hidden_states[index] - theirs.hidden_states[index + 1]).abs().max() <= TOLERANCE, index
        assert (ours.attentions[index] - theirs.attentions[index]).abs().max() <= TOLERANCE, index
    if vit.config.class_token:  # CLIP: Hugging Face normalises the pooled [CLS] only
        assert (ours.pooled - theirs.pooler_output).abs().max() <= TOLERANCE
    else:  # SigLIP and Idefics3: every token through the final norm, as the VLM reads them
        assert (ours.last_hidden_state - theirs.last_hidden_state).abs().max() <= TOLERANCE


@pytest.mark.parametrize("family", READABLE)
def test_the_tower_preprocesses_as_the_processor_does_the_base_image(family, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(family, tmp_path_factory))
    vit = vlm.vision_tower()
    image = photo()
    expected = base_pixels(vlm, image)[0]
    ours = vit.transform(image)
    assert ours.shape == expected.shape
    difference = (ours - expected).abs()
    std = torch.tensor(vit.transform.std).reshape(3, 1, 1)
    levels = (difference * std * 255).flatten()  # in 8-bit levels of the photo
    if family in ("idefics3", "smolvlm"):  # three Lanczos resizes, vitviz's one bicubic: close, not equal
        assert levels.mean() <= 1 and levels.quantile(0.99) <= 6
    else:  # the same resize; PIL's and torchvision's resampling round apart by a level here and there
        assert levels.mean() <= 0.1 and levels.max() <= 2.5


@pytest.mark.parametrize("family", QWEN)
def test_qwen_towers_are_refused_by_name(family, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(family, tmp_path_factory))
    with pytest.raises(VLMError, match=rf"{QWEN[family]}'s vision tower cannot be opened as a vitviz ViT: .*merger"):
        vlm.vision_tower()


def test_an_idefics3_tower_whose_positions_repeat_is_refused(tmp_path):
    # 25 x 25 patches per tile: Idefics3's bucketing gives one row of the position table twice, which vitviz's
    # SigLIP (the table's rows in order) cannot reproduce
    folder = make_tiny_vlm("idefics3", tmp_path, vision_config=dict(image_size=100, patch_size=4), scale_factor=5)
    vlm = load_vlm(folder)
    with pytest.raises(VLMError, match=r"25 x 25 patches .* not the table's rows in order"):
        vision_tower(vlm)


def test_the_tower_is_a_copy_in_float32_of_a_bf16_model(tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder("paligemma", tmp_path_factory), precision="bf16")
    vit = vision_tower(vlm)
    assert next(vit.parameters()).dtype == torch.float32
    reference = tower_module(vlm.model, vlm.model.config.vision_config)
    weight = reference.embeddings.patch_embedding.weight
    assert torch.equal(vit.patch_embed.proj.weight, weight.float())
    with torch.no_grad():
        vit.patch_embed.proj.weight.zero_()
    assert weight.abs().max() > 0  # the VLM's own weights untouched


@pytest.mark.parametrize("family", ["llava", "gemma3"])
def test_vitviz_maps_run_on_the_tower(family, tmp_path_factory):
    from vitviz.explain import method_maps

    vlm = load_vlm(tiny_vlm_folder(family, tmp_path_factory))
    vit = vlm.vision_tower()
    pixels = vit.transform(photo())[None]
    methods = ["rollout", "cls"] if vit.config.class_token else ["rollout"]  # SigLIP has no [CLS]
    maps = method_maps(vit, pixels, methods)
    for method in methods:
        assert maps.maps[method].shape == vit.config.grid_size and torch.isfinite(maps.maps[method]).all()
