"""Converted models reproduce torchvision and Hugging Face outputs (random weights, no downloads)."""

import json

import pytest
import torch
import torchvision
from safetensors.torch import load_file
from transformers import ViTConfig as HFViTConfig
from transformers import ViTForImageClassification, ViTModel

from vitviz.checkpoint import ModelLoadError
from vitviz.convert import from_huggingface, from_torchvision, load_huggingface_folder, read_safetensors

ATOL = 1e-4  # the bound for logits and attentions


def randomise_torchvision_head(model):
    # torchvision starts its head at zero, which would make every logit 0 and the comparison empty
    torch.manual_seed(1)
    torch.nn.init.normal_(model.heads.head.weight, std=0.05)
    torch.nn.init.normal_(model.heads.head.bias, std=0.05)
    return model.eval()


def test_full_size_vit_b_16_reproduces_torchvision_logits():
    torch.manual_seed(0)
    reference = randomise_torchvision_head(torchvision.models.vit_b_16())
    model = from_torchvision(reference)
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference(images)
        fused = model(images).logits
        explicit = model(images, output_attentions=True).logits
    assert expected.abs().max() > 0.1  # a meaningful comparison, not zeros against zeros
    assert (fused - expected).abs().max() <= ATOL
    assert (explicit - expected).abs().max() <= ATOL
    assert model.config.grid_size == (14, 14) and model.config.num_heads == 12


@pytest.mark.parametrize(
    "arch,size,patch,heads", [("vit_b_32", 64, 32, 12), ("vit_l_16", 32, 16, 16), ("vit_l_32", 64, 32, 16), ("vit_h_14", 28, 14, 16)]
)
def test_every_torchvision_vit_architecture_converts(arch, size, patch, heads):
    # full widths and depths; a small image keeps the forward cheap
    torch.manual_seed(0)
    reference = randomise_torchvision_head(torchvision.models.get_model(arch, image_size=size))
    model = from_torchvision(reference)
    assert (model.config.patch_size, model.config.num_heads) == (patch, heads)
    assert model.config.num_layers == len(reference.encoder.layers)
    images = torch.randn(1, 3, size, size)
    with torch.no_grad():
        assert (model(images, output_attentions=True).logits - reference(images)).abs().max() <= ATOL


def test_torchvision_conversion_refuses_other_models():
    with pytest.raises(TypeError, match="VisionTransformer"):
        from_torchvision(torch.nn.Linear(2, 2))


def hf_config(**overrides) -> HFViTConfig:
    values = dict(
        hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
        image_size=32, patch_size=8, num_labels=7, attn_implementation="eager",
    )  # fmt: skip
    values.update(overrides)
    config = HFViTConfig(**values)
    config.id2label = {i: f"label {i}" for i in range(config.num_labels)}
    return config


def random_hf_classifier(**overrides) -> ViTForImageClassification:
    torch.manual_seed(0)
    model = ViTForImageClassification(hf_config(**overrides)).eval()
    with torch.no_grad():  # every parameter random, so no mis-mapped weight can hide behind an init of 0 or 1
        for param in model.parameters():
            param.normal_(std=0.2)
    return model


@pytest.mark.parametrize("serialization", ["safetensors", "bin"])
def test_huggingface_folder_reproduces_logits_and_every_attention(tmp_path, serialization):
    reference = random_hf_classifier()
    reference.save_pretrained(tmp_path)
    if serialization == "bin":  # older folders on the Hub hold a pickled state dict instead
        torch.save(load_file(tmp_path / "model.safetensors"), tmp_path / "pytorch_model.bin")
        (tmp_path / "model.safetensors").unlink()
    model = load_huggingface_folder(tmp_path)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = reference(images, output_attentions=True)
        output = model(images, output_attentions=True)
    assert (output.logits - expected.logits).abs().max() <= ATOL
    assert len(output.attentions) == len(expected.attentions) == 3
    for ours, theirs in zip(output.attentions, expected.attentions):
        assert (ours - theirs).abs().max() <= ATOL
    assert model.class_names == [f"label {i}" for i in range(7)]
    assert model.config.layer_norm_eps == 1e-12


