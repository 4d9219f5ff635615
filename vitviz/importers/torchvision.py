"""torchvision's ``VisionTransformer`` (vit_b_16 ... vit_h_14) into vitviz's ViT."""

from __future__ import annotations

from torch import nn

from vitviz.checkpoint import ModelLoadError, build_model
from vitviz.importers.common import rename
from vitviz.model import ViT, ViTConfig

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
