"""Hostile model files (issue 29), part one: configs of impossible sizes and types, preprocessing values, NaN and
infinite weights and logit scales, text configs that do not fit their weights. Each is refused with one line, a
ModelLoadError, before the work that would make it slow; each test shows why (no model of the config's size is
built, transformers never builds the text tower...) instead of timing it. Files are written here; nothing is
downloaded. Part two: tests/test_hostile_files.py."""

import json
import math
from pathlib import Path

import pytest
import torch
from hostile_models import (
    edit_json,
    edited_checkpoint,
    forbid,
    hf_vit_folder,
    refusal,
)
from safetensors.torch import load_file, save_file
from tiny_text import clip_folder, siglip_folder

import vitviz.text.towers
from vitviz.messages import clip_text, echo

# --- configs: sizes and types checked before anything is built ----------------------------------------------------


@pytest.mark.parametrize(
    "config,match",
    [
        (dict(patch_size=0), "patch_size must be positive; got 0"),
        (dict(num_heads=0), "num_heads must be positive; got 0"),
        (dict(image_size=[]), r"image_size must be a side or \(height, width\).*got \[\]"),
        (dict(image_size=[math.inf, math.inf]), r"image_size must be .*got \[inf, inf\]"),
        (dict(image_size=math.inf), "image_size must be .*got inf"),
        (dict(hidden_size=math.inf), "hidden_size must be an integer; got inf"),
        (dict(layer_norm_eps="1e-6"), "layer_norm_eps must be a finite number; got '1e-6'"),
        (dict(layer_norm_eps=math.nan), "layer_norm_eps must be a finite number; got nan"),
        (dict(qkv_bias="yes"), "qkv_bias must be true or false"),
        (dict(num_layers=2.5), "num_layers must be an integer; got 2.5"),
        (dict(dropout=7), "dropout must be from 0 to 1"),
        (dict(pooling="x" * 1_000_000), r"pooling must be one of .*\(1,000,002 characters\)"),
    ],
)
def test_a_checkpoint_config_of_impossible_sizes_or_types_is_refused_before_building(tmp_path, built, config, match):
    path = edited_checkpoint(tmp_path, **config)
    built.clear()  # the tiny model saved
    refusal(path, match)
    assert not built


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(patch_size=0), "patch_size must be positive"),
        (dict(num_attention_heads=0), "num_heads must be positive"),
        (dict(image_size=[]), "image_size must be"),
        (dict(layer_norm_eps="1e-12"), "layer_norm_eps must be a finite number; got '1e-12'"),
        (dict(num_hidden_layers="12"), "num_layers must be an integer"),
        (dict(model_type="x" * 1_000_000), r"model_type 'xxx.*\.\.\. \(1,000,002 characters\) is not supported"),
        (dict(model_type=["vit"]), r"model_type is a name; got \['vit'\]"),
        (dict(model_type="clip", vision_config=[1, 2]), r"its vision_config is not an object but \[1, 2\]"),
    ],
)
def test_a_hugging_face_config_of_impossible_sizes_or_types_is_refused(tmp_path, built, change, match):
    refusal(hf_vit_folder(tmp_path / "model", **change), match)
    assert not built


@pytest.mark.parametrize("layers", [20_000, 100_000])
def test_a_checkpoint_asking_for_many_blocks_is_compared_by_name_without_building_them(tmp_path, built, layers):
    """20,000 blocks took 85 s (a meta-device model was built before the names were compared), 100,000 a
    MemoryError: the names come from a model of one block and one of two."""
    path = edited_checkpoint(tmp_path, num_layers=layers)
    message = refusal(
        path,
        r"does not match its config: missing weights "
        r"blocks\.2\.norm1\.weight, blocks\.2\.norm1\.bias, .* and [\d,]+ more$",
    )
    assert max(built) <= 2
    assert f"and {(layers - 2) * 12 - 5:,} more" in message  # 12 weights a block: counted, never listed


def test_a_hugging_face_config_asking_for_20000_blocks_is_refused_without_building_them(tmp_path, built):
    refusal(hf_vit_folder(tmp_path / "model", num_hidden_layers=20_000), r"missing weights blocks\.2\..* more")
    assert max(built) <= 2