def test_huggingface_in_memory_names_and_no_qkv_bias():
    reference = random_hf_classifier(qkv_bias=False)
    model = from_huggingface(reference.state_dict(), reference.config.to_dict())
    assert model.blocks[0].attn.qkv.bias is None
    images = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert (model(images).logits - reference(images).logits).abs().max() <= ATOL


def test_huggingface_backbone_becomes_a_backbone(tmp_path):
    torch.manual_seed(0)
    reference = ViTModel(hf_config()).eval()
    reference.save_pretrained(tmp_path)
    model = load_huggingface_folder(tmp_path)
    assert model.config.num_classes == 0 and model.class_names == []
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = reference(images, output_attentions=True)
        output = model(images, output_attentions=True)
    assert output.logits is None
    assert (output.last_hidden_state - expected.last_hidden_state).abs().max() <= ATOL
    assert all((a - b).abs().max() <= ATOL for a, b in zip(output.attentions, expected.attentions))


def test_position_interpolation_matches_huggingface_on_a_non_square_image():
    reference = random_hf_classifier()
    model = from_huggingface(reference.state_dict(), reference.config.to_dict())
    images = torch.randn(1, 3, 24, 56)  # 3 x 7 patches from a 4 x 4 training grid
    with torch.no_grad():
        expected = reference(images, interpolate_pos_encoding=True, output_attentions=True)
        output = model(images, output_attentions=True)
    assert output.grid_size == (3, 7)
    assert (output.logits - expected.logits).abs().max() <= ATOL
    assert (output.attentions[-1] - expected.attentions[-1]).abs().max() <= ATOL


def test_safetensors_reader_matches_the_reference_library(tmp_path):
    random_hf_classifier().save_pretrained(tmp_path)
    ours, theirs = read_safetensors(tmp_path / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_preprocessor_config_is_honoured(tmp_path):
    random_hf_classifier().save_pretrained(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"size": {"height": 32, "width": 48}, "resample": 3, "image_mean": [0.1, 0.2, 0.3], "image_std": [1, 2, 3]})
    )
    transform = load_huggingface_folder(tmp_path).transform
    assert transform.resize == (32, 48) and transform.interpolation == "bicubic"
    assert transform.mean == (0.1, 0.2, 0.3) and transform.std == (1, 2, 3)


def test_unknown_weights_and_unsupported_models_are_named(tmp_path):
    reference = random_hf_classifier()
    state_dict = {**reference.state_dict(), "vit.encoder.extra.weight": torch.zeros(1)}
    with pytest.raises(ModelLoadError, match="encoder.extra.weight"):
        from_huggingface(state_dict, reference.config.to_dict())
    with pytest.raises(ModelLoadError, match="model_type 'deit'"):
        from_huggingface(reference.state_dict(), {**reference.config.to_dict(), "model_type": "deit"})
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_huggingface_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 20)
    (tmp_path / "config.json").write_text(json.dumps(reference.config.to_dict()))
    with pytest.raises(ModelLoadError, match="not a safetensors file"):
        load_huggingface_folder(tmp_path)


@pytest.mark.parametrize(
    "config_change,preprocessor,message",
    [
        ({"image_size": [224]}, None, "not a usable Hugging Face ViT folder|cannot describe"),
        ({}, {"size": {"longest_edge": 32}}, "not a usable Hugging Face ViT folder"),
        ({}, {"image_mean": None}, "not a usable Hugging Face ViT folder"),
    ],
)
def test_malformed_huggingface_folders_get_a_message(tmp_path, config_change, preprocessor, message):
    reference = random_hf_classifier()
    reference.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **config_change}))
    if preprocessor is not None:
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    with pytest.raises(ModelLoadError, match=message):
        load_huggingface_folder(tmp_path)
