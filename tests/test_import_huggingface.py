"""Hugging Face folders and state dicts reproduce their originals (random weights, no downloads)."""

import json

import pytest
import torch
import transformers as hf
from safetensors.torch import load_file
from tiny_models import SMALL_HF_VIT, tiny_hf_config
from transformers import ViTConfig as HFViTConfig
from transformers import ViTForImageClassification, ViTModel

from vitviz.loading import ModelLoadError, from_huggingface, load_huggingface_folder
from vitviz.loading.sources.huggingface import _FAMILIES
from vitviz.loading.sources.weights_files import read_safetensors

ATOL = 1e-4  # the bound for logits and attentions


def hf_config(**overrides) -> HFViTConfig:
    """tiny_models' Hugging Face ViT, 3 blocks of width 48 and 7 classes, eager attention (its weights are compared)."""
    return tiny_hf_config("vit", **(SMALL_HF_VIT | dict(num_labels=7) | overrides))


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
        json.dumps(
            {"size": {"height": 32, "width": 48}, "resample": 3, "image_mean": [0.1, 0.2, 0.3], "image_std": [1, 2, 3]}
        )
    )
    transform = load_huggingface_folder(tmp_path).transform
    assert transform.resize == (32, 48) and transform.interpolation == "bicubic"
    assert transform.mean == (0.1, 0.2, 0.3) and transform.std == (1, 2, 3)


def test_a_folder_without_preprocessor_config_gets_the_models_own_size_and_its_processors_statistics(tmp_path):
    # a 32 x 32 ViT is fed 32 x 32, not a fixed 224;
    # CLIP gets CLIPImageProcessor's mean and std, ViT ViTImageProcessor's
    from tiny_text import clip_folder

    random_hf_classifier().save_pretrained(tmp_path / "vit")
    vit = load_huggingface_folder(tmp_path / "vit").transform
    assert vit.resize == (32, 32) and vit.crop is None
    assert (vit.mean, vit.std) == (tuple(hf.ViTImageProcessor().image_mean), tuple(hf.ViTImageProcessor().image_std))
    clip = load_huggingface_folder(clip_folder(tmp_path / "clip")[2]).transform
    assert clip.resize == (32, 32)
    assert (clip.mean, clip.std) == (
        tuple(hf.CLIPImageProcessor().image_mean),
        tuple(hf.CLIPImageProcessor().image_std),
    )


def test_unknown_weights_and_unsupported_models_are_named(tmp_path):
    reference = random_hf_classifier()
    state_dict = {**reference.state_dict(), "vit.encoder.extra.weight": torch.zeros(1)}
    with pytest.raises(ModelLoadError, match="encoder.extra.weight"):
        from_huggingface(state_dict, reference.config.to_dict())
    with pytest.raises(
        ModelLoadError,
        match="model_type 'beit' is not supported; supported: aimv2, aimv2_vision_model, clip, clip_vision_model,",
    ):
        from_huggingface(reference.state_dict(), {**reference.config.to_dict(), "model_type": "beit"})
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


# ---- the other families: DeiT, DINOv2 (with and without registers), CLIP, SigLIP ----
# (tiny_models.tiny_hf_config: their sizes, eager attention for output_attentions)

LABELS = dict(num_labels=5)  # named "label i" by tiny_hf_config
REGISTERS = 3
# Weights this large make attention far from uniform and MLP inputs large enough that exact GELU and
# its tanh approximation differ by more than the tolerance (at std 0.2 attention is nearly flat).
STD = 0.5
OUTPUTS = {
    "logits": ("logits", "logits"),
    "hidden": ("last_hidden_state", "last_hidden_state"),
    "pooled": ("pooled", "pooler_output"),
}  # vitviz's name, Hugging Face's

