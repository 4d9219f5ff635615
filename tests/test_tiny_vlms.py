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


def test_unknown_family_is_refused(tmp_path):
    with pytest.raises(ValueError, match="known: llava"):
        make_tiny_vlm("blip", tmp_path)