def test_a_model_whose_weights_list_misses_16000_names_gets_a_summary(tmp_path):
    checkpoint = edited_checkpoint(tmp_path, num_layers=1400)  # 16,776 weights missing: 590 kB of names
    message = refusal(checkpoint, r"missing weights blocks\.2\.norm1\.weight, .* and 16,771 more")
    assert len(message) < 600


def test_many_unexpected_and_misshapen_weights_are_summarized(tmp_path):
    def hostile(state):
        state.update({f"junk.{'x' * 200}.{i}": torch.zeros(1) for i in range(1000)})
        state["norm.weight"] = torch.zeros(7)

    refusal(
        edited_checkpoint(tmp_path, state=hostile),
        r"unexpected weights junk\.xxx.*\.\.\. \(207 characters\).* "
        r"and 995 more; shape mismatches norm.weight: \(7,\) in file, \(32,\) expected",
    )


def test_unknown_config_fields_by_the_thousand_are_cut(tmp_path):
    refusal(
        edited_checkpoint(tmp_path, **{f"field{i}": i for i in range(16_000)}),
        r"unknown ViTConfig fields "
        r"\['field0', .*\(2[\d,]+ characters\)",
    )


def test_a_message_echoes_a_hostile_value_on_one_line_cut_with_its_length_said():
    """What every refusal above echoes: ``echo`` repr's (so a string keeps its quotes and a newline shows as \\n),
    ``clip_text`` folds whitespace to one line; both cut at ``limit`` and say the full length."""
    assert echo("a\nb") == "'a\\nb'" and echo(2.5) == "2.5"
    assert clip_text("a\n\n  b\tc") == "a b c"
    long = "x" * 5_000
    assert clip_text(long, 10) == "xxxxxxxxxx... (5,000 characters)"
    assert echo(long, 10) == "'xxxxxxxxx... (5,002 characters)"
    assert clip_text("x" * 200) == "x" * 200  # exactly at the limit: kept whole


# --- preprocessing, validated when it is read ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "preprocessing,match",
    [
        (dict(resize=10**9), "resize must be a side or .*from 1 to 8,192; got 1000000000"),
        (dict(resize=1e9), "resize must be .*got 1000000000.0"),
        (dict(resize=-32), "resize must be .*got -32"),
        (dict(resize="224"), "resize must be .*got '224'"),
        (dict(crop=[0, 32]), "crop must be .*got"),
        (dict(mean=[0.5] * 1000, std=[0.5] * 1000), r"mean must be 1 to 4 finite numbers.*\(5,000 characters\)"),
        (dict(std=[math.nan] * 3), r"std must be 1 to 4 positive numbers, one per channel; got \(nan, nan, nan\)"),
        (dict(std=[0.5, 0.0, 0.5]), "std must be 1 to 4 positive numbers"),
        (dict(mean=[math.inf] * 3), "mean must be 1 to 4 finite numbers"),
        (dict(interpolation=["bilinear"]), "interpolation must be one of"),
    ],
)
def test_a_checkpoints_preprocessing_values_are_checked_when_it_is_read(tmp_path, preprocessing, match):
    refusal(edited_checkpoint(tmp_path, preprocessing=preprocessing), "invalid preprocessing: " + match)