# name -> (builder, what vitviz is compared on besides the attentions: "logits", "hidden" (every
# normalised token, for DeiT and DINOv2 backbones) or "pooled" (CLIP and SigLIP's pooler_output))
FAMILY_MODELS = {
    "deit": (lambda: hf.DeiTModel(tiny_hf_config("deit")), "hidden"),
    "deit-classifier": (lambda: hf.DeiTForImageClassification(tiny_hf_config("deit", **LABELS)), "logits"),
    "deit-teacher": (lambda: hf.DeiTForImageClassificationWithTeacher(tiny_hf_config("deit", **LABELS)), "logits"),
    "dinov2": (lambda: hf.Dinov2Model(tiny_hf_config("dinov2")), "hidden"),
    "dinov2-classifier": (lambda: hf.Dinov2ForImageClassification(tiny_hf_config("dinov2", **LABELS)), "logits"),
    "dinov2_with_registers": (
        lambda: hf.Dinov2WithRegistersModel(tiny_hf_config("dinov2_with_registers", num_register_tokens=REGISTERS)),
        "hidden",
    ),
    "dinov2_with_registers-classifier": (
        lambda: hf.Dinov2WithRegistersForImageClassification(
            tiny_hf_config("dinov2_with_registers", **LABELS, num_register_tokens=REGISTERS)
        ),
        "logits",
    ),
    "clip_vision_model": (lambda: hf.CLIPVisionModel(tiny_hf_config("clip_vision_model")), "pooled"),
    "clip_vision_model-gelu-projection": (
        lambda: hf.CLIPVisionModelWithProjection(
            tiny_hf_config("clip_vision_model", hidden_act="gelu", projection_dim=16)
        ),
        "pooled",
    ),
    "clip": (lambda: hf.CLIPModel(tiny_hf_config("clip", projection_dim=16)), "pooled"),
    "siglip_vision_model": (lambda: hf.SiglipVisionModel(tiny_hf_config("siglip_vision_model")), "pooled"),
    "siglip_vision_model-headless": (  # the towers of PaliGemma, Gemma 3, LLaVA-OneVision
        lambda: hf.SiglipVisionModel(tiny_hf_config("siglip_vision_model", vision_use_head=False)),
        "hidden",
    ),
    "siglip": (lambda: hf.SiglipModel(tiny_hf_config("siglip")), "pooled"),
}


def random_family_model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = FAMILY_MODELS[name][0]().eval()
    with torch.no_grad():  # every parameter random: LayerScale, biases, probe and heads all matter
        for param in model.parameters():
            param.normal_(std=STD)
    return model


def difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """Largest difference, relative where the values are large (SigLIP's pooled vectors reach about 40 here)."""
    return ((ours - theirs).abs().max() / theirs.abs().max().clamp(min=1.0)).item()


