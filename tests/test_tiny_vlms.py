"""The tiny VLM folders of tests/tiny_vlms.py load, prompt and generate as real checkpoints of their family do."""

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_vlms import FAMILIES, make_tiny_vlm, tiny_vlm_folder
from transformers import AutoModelForImageTextToText, AutoProcessor

QUESTION = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is this"}]}]


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def prompt(processor, config) -> str:
    """The chat template over one image and a question; PaliGemma (no template) takes the bare question."""
    if config.model_type == "paligemma":
        assert processor.chat_template is None
        return "what is this"
    return processor.apply_chat_template(QUESTION, add_generation_prompt=True)


def inputs(folder, image: Image.Image):
    """The model, its processor and the processed prompt; a prompt whose template already wrote bos (Gemma 3,
    Idefics3) is tokenized without adding another, as transformers' own apply_chat_template(tokenize=True) does."""
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    text = prompt(processor, model.config)
    bos = processor.tokenizer.bos_token
    batch = processor(
        images=image, text=text, add_special_tokens=not (bos and text.startswith(bos)), return_tensors="pt"
    )
    return model, processor, batch


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("size", [(48, 48), (80, 40)], ids=["square", "wide"])
def test_folder_loads_prompts_and_generates(family, size, tmp_path_factory):
    folder = tiny_vlm_folder(family, tmp_path_factory)
    assert (folder / "model.safetensors").is_file()
    model, processor, batch = inputs(folder, photo(*size))
    ids = batch["input_ids"][0]
    image_token_id = model.config.image_token_id
    assert (ids == image_token_id).sum() >= 4, "the prompt holds the image's tokens"
    # the placeholder the tokenizer names (Gemma 3's processor calls <start_of_image> its image token)
    image_token = getattr(processor.tokenizer, "image_token", None) or processor.image_token
    assert processor.tokenizer.convert_ids_to_tokens(image_token_id) == image_token
    assert ids.tolist().count(processor.tokenizer.bos_token_id) <= 1, "one bos at most"
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=3)
        again = model.generate(**batch, do_sample=False, max_new_tokens=3)
    new = out[0, ids.shape[0] :]
    assert 1 <= new.shape[0] <= 3 and torch.equal(out, again)
    text = processor.decode(new, skip_special_tokens=True)
    assert isinstance(text, str)


# Per family: its processor and model classes, and the image tokens an 80 x 40 photo becomes (16 = a 4 x 4 grid).
WIDE = {
    "llava": ("LlavaProcessor", "LlavaForConditionalGeneration", 16),  # center crop to 56 x 56
    "llava_next": ("LlavaNextProcessor", "LlavaNextForConditionalGeneration", 52),  # base + 1 x 2 tiles, newlines
    "llava_onevision": ("LlavaOnevisionProcessor", "LlavaOnevisionForConditionalGeneration", 52),
    "qwen2_vl": ("Qwen2VLProcessor", "Qwen2VLForConditionalGeneration", 6),  # 56 x 84 pixels: 2 x 3 merged
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2_5_VLForConditionalGeneration", 6),
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLForConditionalGeneration", 6),  # 64 x 96 pixels of 16-pixel patches
    "paligemma": ("PaliGemmaProcessor", "PaliGemmaForConditionalGeneration", 16),
    "paligemma2": ("PaliGemmaProcessor", "PaliGemmaForConditionalGeneration", 16),
    "idefics3": ("Idefics3Processor", "Idefics3ForConditionalGeneration", 48),  # 1 x 2 tiles + the global image
    "smolvlm": ("Idefics3Processor", "Idefics3ForConditionalGeneration", 48),
    "gemma3": ("Gemma3Processor", "Gemma3ForConditionalGeneration", 16),  # 8 x 8 patches pooled to 4 x 4
}


