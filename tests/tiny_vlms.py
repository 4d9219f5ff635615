"""Tiny random-weight vision-language model folders: the stand-ins for LLaVA, Qwen-VL, PaliGemma, Idefics3 / SmolVLM
and Gemma 3 in every VLM test (none may download a model or tokenizer).

``make_tiny_vlm(family, folder)`` writes a folder that ``AutoModelForImageTextToText.from_pretrained`` and
``AutoProcessor.from_pretrained`` load, as a real checkpoint would be: the family's own config, model, processor,
image processor (and the video processor of Qwen and OneVision) classes, a small word-level tokenizer made with
``tokenizers`` that holds the family's special tokens, and a chat template (PaliGemma has none: its processor builds
the prompt). Each family keeps its real structure at a tiny size: 2 decoder layers of 64 wide with 4 query heads over
2 key/value heads, 2 vision blocks, tiles of 56-64 pixels, and the family's own way of turning a photo into image
tokens (Qwen's 2 x 2 merge, LLaVA-NeXT's and OneVision's any-res tiles, Idefics3's split tiles and pixel shuffle,
Gemma 3's pooling). The weights are float32, the attention implementation is left to transformers' default.

As in the real checkpoints, the Gemma 3 and Idefics3 templates write bos themselves while their tokenizers also add
one: tokenize such a prompt with ``add_special_tokens=False`` (transformers' ``apply_chat_template(tokenize=True)``
does the same). SmolVLM here is SmolVLM-256M/500M, whose checkpoints use the Idefics3 classes; SmolVLM2's own
processor needs the ``num2words`` package, which is not installed.

``tiny_vlm_folder(family, tmp_path_factory)`` builds each family once per test session. ``FAMILIES`` names them all.
"""

import functools
from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import AutoModelForImageTextToText, GenerationConfig, PreTrainedTokenizerFast

# Ordinary words, so that answers (even a random model's) decode to readable tokens.
WORDS = (
    "a an the this that it is are was what which where who how why there here of in on at to with and or not no yes "
    "cat dog bird car tree house man woman child sky sea road grass red green blue white black small big left right "
    "top bottom middle picture image photo describe answer question one two three four five user assistant system "
    "model you helpful ."
).split()
WORDS = WORDS + [word.capitalize() for word in WORDS] + ["USER", "ASSISTANT"] + list("0123456789:,?!'\"()-")


def _tokenizer(specials: list[str], *, add_bos: bool = False, **named: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: ``specials`` (never split) then ``WORDS``, unknown words read as ``<unk>``. ``named``
    sets the standard (bos_token, eos_token, pad_token, unk_token) and the family's named tokens (image_token ...);
    with ``add_bos`` every encoding starts with bos_token, as Llama's and Gemma's tokenizers do."""
    specials = list(dict.fromkeys(["<unk>", *specials]))
    vocab = {token: index for index, token in enumerate(specials + [w for w in WORDS if w not in specials])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    backend.add_tokens([AddedToken("\n", normalized=False)])  # a token of its own, as the prompts' line breaks are
    standard = {k: v for k, v in named.items() if k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    extra = {k: v for k, v in named.items() if k not in standard}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        extra_special_tokens=extra or None,
        add_bos_token=add_bos,
        **standard,
    )


def _ids(tokenizer: PreTrainedTokenizerFast, **tokens: str) -> dict[str, int]:
    return {name: tokenizer.convert_tokens_to_ids(token) for name, token in tokens.items()}


def _merge(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` written over it, nested dicts (text_config, vision_config ...) merged key by key."""
    merged = dict(base)
    for key, value in overrides.items():
        nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if nested else value
    return merged


def _text(tokenizer: PreTrainedTokenizerFast, model_type: str, **extra) -> dict:
    """A 2-layer decoder of 64 wide with 4 query heads over 2 key/value heads, its ids from the tokenizer."""
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    ids |= dict(pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer), max_position_embeddings=512)
    layers = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    return dict(model_type=model_type, num_key_value_heads=2) | layers | ids | extra