def compare(model, reference, kind: str, images: torch.Tensor) -> dict[str, float]:
    """vitviz against Hugging Face on these images: {"output": ..., "attention": ..., "pool attention": ...}."""
    vision = getattr(reference, "vision_model", reference)  # CLIPModel, SiglipModel: their vision tower
    grid = (images.shape[-2] // 8, images.shape[-1] // 8)
    dinov2 = "dinov2" in type(vision).__name__.lower()  # always interpolates; the others only when asked
    interpolate = {} if grid == (4, 4) or dinov2 else {"interpolate_pos_encoding": True}
    with torch.no_grad():
        theirs = vision(images, output_attentions=True, **interpolate)
        ours = model(images, output_attentions=True)
        ours_name, theirs_name = OUTPUTS[kind]
        diffs = {"output": difference(getattr(ours, ours_name), getattr(theirs, theirs_name))}
        assert ours.grid_size == grid and len(ours.attentions) == len(theirs.attentions) == 3
        diffs["attention"] = max(difference(a, b) for a, b in zip(ours.attentions, theirs.attentions))
        if hasattr(vision, "head") and hasattr(vision.head, "probe"):  # SigLIP: the pooling head's own attention
            probe = vision.head.probe.expand(len(images), -1, -1)
            tokens = theirs.last_hidden_state
            _, weights = vision.head.attention(probe, tokens, tokens, need_weights=True, average_attn_weights=False)
            diffs["pool attention"] = difference(ours.pool_attention, weights[:, :, 0])
    return diffs


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_every_family_reproduces_outputs_and_attentions(tmp_path, name):
    reference = random_family_model(name)
    reference.save_pretrained(tmp_path)
    model = load_huggingface_folder(tmp_path)
    kind = FAMILY_MODELS[name][1]
    assert model.class_names == ([f"label {i}" for i in range(5)] if kind == "logits" else [])
    assert (model.config.num_classes == 0) == (kind != "logits")
    torch.manual_seed(1)
    for images in (torch.randn(2, 3, 32, 32), torch.randn(1, 3, 24, 56)):  # 4 x 4 patches, then 3 x 7
        diffs = compare(model, reference, kind, images)
        assert all(diff <= ATOL for diff in diffs.values()), diffs


def test_in_memory_state_dicts_of_transformers_5_convert_too():
    for name in ("deit-teacher", "dinov2_with_registers-classifier", "clip", "siglip"):
        reference = random_family_model(name)
        model = from_huggingface(reference.state_dict(), reference.config.to_dict())
        diffs = compare(model, reference, FAMILY_MODELS[name][1], torch.randn(1, 3, 32, 32))
        assert all(diff <= ATOL for diff in diffs.values()), (name, diffs)


def test_registers_become_prefix_tokens_and_cls_takes_its_position():
    reference = random_family_model("dinov2_with_registers-classifier")
    model = from_huggingface(reference.state_dict(), reference.config.to_dict())
    embeddings = reference.dinov2_with_registers.embeddings
    assert model.config.num_prefix_tokens == 1 + REGISTERS and model.config.pos_embed_antialias
    assert torch.equal(model.register_tokens, embeddings.register_tokens)
    assert torch.equal(model.cls_token, embeddings.cls_token + embeddings.position_embeddings[:, :1])
    assert torch.equal(model.pos_embed, embeddings.position_embeddings[:, 1:])  # the patches' positions only
    output = model(torch.randn(1, 3, 32, 32))
    assert output.num_prefix_tokens == 1 + REGISTERS
    assert output.readout[0, 1 : 1 + REGISTERS].abs().max() == 0  # the classifier reads [CLS] and the patches


def test_families_configure_what_their_originals_do():
    def load(name):
        reference = random_family_model(name)
        return from_huggingface(reference.state_dict(), reference.config.to_dict()).config

    deit, teacher, dinov2 = load("deit-classifier"), load("deit-teacher"), load("dinov2-classifier")
    assert deit.distillation_token and not deit.distillation_head and teacher.distillation_head
    assert dinov2.pooling == "cls+mean" and dinov2.layer_scale and not dinov2.pos_embed_antialias
    clip, siglip = load("clip"), load("siglip")
    assert clip.norm_pre and clip.activation == "quick_gelu" and clip.layer_norm_eps == 1e-5
    assert not siglip.class_token and siglip.pooling == "map" and siglip.activation == "gelu_tanh"
    assert load("siglip_vision_model-headless").pooling == "mean"


@pytest.mark.parametrize(
    "model_type,config_class",
    [
        ("vit", hf.ViTConfig),
        ("deit", hf.DeiTConfig),
        ("dinov2", hf.Dinov2Config),
        ("dinov2_with_registers", hf.Dinov2WithRegistersConfig),
        ("clip_vision_model", hf.CLIPVisionConfig),
        ("siglip_vision_model", hf.SiglipVisionConfig),
    ],
)
def test_defaults_for_short_config_files_are_transformers_own(model_type, config_class):
    reference = config_class()
    assert {key: getattr(reference, key) for key in _FAMILIES[model_type].defaults} == _FAMILIES[model_type].defaults


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: hf.Dinov2Model(tiny_hf_config("dinov2", use_swiglu_ffn=True)), "SwiGLU"),
        (
            lambda: hf.CLIPForImageClassification(tiny_hf_config("clip", **LABELS)),
            "CLIPForImageClassification is not supported",
        ),
        (
            lambda: hf.SiglipForImageClassification(tiny_hf_config("siglip", **LABELS)),
            "SiglipForImageClassification is not supported",
        ),
        (lambda: hf.DeiTModel(tiny_hf_config("deit", hidden_act="relu")), "hidden_act 'relu' is not supported"),
    ],
)
def test_what_vitviz_cannot_express_is_refused_by_name(tmp_path, build, message):
    torch.manual_seed(0)
    build().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=message):
        load_huggingface_folder(tmp_path)


def test_malformed_image_text_configs_get_a_message():
    reference = random_family_model("clip")
    with pytest.raises(ModelLoadError, match="cannot describe"):
        from_huggingface(reference.state_dict(), {"model_type": "clip", "vision_config": "not a dict"})
    with pytest.raises(ModelLoadError, match="does not match its config"):  # the defaults: 768 wide, patch 32
        from_huggingface(reference.state_dict(), {"model_type": "clip"})


