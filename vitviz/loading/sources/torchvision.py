"""torchvision's ``VisionTransformer`` (vit_b_16 ... vit_h_14) into vitviz's ViT, and ``load_torchvision`` for
"torchvision:<arch>[:<weights>]" specs: the weights downloaded once into torch's cache, with a timeout."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from vitviz.loading.build import build_model
from vitviz.loading.checkpoint import load_torch_file
from vitviz.loading.download import DOWNLOAD_TIMEOUT_S, download
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import rename
from vitviz.loading.sources.source import ModelSource
from vitviz.messages import echo
from vitviz.model import ViT, ViTConfig
from vitviz.preprocessing import Preprocessing

TORCHVISION_ARCHS = ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14")

# (pattern, replacement) pairs; \1 is the block index
_TORCHVISION_RULES = [
    (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"class_token", r"cls_token"),
    (r"encoder\.pos_embedding", r"pos_embed"),
    (r"encoder\.layers\.encoder_layer_(\d+)\.ln_1\.", r"blocks.\1.norm1."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.ln_2\.", r"blocks.\1.norm2."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.self_attention\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (r"encoder\.layers\.encoder_layer_(\d+)\.self_attention\.out_proj\.", r"blocks.\1.attn.proj."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.mlp\.0\.", r"blocks.\1.mlp.fc1."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.mlp\.3\.", r"blocks.\1.mlp.fc2."),
    (r"encoder\.ln\.", r"norm."),
    (r"heads\.head\.", r"head."),
]


def from_torchvision(model: nn.Module) -> ViT:
    """Convert a ``torchvision.models.VisionTransformer`` (vit_b_16 ... vit_h_14, any weights).

    The result reproduces the original's logits; class names and preprocessing are not
    part of a torchvision model, so ``load_model("torchvision:...")`` attaches them.
    """
    from torchvision.models import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise TypeError(f"expected a torchvision VisionTransformer, got {type(model).__name__}")
    if not hasattr(model, "conv_proj") or model.representation_size is not None:
        raise ModelLoadError("torchvision ViTs with a convolutional stem or a pre-logits layer are not supported")
    blocks = list(model.encoder.layers)
    config = ViTConfig(
        image_size=model.image_size,
        patch_size=model.patch_size,
        hidden_size=model.hidden_dim,
        num_layers=len(blocks),
        num_heads=blocks[0].self_attention.num_heads,
        mlp_size=model.mlp_dim,
        num_classes=model.num_classes,
        dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        layer_norm_eps=blocks[0].ln_1.eps,
    )
    state_dict = rename(model.state_dict(), _TORCHVISION_RULES, source="torchvision model")
    return build_model(config, state_dict, source="torchvision model")


def load_torchvision(name: str) -> ViT:
    """``"vit_b_16"`` or ``"vit_b_16:IMAGENET1K_V1"`` -> converted model with ImageNet class names.

    Weights come from torch's hub cache when present; otherwise they are downloaded with
    a timeout, so an offline machine gets an error in seconds instead of a hang.
    """
    from torchvision import models

    arch, _, weights_name = name.partition(":")
    if arch not in TORCHVISION_ARCHS:
        raise ModelLoadError(f"unknown torchvision ViT {echo(arch)}; choose one of {', '.join(TORCHVISION_ARCHS)}")
    weights_enum = models.get_model_weights(arch)
    weights_name = weights_name.removeprefix(f"{weights_enum.__name__}.") or "DEFAULT"
    try:
        weights = weights_enum[weights_name]
    except KeyError:
        choices = ", ".join(["DEFAULT", *(w.name for w in weights_enum)])
        raise ModelLoadError(f"{arch} has no weights {echo(weights_name)}; choose one of {choices}") from None

    path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    state_dict = _cached_download(weights.url, path)
    image_size = weights.meta["min_size"][0]
    tv_model = models.get_model(arch, weights=None, image_size=image_size, num_classes=len(weights.meta["categories"]))
    try:
        tv_model.load_state_dict(state_dict)
    except Exception as error:  # another model's weights under this name: a message, never a traceback
        raise ModelLoadError(
            f"cached weights {path} are not {arch}'s ({describe(error)}); delete the file and retry"
        ) from None
    model = from_torchvision(tv_model)
    model.class_names = list(weights.meta["categories"])
    model.transform = preprocessing_from_torchvision(weights.transforms())
    return model


def preprocessing_from_torchvision(transform) -> Preprocessing:
    """The same resize/crop/normalisation as a torchvision ``ImageClassification`` preset."""
    return Preprocessing(
        resize=transform.resize_size[0],
        crop=transform.crop_size[0],
        mean=tuple(transform.mean),
        std=tuple(transform.std),
        interpolation=transform.interpolation.value,
    )


def _cached_download(url: str, path: Path, timeout: float = DOWNLOAD_TIMEOUT_S) -> dict[str, torch.Tensor]:
    """State dict from ``path`` in torch's hub cache, downloading it there from ``url`` first if needed."""
    if not path.is_file():
        download(url, path, timeout)
    try:
        return load_torch_file(path)
    except ModelLoadError as error:  # a damaged cache file: say where it is so it can be deleted
        raise ModelLoadError(f"cached weights could not be read: {error}; delete the file and retry") from None


SOURCE = ModelSource(
    "torchvision",
    load_torchvision,
    f"'torchvision:<arch>[:<weights>]' with arch one of {', '.join(TORCHVISION_ARCHS)}",
)