def _vision(model_type: str | None, image_size: int, patch_size: int) -> dict:
    """A 2-block vision tower (CLIP, SigLIP or Idefics3's) of 32 wide with 2 heads."""
    tower = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    tower |= dict(image_size=image_size, patch_size=patch_size)
    if model_type == "siglip_vision_model":  # the VLMs read the patch tokens, not SigLIP's pooling head
        tower |= dict(vision_use_head=False)
    return tower | ({"model_type": model_type} if model_type else {})


# ----------------------------------------------------------------------------------------------------------- chat
# Small Jinja templates in each family's shape: images first, then the text, then the model's turn.

LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | upper }}: "
    "{% for part in message['content'] if part['type'] == 'image' %}<image>\n{% endfor %}"
    "{% for part in message['content'] if part['type'] == 'text' %}{{ part['text'] }} {% endfor %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

# Qwen2-VL and Qwen2.5-VL add a default system turn; Qwen3-VL's template starts at the first message.
QWEN_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Idefics3 and SmolVLM: "User:" and "Assistant:" turns, each closed by <end_of_utterance>.
IDEFICS3_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)

# Gemma 3: turns between <start_of_turn> and <end_of_turn>, the model's turn named "model"; the prompt starts with bos.
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<start_of_image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# LLaVA-NeXT (Mistral): one [INST] ... [/INST] turn.
LLAVA_NEXT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}[INST] "
    "{% for part in message['content'] if part['type'] == 'image' %}<image>\n{% endfor %}"
    "{% for part in message['content'] if part['type'] == 'text' %}{{ part['text'] }} {% endfor %}[/INST]"
    "{% else %}{% for part in message['content'] if part['type'] == 'text' %} {{ part['text'] }}{% endfor %}"
    "{{ eos_token }}{% endif %}{% endfor %}"
)

# LLaVA-OneVision (Qwen2): <|im_start|> turns, the image placeholder on a line of its own before the text.
ONEVISION_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for part in message['content'] if part['type'] == 'image' %}<image>\n{% endfor %}"
    "{% for part in message['content'] if part['type'] == 'text' %}{{ part['text'] }}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# ------------------------------------------------------------------------------------------------------- families
# Each builder takes the config's overrides and the image processor's, and returns (config, processor).


def _llava(overrides: dict, image_overrides: dict):
    from transformers import CLIPImageProcessor, LlavaConfig, LlavaProcessor

    tokenizer = _tokenizer(
        ["<s>", "</s>", "<pad>", "<image>"],
        add_bos=True,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        image_token="<image>",
    )
    size = 56  # a 4 x 4 grid of 14-pixel patches after resize (shortest edge) and center crop, as LLaVA-1.5's 336
    crop = {"height": size, "width": size}
    image_processor = CLIPImageProcessor(**dict(size={"shortest_edge": size}, crop_size=crop) | image_overrides)
    config = dict(
        text_config=_text(tokenizer, "llama"),
        vision_config=_vision("clip_vision_model", size, 14),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=(size // 14) ** 2,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
    )
    config = _merge(config, overrides)
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=config["vision_config"]["patch_size"],
        vision_feature_select_strategy=config["vision_feature_select_strategy"],
        num_additional_image_tokens=1,  # CLIP's [CLS], dropped again by the "default" feature strategy
        chat_template=LLAVA_TEMPLATE,
    )
    return LlavaConfig(**config), processor


# The Qwen versions' vision towers, at tiny size: 2 blocks of 32 wide with 2 heads, merged 2 x 2 into the 64-wide
# decoder. Qwen2.5-VL's blocks attend within windows of 56 pixels but for one global block; Qwen3-VL has 16-pixel
# patches, learned positions on an 8 x 8 grid and deepstack features from its first block into the decoder.
QWEN_VISION = {
    "qwen2_vl": dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14),
    "qwen2_5_vl": dict(depth=2, hidden_size=32, intermediate_size=64, out_hidden_size=64, num_heads=2)
    | dict(patch_size=14, window_size=56, fullatt_block_indexes=[1]),
    "qwen3_vl": dict(depth=2, hidden_size=32, intermediate_size=64, out_hidden_size=64, num_heads=2)
    | dict(patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0]),
}


