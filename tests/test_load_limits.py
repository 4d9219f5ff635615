"""Loaders refuse, with a message and before allocating anything, what would crash or hang them: a config nested
100,000 levels deep, a config asking for an absurd model, a model bigger than the memory free, a huge JSON file."""

import json
import time

import pytest
import torch
from safetensors.torch import save_file

import vitviz
import vitviz.loading.build
import vitviz.loading.sources.weights_files
from vitviz import ModelLoadError, ViT, ViTConfig, load_model

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64)


@pytest.mark.parametrize(
    "config",
    [
        {},
        dict(num_classes=0),
        dict(pooling="map", class_token=False, num_classes=5),
        dict(distillation_token=True, distillation_head=True),
        dict(num_register_tokens=4, pos_embed_prefix=False, layer_scale=True, norm_pre=True),
        dict(qkv_bias=False, pooling="cls+mean", image_size=(32, 48)),
    ],
)
def test_the_parameter_count_from_the_numbers_equals_the_built_models(config):
    c = ViTConfig(**(SMALL | {"num_classes": 3} | config))
    assert c.num_parameters == sum(p.numel() for p in ViT(c).parameters())


def hf_folder(tmp_path, config: dict, weights: dict | None = None):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file(weights or {"dummy": torch.zeros(1)}, folder / "model.safetensors")
    return folder


def test_a_config_nested_100000_levels_deep_is_a_load_error_not_a_recursion_error(tmp_path):
    folder = hf_folder(tmp_path, {})
    (folder / "config.json").write_text('{"model_type": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelLoadError, match="nested too deeply"):
        load_model(str(folder))


def test_an_absurd_config_is_refused_from_its_numbers_at_once(tmp_path):
    folder = hf_folder(
        tmp_path,
        {
            "model_type": "vit",
            "hidden_size": 10_000_000,
            "num_hidden_layers": 10_000,
            "num_attention_heads": 10,
            "intermediate_size": 10_000_000,
        },
    )
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match=r"[\d,]+ parameters: .* GB in fp32, more than the .* GB of memory free"):
        load_model(str(folder))
    assert time.monotonic() - start < 2


def test_a_model_bigger_than_the_free_memory_is_refused_with_both_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(vitviz.loading.build, "available_memory", lambda: 10_000)
    path = tmp_path / "model.pt"
    model = ViT(ViTConfig(**SMALL, num_classes=3))
    vitviz.save_checkpoint(path, model, ["a", "b", "c"], vitviz.Preprocessing(resize=32))
    count = model.config.num_parameters
    with pytest.raises(ModelLoadError, match=f"{count:,} parameters: 0.0 GB in fp32, more than the 0.0 GB"):
        load_model(str(path))


def test_a_weights_file_bigger_than_the_free_memory_is_not_read(tmp_path, monkeypatch):
    folder = hf_folder(tmp_path, {"model_type": "vit"}, {"w": torch.zeros(1000)})
    monkeypatch.setattr(vitviz.loading.sources.weights_files, "available_memory", lambda: 100)
    with pytest.raises(ModelLoadError, match="of weights, more than the 0.0 GB of memory free"):
        load_model(str(folder))


def test_a_huge_json_file_is_not_parsed(tmp_path, monkeypatch):
    import vitviz.loading.sources.common as common

    folder = hf_folder(tmp_path, {"model_type": "vit", "padding": "x" * 2000})
    monkeypatch.setattr(common, "MAX_JSON_BYTES", 1000)
    with pytest.raises(ModelLoadError, match="more than the 0 MB a model's JSON file may take"):
        load_model(str(folder))


def test_a_timm_model_too_big_for_the_memory_is_refused_before_any_download(monkeypatch):
    """DINOv3 7B: 6.7 billion parameters, 27 GB in fp32, more than this machine's 24 GB: refused from its config."""
    import socket

    monkeypatch.setattr(socket.socket, "connect", lambda *a, **k: (_ for _ in ()).throw(OSError(101, "no network")))
    monkeypatch.setattr(vitviz.loading.build, "available_memory", lambda: 24 * 10**9)  # this machine, whatever runs it
    with pytest.raises(
        ModelLoadError,
        match=r"timm:vit_7b_patch16_dinov3.lvd1689m has 6,7[\d,]+ parameters: 2[67].\d GB "
        r"in fp32, more than the 24.0 GB of memory free",
    ):
        load_model("timm:vit_7b_patch16_dinov3.lvd1689m")
