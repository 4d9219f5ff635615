"""The text half of a Hugging Face ``clip`` or ``siglip`` folder: its text tower, once its config is checked against
its weights.

transformers builds the text model from ``text_config`` with random weights before the folder's are loaded, so a
hostile config (20,000 layers in a 2 kB file, a width of a million) would cost minutes or the machine's memory. Its
sizes are compared with the weights first: the layer count must be theirs, and the parameters its sizes imply at
least (``_check_text_config``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from vitviz.loading.build import check_finite
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import check_logit_scale
from vitviz.messages import echo

TEXT_TOWER_TYPES = ("clip", "siglip")  # image-text models whose folders also give a text tower (vitviz.text)
# what AutoTokenizer reads, across CLIP's byte-level BPE, SigLIP's SentencePiece and SigLIP 2's Gemma tokenizer
TOKENIZER_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "tokenizer.model",
    "added_tokens.json",
]
_TEXT_SIZES = ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings")
_TEXT_LAYER = re.compile(r"text_model\.(?:encoder\.)?layers\.(\d+)\.")


def text_tower(folder: Path, state_dict: Mapping[str, torch.Tensor], config: dict):
    """(text tower, None), or (None, why there is none) for a CLIPModel or SiglipModel folder: the text half
    built by transformers, and the folder's own tokenizer (AutoTokenizer, never downloaded here)."""
    if not any(name.startswith("text_model.") for name in state_dict):
        return None, f"{folder} holds the image tower only (no text_model weights)"
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None, (
            f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES[:5])}...): save the processor "
            "beside the model (processor.save_pretrained(folder)) to read prompts"
        )
    _check_text_config(state_dict, config, source=str(folder))
    from transformers import AutoTokenizer

    from vitviz.text.towers import huggingface_text_tower

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as error:  # a broken or foreign tokenizer: the image tower still works
        return None, f"the tokenizer in {folder} could not be read ({describe(error)})"
    return huggingface_text_tower(state_dict, config, tokenizer, source=str(folder)), None


def _check_text_config(state_dict: Mapping[str, torch.Tensor], config: dict, source: str) -> None:
    """Refuse, before transformers builds anything, a text config whose sizes are not positive integers, whose layer
    count differs from the weights', or whose sizes imply more parameters than the weights hold; and non-finite text
    weights or logit scale."""
    import transformers

    kind = config["model_type"]
    try:
        whole = (transformers.CLIPConfig if kind == "clip" else transformers.SiglipConfig).from_dict(dict(config))
        sizes = {name: getattr(whole.text_config, name) for name in _TEXT_SIZES}
    except Exception as error:  # transformers' own checks of the config's values
        raise ModelLoadError(
            f"{source}: its text_config does not describe a {kind} text tower ({describe(error)})"
        ) from None
    bad = [
        name
        for name, value in sizes.items()
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0)
    ]
    if bad:
        raise ModelLoadError(
            f"{source}: text_config's {', '.join(bad)} must be positive integers; got "
            f"{echo([sizes[name] for name in bad], 80)}"
        )
    weights = {name: t for name, t in state_dict.items() if name.startswith("text_model.")}
    layers = len({match[1] for name in weights if (match := _TEXT_LAYER.match(name))})
    if sizes["num_hidden_layers"] != layers:
        raise ModelLoadError(
            f"{source}: its text_config asks for {sizes['num_hidden_layers']:,} text layers; the "
            f"weights have {layers:,}"
        )
    width, mlp = sizes["hidden_size"], sizes["intermediate_size"]
    embeddings = (sizes["vocab_size"] + sizes["max_position_embeddings"]) * width
    least = layers * (4 * width * width + 2 * width * mlp) + embeddings  # attention, MLP, embeddings: no biases
    held = sum(t.numel() for t in weights.values() if isinstance(t, torch.Tensor))
    if least > held:
        raise ModelLoadError(
            f"{source}: its text_config describes a text tower of at least {least:,} parameters; its "
            f"weights hold {held:,}"
        )
    check_finite(
        {
            name: t
            for name, t in state_dict.items()
            if name.startswith(("text_model.", "text_projection.", "visual_projection."))
        },
        source,
    )
    check_logit_scale(state_dict.get("logit_scale"), state_dict.get("logit_bias"), source)