@pytest.mark.parametrize(
    "processor,resize,crop",
    [
        (lambda: hf.CLIPImageProcessor(), 224, (224, 224)),  # shorter side to 224, then the centre 224 x 224
        (lambda: hf.DeiTImageProcessor(), (256, 256), (224, 224)),
        (lambda: hf.ViTImageProcessor(), (224, 224), None),
        # older files: CLIP's integer size is the shorter side, as its processor reads it
        (
            {
                "feature_extractor_type": "CLIPFeatureExtractor",
                "size": 224,
                "do_center_crop": True,
                "crop_size": 224,
                "resample": 3,
            },
            224,
            224,
        ),
        ({"feature_extractor_type": "ViTFeatureExtractor", "size": 224}, (224, 224), None),
    ],
)
def test_processors_resize_and_crop_like_transformers(tmp_path, processor, resize, crop):
    random_family_model("clip_vision_model").save_pretrained(tmp_path)
    if callable(processor):
        processor().save_pretrained(tmp_path)
    else:
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(processor))
    transform = load_huggingface_folder(tmp_path).transform
    assert (transform.resize, transform.crop) == (resize, crop)


def test_sharded_weights_are_read_shard_by_shard(tmp_path):
    reference = random_hf_classifier()
    reference.save_pretrained(tmp_path, max_shard_size="40KB")  # big models come this way
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    images = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert (load_huggingface_folder(tmp_path)(images).logits - reference(images).logits).abs().max() <= ATOL
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    index["weight_map"]["classifier.bias"] = "../elsewhere.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="outside its folder"):
        load_huggingface_folder(tmp_path)


@pytest.mark.parametrize("gated", [False, True], ids=["gelu", "swiglu"])
def test_a_dinov3_folder_reproduces_the_pooled_output_and_every_attention(tmp_path, gated):
    """DINOv3ViTModel (rotary embeddings, 4 storage tokens, LayerScale, no key bias), eager attention, at its own
    size and a non-square one."""
    config = tiny_hf_config(
        "dinov3_vit", num_register_tokens=4, use_gated_mlp=gated, hidden_act="silu" if gated else "gelu"
    )
    torch.manual_seed(0)
    reference = hf.DINOv3ViTModel(config).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.normal_(std=0.3)
    reference.save_pretrained(tmp_path)
    model = load_huggingface_folder(tmp_path)
    assert model.config.rotary == "dinov3" and model.config.num_register_tokens == 4
    assert model.config.gated_mlp == gated and not model.config.absolute_positions
    for size in [(32, 32), (24, 40)]:
        pixels = torch.randn(2, 3, *size)
        with torch.no_grad():
            expected = reference(pixel_values=pixels, output_attentions=True)
            output = model(pixels, output_attentions=True)
        assert (output.pooled - expected.pooler_output).abs().max() < ATOL
        assert expected.pooler_output.abs().max() > 0.1
        for ours, theirs in zip(output.attentions, expected.attentions, strict=True):
            assert (ours - theirs).abs().max() < ATOL


def _perturbed(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    return model.eval()


@pytest.mark.parametrize(
    "build",
    [
        lambda: hf.IJepaModel(tiny_hf_config("ijepa")),
        lambda: hf.Aimv2VisionModel(tiny_hf_config("aimv2_vision_model", use_head=False)),
        lambda: hf.Aimv2Model(tiny_hf_config("aimv2")),
    ],
    ids=["ijepa", "aimv2_vision_model", "aimv2"],
)
def test_ijepa_and_aimv2_folders_reproduce_their_tokens_and_every_attention(tmp_path, build):
    reference = _perturbed(build())
    reference.save_pretrained(tmp_path)
    model = load_huggingface_folder(tmp_path)
    assert not model.config.class_token and model.config.pooling == "mean"
    if "Aimv2" in type(reference).__name__:
        assert model.config.norm == "rmsnorm" and model.config.patch_norm and model.config.gated_mlp
    vision = getattr(reference, "vision_model", reference)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = vision(pixel_values=pixels, output_attentions=True)
        output = model(pixels, output_attentions=True)
    assert (output.last_hidden_state - expected.last_hidden_state).abs().max() < ATOL
    assert torch.allclose(output.pooled, expected.last_hidden_state.mean(dim=1), atol=ATOL)  # timm's AIMv2 readout
    for ours, theirs in zip(output.attentions, expected.attentions, strict=True):
        assert (ours - theirs).abs().max() < ATOL


def test_aimv2_with_its_attention_pooling_head_is_refused_by_name(tmp_path):
    _perturbed(hf.Aimv2VisionModel(tiny_hf_config("aimv2_vision_model", use_head=True))).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="attention-pooling head .use_head=True"):
        load_huggingface_folder(tmp_path)