@pytest.mark.parametrize(
    "settings,match",
    [
        (dict(size="224"), "preprocessor_config.json's size must be a number of pixels or an object .*got '224'"),
        (dict(size={"shortest_edge": 10**9}), "resize must be .*got 1000000000"),
        (dict(size={"height": -1, "width": 32}), r"resize must be .*got \(-1, 32\)"),
        (dict(image_std=[math.nan] * 3), "std must be 1 to 4 positive numbers"),
        (dict(image_mean=[0.5] * 1000, image_std=[0.5] * 1000), "mean must be 1 to 4"),
        (dict(do_center_crop=True, crop_size=[32]), r"crop_size must be .*got \[32\]"),
        (
            dict(size={"width": 32}),
            r"not a usable Hugging Face ViT folder: preprocessor_config\.json \(KeyError: 'heig",
        ),
    ],
)
def test_a_folders_preprocessor_config_is_checked_when_it_is_read(tmp_path, settings, match):
    folder = hf_vit_folder(tmp_path / "model")
    (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    refusal(folder, match)


# --- weights: NaN and infinity refused, naming the tensors ---------------------------------------------------------


def test_non_finite_weights_are_refused_naming_them(tmp_path):
    def poisoned(state):
        state["blocks.0.attn.qkv.weight"][0, 0] = math.nan
        state["head.bias"][1] = -math.inf

    refusal(
        edited_checkpoint(tmp_path, state=poisoned),
        r"NaN or infinite values in 2 weights \(blocks\.0\.attn\.qkv"
        r"\.weight, head\.bias\), so every output would be NaN",
    )
    folder = hf_vit_folder(tmp_path / "model")
    weights = load_file(folder / "model.safetensors")
    weights["encoder.layer.1.output.dense.bias"][3] = math.inf
    save_file(weights, folder / "model.safetensors")
    refusal(folder, r"NaN or infinite values in 1 weights \(blocks\.1\.mlp\.fc2\.bias\)")


@pytest.fixture(scope="module")
def clip_source(tmp_path_factory) -> Path:
    """A tiny CLIPModel folder with its tokenizer, copied by each test that spoils it."""
    return clip_folder(tmp_path_factory.mktemp("clip") / "model")[2]


def spoiled_clip(source: Path, folder: Path, weights=None, config=None) -> Path:
    folder.mkdir()
    for path in source.iterdir():
        if path.is_file():
            (folder / path.name).write_bytes(path.read_bytes())
    if weights:
        state = load_file(folder / "model.safetensors")
        weights(state)
        save_file(state, folder / "model.safetensors")
    if config:
        edit_json(folder / "config.json", config)
    return folder


@pytest.mark.parametrize(
    "spoil,match",
    [
        (
            lambda w: w["logit_scale"].fill_(1000.0),
            r"exp\(logit_scale\), the scale of the logits, is inf \(from 1000.0\)",
        ),
        (lambda w: w["logit_scale"].fill_(math.nan), "is nan"),
        (
            lambda w: w["text_model.final_layer_norm.weight"].fill_(math.nan),
            r"NaN or infinite values in 1 weights "
            r"\(text_model\.final_layer_norm\.weight\)",
        ),
        (lambda w: w.__setitem__("logit_scale", torch.ones(3)), "logit_scale must be one number"),
    ],
)
def test_an_overflowing_logit_scale_or_non_finite_text_weights_are_refused(
    clip_source, tmp_path, monkeypatch, spoil, match
):
    calls = forbid(monkeypatch, vitviz.text.towers, "huggingface_text_tower")
    refusal(spoiled_clip(clip_source, tmp_path / "spoiled", weights=spoil), match)
    assert not calls


def test_an_infinite_siglip_logit_bias_is_refused(tmp_path):
    folder = siglip_folder(tmp_path / "siglip")[2]
    weights = load_file(folder / "model.safetensors")
    weights["logit_bias"].fill_(math.inf)
    save_file(weights, folder / "model.safetensors")
    refusal(folder, "logit_bias is inf")


# --- the text tower's config, checked against its weights before transformers builds it -----------------------------


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(num_hidden_layers=20_000), "text_config asks for 20,000 text layers; the weights have 2"),
        (
            dict(hidden_size=10**6, num_attention_heads=1000),
            r"a text tower of at least [\d,]+ parameters; its weights "
            r"hold [\d,]+",
        ),
        (dict(vocab_size=10**9), "a text tower of at least"),
        (dict(intermediate_size="48"), r"(intermediate_size must be positive integers|does not describe a clip text)"),
    ],
)
def test_a_clip_text_config_that_does_not_fit_its_weights_is_refused_before_building(
    clip_source, tmp_path, monkeypatch, change, match
):
    calls = forbid(monkeypatch, vitviz.text.towers, "huggingface_text_tower")
    refusal(spoiled_clip(clip_source, tmp_path / "spoiled", config=lambda c: c["text_config"].update(change)), match)
    assert not calls
