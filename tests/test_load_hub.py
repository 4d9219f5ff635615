"""load_model("timm:...") and load_model("hf:...") with the network simulated away: a cached model loads,
anything else fails within seconds with a message that names the cache folder. Nothing is downloaded."""

import socket
import threading
import time

import pytest
import timm
import torch
from hub_cache import TIMM_NAME, cached_snapshot
from huggingface_hub import constants
from PIL import Image
from safetensors.torch import save_file
from timm.data import ImageNetInfo, create_transform, resolve_data_config
from tiny_models import tiny_hf_vit_config
from transformers import ViTForImageClassification

import vitviz
import vitviz.loading.download
from vitviz import ModelLoadError, load_model


@pytest.mark.parametrize("spec", [f"timm:{TIMM_NAME}", "hf:google/vit-base-patch16-224", "google/vit-base-patch16-224"])
def test_offline_without_a_cached_copy_fails_fast_and_names_the_cache(offline, spec):
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match=f"offline.*{offline}"):
        load_model(spec)
    assert time.monotonic() - start < 10
    assert not list(offline.rglob("*.safetensors"))  # nothing half-written


def test_a_hub_that_never_answers_is_treated_as_offline(tmp_path, monkeypatch):
    # a server that accepts connections and never answers: the worst case for a hang
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(vitviz.loading.download, "HUB_TIMEOUT_S", 1.0)
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match="cannot be reached"):
        load_model("hf:org/model")
    assert time.monotonic() - start < 10
    server.close()


def test_a_cached_timm_model_loads_offline_with_names_and_preprocessing(offline):
    torch.manual_seed(0)
    reference = timm.create_model(TIMM_NAME, pretrained=False).eval()
    with torch.no_grad():
        reference.head.weight.normal_(std=0.05)
    save_file(reference.state_dict(), cached_snapshot(offline, f"timm/{TIMM_NAME}") / "model.safetensors")

    model = load_model(f"timm:{TIMM_NAME}")
    assert model.class_names == ImageNetInfo("imagenet-1k").label_descriptions()
    photo = Image.effect_mandelbrot((300, 200), (-2, -1.2, 1, 1.2), 50).convert("RGB")
    pixels = model.transform(photo)
    torch.testing.assert_close(pixels, create_transform(**resolve_data_config({}, model=reference))(photo))
    with torch.no_grad():
        expected = reference(pixels[None])
        assert (model(pixels[None]).logits - expected).abs().max() <= 1e-4 * expected.abs().max()


def test_a_cached_hugging_face_repository_loads_offline(offline):
    torch.manual_seed(0)
    config = tiny_hf_vit_config(num_labels=3, id2label={0: "cat", 1: "dog", 2: "bird"})
    reference = ViTForImageClassification(config).eval()
    reference.save_pretrained(cached_snapshot(offline, "someone/tiny-vit"))

    for spec in ["hf:someone/tiny-vit", "someone/tiny-vit"]:  # a bare repository id that is not a local path
        model = load_model(spec)
        assert model.class_names == ["cat", "dog", "bird"]
        images = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            assert (model(images).logits - reference(images).logits).abs().max() <= 1e-4


def test_hub_specs_are_validated_before_any_download(offline):
    with pytest.raises(ModelLoadError, match="timm has no model 'vit_nope'"):
        load_model("timm:vit_nope")
    with pytest.raises(ModelLoadError, match="no pretrained weights 'vit_tiny_patch16_224.nope'.*augreg"):
        load_model("timm:vit_tiny_patch16_224.nope")
    with pytest.raises(ModelLoadError, match="relative position bias"):
        load_model("timm:beit_base_patch16_224.in22k_ft_in22k_in1k")
    with pytest.raises(ModelLoadError, match="not a Hugging Face repository id"):
        load_model("hf:not a repo")


def test_a_cached_sharded_repository_loads_offline(offline):
    torch.manual_seed(0)
    config = tiny_hf_vit_config(num_labels=3)
    reference = ViTForImageClassification(config).eval()
    reference.save_pretrained(cached_snapshot(offline, "someone/sharded-vit"), max_shard_size="20KB")
    images = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert (load_model("hf:someone/sharded-vit")(images).logits - reference(images).logits).abs().max() <= 1e-4