def _qwen(overrides: dict, image_overrides: dict, version: str = "qwen2_vl"):
    """Qwen2-VL, Qwen2.5-VL and Qwen3-VL: a photo resized to a multiple of patch x merge (28 or 32 pixels), between
    2 x 2 and 4 x 4 merged tokens, each token 2 x 2 patches (``image_grid_thw`` counts the patches); the decoder's
    multimodal rotary positions give each image token its (time, row, column)."""
    import transformers

    tokenizer = _tokenizer(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
        + ["<|video_pad|>"],
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    # head size 16: the (time, height, width) rotary sections split its 8 frequencies; Qwen3-VL interleaves them
    sections = [4, 2, 2] if version == "qwen3_vl" else [2, 3, 3]
    text = _text(tokenizer, f"{version}_text", rope_parameters={"rope_type": "default", "mrope_section": sections})
    config = dict(
        text_config=text | ({"head_dim": 16} if version == "qwen3_vl" else {}),
        vision_config=QWEN_VISION[version],
        **_ids(
            tokenizer,
            image_token_id="<|image_pad|>",
            video_token_id="<|video_pad|>",
            vision_start_token_id="<|vision_start|>",
            vision_end_token_id="<|vision_end|>",
        ),
    )
    config = _merge(config, overrides)
    patch = config["vision_config"]["patch_size"]
    size = {"shortest_edge": (2 * 2 * patch) ** 2, "longest_edge": (4 * 2 * patch) ** 2}
    grid = dict(size=size, patch_size=patch, merge_size=2, temporal_patch_size=2)
    if version == "qwen3_vl":
        grid |= dict(image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image_processor = transformers.Qwen2VLImageProcessor(**grid | image_overrides)
    video_cls = transformers.Qwen3VLVideoProcessor if version == "qwen3_vl" else transformers.Qwen2VLVideoProcessor
    name = {"qwen2_vl": "Qwen2VL", "qwen2_5_vl": "Qwen2_5_VL", "qwen3_vl": "Qwen3VL"}[version]
    template = QWEN_TEMPLATE if version != "qwen3_vl" else QWEN_TEMPLATE[QWEN_TEMPLATE.index("{% for") :]
    processor = getattr(transformers, f"{name}Processor")(
        image_processor, tokenizer, video_cls(**grid), chat_template=template
    )
    return getattr(transformers, f"{name}Config")(**config), processor


def _paligemma(overrides: dict, image_overrides: dict, text_model: str = "gemma"):
    """PaliGemma: a SigLIP tower's patch grid (4 x 4 at 56 pixels) prefixed to a Gemma decoder; no chat template, the
    processor writes ``<image>`` x 16 + ``<bos>`` + prompt + ``\\n``. PaliGemma 2 is the same with Gemma 2."""
    from transformers import PaliGemmaConfig, PaliGemmaProcessor, SiglipImageProcessor

    tokenizer = _tokenizer(
        ["<pad>", "<eos>", "<bos>", "<image>"], bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )
    vision = _merge(_vision("siglip_vision_model", 56, 14), overrides.get("vision_config", {}))
    size, tokens = vision["image_size"], (vision["image_size"] // vision["patch_size"]) ** 2
    image_kwargs = dict(size={"height": size, "width": size}, image_seq_length=tokens) | image_overrides
    processor = PaliGemmaProcessor(SiglipImageProcessor(**image_kwargs), tokenizer)  # adds the <loc>, <seg> tokens
    text = _text(tokenizer, text_model, head_dim=16)
    if text_model == "gemma2":  # its sliding window alternates with global layers, wider than any test's sequence
        text |= dict(query_pre_attn_scalar=16, sliding_window=512)
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    config = dict(text_config=text, vision_config=vision, image_token_index=image_token)
    config |= dict(hidden_size=64, projection_dim=64)  # the decoder's width, which the projector writes
    return PaliGemmaConfig(**_merge(config, overrides)), processor


def _idefics3(overrides: dict, image_overrides: dict, smolvlm: bool = False):
    """Idefics3 (SigLIP tower, Llama decoder): a photo is resized to at most 2 x 2 tiles, each tile and a global
    image go through the tower, and the pixel shuffle folds ``scale_factor``^2 patches into one token: 8 x 8 patches of
    7 pixels per 56-pixel tile become 4 x 4 tokens. SmolVLM (256M / 500M, the same classes) shuffles by 4: 16 x 16
    patches of 4 pixels per 64-pixel tile, again 4 x 4 tokens, and its tokenizer adds no bos of its own."""
    from transformers import Idefics3Config, Idefics3ImageProcessor, Idefics3Processor

    grid = [f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)]
    images = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>", *grid]
    if smolvlm:
        tile, patch, scale = 64, 4, 4
        tokenizer = _tokenizer(
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *images],
            bos_token="<|im_start|>",
            eos_token="<end_of_utterance>",
            pad_token="<|im_end|>",
        )
    else:
        tile, patch, scale = 56, 7, 2
        tokenizer = _tokenizer(
            ["<|begin_of_text|>", "<|end_of_text|>", *images],
            add_bos=True,
            bos_token="<|begin_of_text|>",
            eos_token="<end_of_utterance>",
            pad_token="<|end_of_text|>",
        )
    config = dict(
        text_config=_text(tokenizer, "llama"),
        vision_config=_vision(None, tile, patch),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=scale,
    )
    config = _merge(config, overrides)
    tile, patch = config["vision_config"]["image_size"], config["vision_config"]["patch_size"]
    image_kwargs = dict(size={"longest_edge": 2 * tile}, max_image_size={"longest_edge": tile})
    image_kwargs |= dict(do_image_splitting=True) | image_overrides
    seq_len = (tile // patch // config["scale_factor"]) ** 2
    template = ("<|im_start|>" if smolvlm else "{{ bos_token }}") + IDEFICS3_TEMPLATE
    processor = Idefics3Processor(
        Idefics3ImageProcessor(**image_kwargs), tokenizer, image_seq_len=seq_len, chat_template=template
    )
    return Idefics3Config(**config), processor


def _gemma3(overrides: dict, image_overrides: dict):
    """Gemma 3: a SigLIP tower over a square resize (8 x 8 patches of 8 pixels), average-pooled to
    ``mm_tokens_per_image`` (4 x 4) soft tokens between <start_of_image> and <end_of_image>; a Gemma 3 decoder whose
    sliding-window and global layers alternate."""
    from transformers import Gemma3Config, Gemma3ImageProcessor, Gemma3Processor

    image = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tokenizer = _tokenizer(
        ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", *image.values()],
        add_bos=True,
        bos_token="<bos>",
        eos_token="<end_of_turn>",
        pad_token="<pad>",
        **image,
    )
    text = _text(tokenizer, "gemma3_text", head_dim=16, query_pre_attn_scalar=16, sliding_window=512)
    config = dict(
        text_config=text | {"layer_types": ["sliding_attention", "full_attention"]},
        vision_config=_vision("siglip_vision_model", 64, 8),
        mm_tokens_per_image=16,
        **_ids(tokenizer, boi_token_index="<start_of_image>", eoi_token_index="<end_of_image>"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image_soft_token>"),
    )
    config = _merge(config, overrides)
    square = config["vision_config"]["image_size"]
    image_kwargs = dict(size={"height": square, "width": square}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image_processor = Gemma3ImageProcessor(**image_kwargs | image_overrides)
    processor = Gemma3Processor(
        image_processor, tokenizer, chat_template=GEMMA3_TEMPLATE, image_seq_length=config["mm_tokens_per_image"]
    )
    return Gemma3Config(**config), processor


def _llava_next(overrides: dict, image_overrides: dict):
    """LLaVA-NeXT (Mistral): any-res, a 56-pixel base image (4 x 4 patches) plus the tiles of the best of
    ``image_grid_pinpoints`` (1 x 2, 2 x 1 or 2 x 2 tiles), unpadded, each row of tile features closed by the learned
    ``image_newline``."""
    from transformers import LlavaNextConfig, LlavaNextImageProcessor, LlavaNextProcessor

    tokenizer = _tokenizer(
        ["<s>", "</s>", "<pad>", "<image>", "[INST]", "[/INST]"],
        add_bos=True,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        image_token="<image>",
    )
    size = 56
    config = dict(
        text_config=_text(tokenizer, "mistral"),
        vision_config=_vision("clip_vision_model", size, 14),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_grid_pinpoints=[[size, 2 * size], [2 * size, size], [2 * size, 2 * size]],
        image_seq_length=(size // 14) ** 2,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
    )
    config = _merge(config, overrides)
    size = config["vision_config"]["image_size"]
    image_kwargs = dict(
        size={"shortest_edge": size},
        crop_size={"height": size, "width": size},
        image_grid_pinpoints=config["image_grid_pinpoints"],
    )
    processor = LlavaNextProcessor(
        LlavaNextImageProcessor(**image_kwargs | image_overrides),
        tokenizer,
        patch_size=config["vision_config"]["patch_size"],
        vision_feature_select_strategy=config["vision_feature_select_strategy"],
        num_additional_image_tokens=1,
        chat_template=LLAVA_NEXT_TEMPLATE,
    )
    return LlavaNextConfig(**config), processor


def _llava_onevision(overrides: dict, image_overrides: dict):
    """LLaVA-OneVision (SigLIP tower, Qwen2 decoder): any-res over 1 x 1 to 6 x 6 tiles of 56 pixels (4 x 4 patches
    each) plus the base image; past 9 tiles' worth ("anyres_max_9") the tile features are downsampled."""
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    tokenizer = _tokenizer(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"],
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        image_token="<image>",
        video_token="<video>",
    )
    size = 56
    config = dict(
        text_config=_text(tokenizer, "qwen2"),
        vision_config=_vision("siglip_vision_model", size, 14),
        **_ids(tokenizer, image_token_index="<image>", video_token_index="<video>"),
        image_grid_pinpoints=[[size * rows, size * cols] for rows in range(1, 7) for cols in range(1, 7)],
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
    )
    config = _merge(config, overrides)
    size, patch = config["vision_config"]["image_size"], config["vision_config"]["patch_size"]
    square = dict(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image_processor = LlavaOnevisionImageProcessor(
        **square | {"image_grid_pinpoints": config["image_grid_pinpoints"]} | image_overrides
    )
    processor = LlavaOnevisionProcessor(
        image_processor,
        tokenizer,
        LlavaOnevisionVideoProcessor(**square),
        num_image_tokens=(size // patch) ** 2,
        vision_feature_select_strategy=config["vision_feature_select_strategy"],
        vision_aspect_ratio=config["vision_aspect_ratio"],
        chat_template=ONEVISION_TEMPLATE,
    )
    return LlavaOnevisionConfig(**config), processor


BUILDERS: dict[str, Callable[[dict, dict], tuple]] = {
    "llava": _llava,
    "llava_next": _llava_next,
    "llava_onevision": _llava_onevision,
    "qwen2_vl": _qwen,
    "qwen2_5_vl": functools.partial(_qwen, version="qwen2_5_vl"),
    "qwen3_vl": functools.partial(_qwen, version="qwen3_vl"),
    "paligemma": _paligemma,
    "paligemma2": functools.partial(_paligemma, text_model="gemma2"),
    "idefics3": _idefics3,
    "smolvlm": functools.partial(_idefics3, smolvlm=True),
    "gemma3": _gemma3,
}

FAMILIES: tuple[str, ...] = tuple(BUILDERS)


def make_tiny_vlm(
    family: str, folder: Path, *, seed: int = 0, noise: float = 0.2, image_processor: dict | None = None, **overrides
) -> Path:
    """Write a tiny random ``family`` VLM (model in safetensors, processor, tokenizer, chat template) into ``folder``.

    ``overrides`` are written over the family's config (``text_config=dict(num_hidden_layers=3)`` merges into the
    text config); ``image_processor=dict(...)`` goes to the image processor. Every weight is moved off its initial
    value by Gaussian noise of size ``noise`` (seeded), so that attention is far from uniform. Returns ``folder``.
    """
    if family not in BUILDERS:
        raise ValueError(f"unknown tiny VLM family {family!r}; known: {', '.join(FAMILIES)}")
    folder = Path(folder)
    config, processor = BUILDERS[family](overrides, image_processor or {})
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=noise)
    tokenizer = processor.tokenizer
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@functools.cache
def _cached(family: str, root: Path) -> Path:
    return make_tiny_vlm(family, root / family)


def tiny_vlm_folder(family: str, tmp_path_factory) -> Path:
    """The tiny ``family`` folder of this test session, built on first use (the same folder for every later test)."""
    return _cached(family, tmp_path_factory.getbasetemp() / "tiny_vlms")