def test_every_family_is_described():
    assert set(WIDE) == set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_keeps_its_real_structure(family, tmp_path_factory):
    model, processor, batch = inputs(tiny_vlm_folder(family, tmp_path_factory), photo(80, 40))
    processor_class, model_class, n_image_tokens = WIDE[family]
    assert (type(processor).__name__, type(model).__name__) == (processor_class, model_class)
    ids = batch["input_ids"][0]
    assert (ids == model.config.image_token_id).sum() == n_image_tokens
    tokens = processor.tokenizer.convert_ids_to_tokens(ids.tolist())
    if family.startswith("qwen"):
        assert batch["image_grid_thw"].tolist() == [[1, 4, 6]] and model.config.vision_config.spatial_merge_size == 2
        assert type(processor.video_processor).__name__.endswith("VideoProcessor")
    if family in ("llava_next", "llava_onevision"):
        assert batch["pixel_values"].shape[1] == 3, "the base image and 2 any-res tiles"
        assert batch["image_sizes"].tolist() == [[40, 80]]
    if family in ("idefics3", "smolvlm"):
        assert [t for t in tokens if t.startswith("<row_")] == ["<row_1_col_1>", "<row_1_col_2>"]
        assert tokens.count("<global-img>") == 1 and batch["pixel_values"].shape[1] == 3
    if family == "gemma3":
        start, end = tokens.index("<start_of_image>"), tokens.index("<end_of_image>")
        assert end - start - 1 == model.config.mm_tokens_per_image == 16
    if family.startswith("paligemma"):
        assert tokens[16:18] == ["<bos>", "what"] and tokens[-1] == "\n"


@pytest.mark.parametrize("family", ["llava_next", "llava_onevision", "idefics3", "qwen2_5_vl"])
def test_big_photo_takes_the_tiled_path(family, tmp_path_factory):
    """A photo bigger than every tile: LLaVA-NeXT's 2 x 2 tiles, OneVision's 6 x 6 tiles downsampled to 9 tiles'
    worth, Idefics3's 2 x 2 split, Qwen2.5-VL's several attention windows; the forward pass runs."""
    model, _, batch = inputs(tiny_vlm_folder(family, tmp_path_factory), photo(400, 360))
    n_image = int((batch["input_ids"] == model.config.image_token_id).sum())
    if family == "qwen2_5_vl":  # 84 x 112 pixels: 6 x 8 patches, 3 x 4 merged tokens in 2 x 2 windows
        assert batch["image_grid_thw"].tolist() == [[1, 6, 8]] and n_image == 12
    else:  # tower images: the tiles and the base (global) image; OneVision's 36 tiles are downsampled to ~9 tiles'
        tower_images, tokens = {"llava_next": (5, 88), "llava_onevision": (37, 159), "idefics3": (5, 80)}[family]
        assert batch["pixel_values"].shape[1] == tower_images and n_image == tokens
    with torch.no_grad():
        logits = model(**batch).logits
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_vocabulary_reads_as_words(family, tmp_path_factory):
    processor = AutoProcessor.from_pretrained(tiny_vlm_folder(family, tmp_path_factory))
    ids = processor.tokenizer("what is this cat", add_special_tokens=False)["input_ids"]
    assert processor.tokenizer.convert_ids_to_tokens(ids) == ["what", "is", "this", "cat"]


def test_same_seed_same_weights_and_overrides_apply(tmp_path):
    a = make_tiny_vlm("llava", tmp_path / "a")
    b = make_tiny_vlm("llava", tmp_path / "b", text_config=dict(num_hidden_layers=3))
    assert (a / "model.safetensors").read_bytes() == make_tiny_vlm("llava", tmp_path / "c").joinpath(
        "model.safetensors"
    ).read_bytes()
    assert AutoModelForImageTextToText.from_pretrained(b).config.text_config.num_hidden_layers == 3


def test_image_processor_overrides_apply(tmp_path):
    """Qwen's pixel budget raised to 8 x 8 merged tokens: a 224 x 224 photo becomes 64 image tokens, not 16."""
    budget = {"shortest_edge": 56 * 56, "longest_edge": 224 * 224}
    folder = make_tiny_vlm("qwen2_vl", tmp_path, image_processor=dict(size=budget))
    model, _, batch = inputs(folder, photo(224, 224))
    assert batch["image_grid_thw"].tolist() == [[1, 16, 16]]
    assert (batch["input_ids"] == model.config.image_token_id).sum() == 64


def test_unknown_family_is_refused(tmp_path):
    with pytest.raises(ValueError, match="known: llava"):
        make_tiny_vlm("blip", tmp_path)
