"""open_clip models through from_open_clip, and load_model("open_clip:...") with the network simulated away.
Random weights (every parameter perturbed), a stand-in tokenizer for SigLIP; nothing is downloaded."""

import json
import time

import open_clip
import pytest
import torch
from hub_cache import cached_snapshot
from safetensors.torch import save_file
from tiny_models import TINY_CFG

import vitviz
from vitviz import ModelLoadError, from_open_clip, load_model, zero_shot
from vitviz.loading.sources.timm import open_clip_for_timm

ATOL = 1e-4
PROMPTS = ["a photo of a dog", "a photo of a cat", "an astronaut riding a horse"]


class StandInTokenizer:
    """Bytes as token ids, padded to a fixed context (what SigLIP's Hub tokenizer would do, without a download)."""

    def __init__(self, context_length: int = 64):
        self.context_length = context_length

    def __call__(self, texts, context_length=None):
        ids = torch.zeros(len(texts), self.context_length, dtype=torch.long)
        for row, text in enumerate(texts):
            data = list(text.encode())[: self.context_length - 1]
            ids[row, : len(data)] = torch.tensor(data, dtype=torch.long) + 2
            ids[row, len(data)] = 1  # end of text
        return ids


def perturbed_open_clip(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
        model.logit_scale.fill_(4.0)
        if getattr(model, "logit_bias", None) is not None:
            model.logit_bias.fill_(-3.0)
    return model


# OpenCLIP's own tower; timm trunks: SigLIP's (a projection-free pooling head), EVA-CLIP's and PE-Core's (rotary
# embeddings, the trunk's classifier as the projection)
TOWERS = {
    "ViT-B-16": "VisionTransformer",
    "ViT-B-16-SigLIP": "TimmModel",
    "EVA02-B-16": "TimmModel",
    "PE-Core-B-16": "TimmModel",
}


@pytest.fixture(scope="module", params=list(TOWERS))
def converted(request):
    name = request.param
    model = perturbed_open_clip(name)
    tokenizer = (
        open_clip.get_tokenizer(name)
        if name in ("ViT-B-16", "EVA02-B-16")
        else StandInTokenizer(model.text.context_length if hasattr(model, "text") else 64)
    )
    return name, model, tokenizer, from_open_clip(model, tokenizer)


def test_from_open_clip_logits_equal_open_clips(converted, tmp_path):
    name, model, tokenizer, vit = converted
    assert type(model.visual).__name__ == TOWERS[name]  # both kinds of image tower
    zs = zero_shot(vit, PROMPTS, cache_dir=tmp_path)
    torch.manual_seed(1)
    pixels = torch.randn(2, 3, *vit.config.image_hw)
    with torch.no_grad():
        image = model.encode_image(pixels, normalize=True)
        text = model.encode_text(tokenizer(PROMPTS), normalize=True)
        expected = model.logit_scale.exp() * image @ text.T
        if model.logit_bias is not None:
            expected = expected + model.logit_bias
        out = zs(pixels, output_attentions=True)
    assert (out.logits - expected).abs().max() < ATOL
    assert expected.std() > 0.01
    assert zs.config.probabilities == ("sigmoid" if name.endswith("SigLIP") else "softmax")
    assert zs.config.rotary == ("eva" if name in ("EVA02-B-16", "PE-Core-B-16") else "none")
    assert len(out.attentions) == 12 and out.grid_size == (vit.config.image_hw[0] // 16, vit.config.image_hw[1] // 16)
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(1), atol=1e-5)


def test_from_open_clip_leaves_the_model_whole(converted):
    _, model, _, vit = converted
    assert hasattr(model.visual, "forward") and type(model.visual).__name__ != "Identity"
    assert vit.text_tower.clip_model is model
    assert vit.transform.mean == tuple(model.visual.preprocess_cfg["mean"])


def test_from_open_clip_refuses_what_is_not_an_open_clip_model():
    with pytest.raises(ModelLoadError, match="expected an open_clip CLIP model"):
        from_open_clip(torch.nn.Linear(2, 2), StandInTokenizer())


def test_a_cached_open_clip_hub_repository_loads_offline_with_its_text_tower(offline):
    repo = "someone/tiny-clip"
    snapshot = cached_snapshot(offline, repo)
    (snapshot / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": TINY_CFG, "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}})
    )
    torch.manual_seed(0)
    reference = open_clip.CLIP(**TINY_CFG).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.normal_(std=0.2)
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, snapshot / "open_clip_model.safetensors")
    start = time.monotonic()
    model = load_model(f"open_clip:hf-hub:{repo}")
    assert time.monotonic() - start < 30
    assert model.text_tower is not None and model.transform.std == (0.25, 0.25, 0.25)
    assert type(model.text_tower.clip_model.visual).__name__ == "Identity"  # not held twice
    zs = zero_shot(model, PROMPTS, use_cache=False)
    pixels = torch.randn(2, 3, 32, 32)
    tokenizer = open_clip.get_tokenizer("ViT-B-16", context_length=16)
    with torch.no_grad():
        image = reference.encode_image(pixels, normalize=True)
        text = reference.encode_text(tokenizer(PROMPTS), normalize=True)
        expected = reference.logit_scale.exp() * image @ text.T
        assert (zs(pixels).logits - expected).abs().max() < ATOL


@pytest.mark.parametrize(
    "spec", ["open_clip:ViT-B-16/openai", "open_clip:hf-hub:timm/ViT-B-16-SigLIP", "open_clip:ViT-B-16-SigLIP/webli"]
)
def test_offline_without_a_cached_copy_fails_fast_and_names_the_cache(offline, spec):
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match=f"offline.*{offline}"):
        load_model(spec)
    assert time.monotonic() - start < 10


def test_open_clip_specs_are_checked_before_any_download(offline):
    with pytest.raises(ModelLoadError, match="open_clip has no model 'ViT-Nope'"):
        load_model("open_clip:ViT-Nope/openai")
    with pytest.raises(ModelLoadError, match="no pretrained weights 'ViT-B-16/nope'.*openai"):
        load_model("open_clip:ViT-B-16/nope")


def test_timm_clip_names_find_their_open_clip_weights(offline):
    assert open_clip_for_timm("vit_base_patch16_clip_224.openai") == "ViT-B-16/openai"
    assert open_clip_for_timm("vit_base_patch16_224.augreg2_in21k_ft_in1k") is None
    assert open_clip_for_timm("vit_nope") is None


def test_a_timm_clip_tower_offline_loads_alone_and_says_how_to_get_the_text(offline, monkeypatch):
    """Offline with only timm's file cached: the image tower as before, and a note naming the open_clip spec."""
    import vitviz.loading.sources.timm as timm_module

    loaded = vitviz.ViT(
        vitviz.ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_size=32, num_classes=0
        )
    )
    monkeypatch.setattr(timm_module, "load_timm", lambda name: loaded)
    model = load_model("timm:vit_base_patch16_clip_224.openai")
    assert model is loaded and "open_clip:ViT-B-16/openai" in model.text_tower_note
