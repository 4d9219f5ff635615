"""The conversion every Hugging Face ViT family shares, image (huggingface.py) or video (huggingface_video.py).

A family is what is its own: the prefix its weights carry, its renaming rules, the weights it leaves out on purpose,
its config class's defaults (config.json files may leave keys out) and a function from its config to the
``ViTConfig`` fields that differ from family to family. ``convert`` does the rest the same way for every family: the
common fields, the size check before anything is built, renaming, q/k/v fusion, zero key biases, the head's classes,
and one ``ModelLoadError`` line for any config that cannot describe a vitviz ViT.
"""

from __future__ import annotations

import math
import re
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from vitviz.loading.build import build_model, check_model_size
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import fuse_qkv, rename
from vitviz.messages import echo
from vitviz.model import ViT, ViTConfig

SOURCE = "Hugging Face checkpoint"
# transformers' hidden_act names -> vitviz's activations
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_fast": "gelu_tanh",  # the tanh approximation, written out
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
}


@dataclass(frozen=True)
class Family:
    prefix: str  # the base model's attribute name, stripped from weight names when present ("": none)
    rules: list[tuple[str, str]]  # every renaming rule, the blocks' included
    unused: str  # weights left out on purpose (full match, after the prefix is stripped)
    defaults: dict  # the Hugging Face config class's defaults
    # (config with defaults, weights) -> the family's own ViTConfig fields; a common field given here (image_size,
    # patch_size...) is taken from it and not read from the config under its common name
    fields: Callable[[Mapping, dict], dict]
    # weights laid out differently from vitviz's, fixed after renaming and fusion: (weights, config) -> weights
    finish: Callable[[dict[str, torch.Tensor], ViTConfig], dict[str, torch.Tensor]] | None = None


def convert(state_dict: Mapping[str, torch.Tensor], config: Mapping, model_type: str, family: Family) -> ViT:
    """A vitviz ViT from a Hugging Face state dict and its config.json (a dict) of ``model_type``, a backbone
    (num_classes=0) where the checkpoint has no classifier."""
    with _described(model_type):
        c = ChainMap(dict(config), family.defaults)
        prefix = re.compile(rf"^{family.prefix}\.") if family.prefix else None
        weights = {name if prefix is None else prefix.sub("", name): t for name, t in state_dict.items()}
        weights = {name: t for name, t in weights.items() if not re.fullmatch(family.unused, name)}
        own = family.fields(c, weights)
        activation = own.pop("activation", None) or _activation(c["hidden_act"])
        common = dict(  # each read only where the family gives no field of that name
            image_size=lambda: c["image_size"],
            num_channels=lambda: c["num_channels"],
            patch_size=lambda: c["patch_size"],
            hidden_size=lambda: c["hidden_size"],
            num_layers=lambda: c["num_hidden_layers"],
            num_heads=lambda: c["num_attention_heads"],
            layer_norm_eps=lambda: c["layer_norm_eps"],
            dropout=lambda: c.get("hidden_dropout_prob", 0.0),
            attention_dropout=lambda: c.get("attention_probs_dropout_prob", c.get("attention_dropout", 0.0)),
        )
        fields = {name: read() for name, read in common.items() if name not in own}
        num_classes = weights["classifier.weight"].shape[0] if "classifier.weight" in weights else 0
        vit_config = ViTConfig(**(fields | dict(activation=activation, num_classes=num_classes) | own))
        check_model_size(vit_config, f"the Hugging Face {model_type} model")  # before anything is built
        weights = fuse_qkv(zero_key_biases(rename(weights, family.rules, source=SOURCE)))
        if "head.weight" in weights:  # DeiT's cls_classifier too
            vit_config = replace(vit_config, num_classes=weights["head.weight"].shape[0])
        if family.finish is not None:
            weights = family.finish(weights, vit_config)
    return build_model(vit_config, weights, source=SOURCE)


@contextmanager
def _described(model_type: str) -> Iterator[None]:
    """Any error a hostile config causes inside becomes one ModelLoadError line naming the model type."""
    try:
        yield
    except ModelLoadError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError, ArithmeticError) as error:
        raise ModelLoadError(
            f"Hugging Face config cannot describe a vitviz ViT ({model_type}): {describe(error)}"
        ) from None


def _activation(name: object) -> str:
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ModelLoadError(f"hidden_act {echo(name)} is not supported; vitviz has {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def square_side(size: object, name: str) -> object:
    """A square patch's side from an int or an (h, w) pair with h == w; one ModelLoadError line for a non-square pair
    (anything else is returned as it is, for ``ViTConfig`` to check)."""
    if isinstance(size, (list, tuple)) and len(size) == 2 and size[0] == size[1]:
        return size[0]
    if isinstance(size, (list, tuple)):
        raise ModelLoadError(f"{name} must be square (vitviz's patches are); got {echo(size, 80)}")
    return size


def real_number(config: Mapping, key: str) -> int | float:
    """The config's ``key``, checked to be a finite real number (an int or a float, not a bool): one ModelLoadError
    line otherwise, before it is computed with (``"4" * 64`` would repeat a string)."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ModelLoadError(f"{key} must be a finite real number; got {echo(value, 80)}")
    return value


def zero_key_biases(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A zero key bias where the query has a bias and the key none (DINOv3's key_bias=False, VideoMAE's key): adding 0
    is exact. Empty tensors (DINOv3's register_tokens of a model without registers) are dropped."""
    out = {name: t for name, t in weights.items() if t.numel() > 0}
    for name in [n for n in out if n.endswith((".attn.q.bias", ".attn.query.bias"))]:
        stem = name.removesuffix(".q.bias").removesuffix(".query.bias")
        if f"{stem}.k.bias" not in out and f"{stem}.key.bias" not in out:
            out[name.replace(".q.bias", ".k.bias").replace(".query.bias", ".key.bias")] = torch.zeros_like(out[name])
    return out
