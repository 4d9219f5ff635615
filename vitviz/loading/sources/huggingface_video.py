"""Hugging Face video ViTs into vitviz's ViT: tubelet embeddings over clips (B, frames, C, H, W), joint attention.

    model_type  classes
    videomae    VideoMAEModel, VideoMAEForVideoClassification (the mean token, then fc_norm), VideoMAEForPreTraining's
                encoder (a backbone read by its mean token); fixed sine-cosine positions, no [CLS]
    vivit       VivitModel, VivitForVideoClassification ([CLS], learned positions; VivitModel's tanh pooler is left out)

Weights are read under the names files carry (transformers 4's ``q_bias`` and ``v_bias`` for VideoMAE, whose key has
no bias) and those of transformers 5's modules. The converted model reads clips of the config's ``num_frames`` at
its ``image_size`` only, as transformers' does: its positions are for that grid of tubelets.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping

import torch

from vitviz.loading.build import build_model, check_model_size
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import fuse_qkv, rename
from vitviz.messages import echo
from vitviz.model import ViT, ViTConfig

VIDEO_TYPES = ("videomae", "vivit")
# the config classes' defaults, for keys a config.json leaves out
_COMMON_DEFAULTS = dict(
    image_size=224,
    num_channels=3,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
DEFAULTS = {
    "videomae": dict(
        _COMMON_DEFAULTS,
        patch_size=16,
        num_frames=16,
        tubelet_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        qv_bias=True,
        use_mean_pooling=True,
    ),
    "vivit": dict(
        _COMMON_DEFAULTS, num_frames=32, tubelet_size=[2, 16, 16], hidden_act="gelu_fast", layer_norm_eps=1e-6
    ),
}
_FC_NORM_EPS = 1e-5  # VideoMAEForVideoClassification's fc_norm is a default nn.LayerNorm, whatever the config says
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_fast": "gelu_tanh",  # the tanh approximation, written out
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
}
_BLOCK = r"(?:encoder\.layer|layers)\.(\d+)\."  # VideoMAE's, ViViT's
_RULES = [
    (r"embeddings\.patch_embeddings\.projection\.", r"patch_embed.proj."),
    (r"embeddings\.cls_token", r"cls_token"),
    (r"embeddings\.position_embeddings", r"pos_embed"),
    (r"(?:layernorm|fc_norm)\.", r"norm."),
    (r"classifier\.", r"head."),
    (_BLOCK + r"layernorm_before\.", r"blocks.\1.norm1."),
    (_BLOCK + r"layernorm_after\.", r"blocks.\1.norm2."),
    (_BLOCK + r"attention\.attention\.(query|key|value)\.", r"blocks.\1.attn.\2."),
    (_BLOCK + r"attention\.attention\.(q|v)_bias", r"blocks.\1.attn.\2.bias"),  # transformers 4's VideoMAE
    (_BLOCK + r"attention\.(q|k|v)_proj\.", r"blocks.\1.attn.\2."),
    (_BLOCK + r"attention\.(?:output\.dense|o_proj)\.", r"blocks.\1.attn.proj."),
    (_BLOCK + r"(?:intermediate\.dense|mlp\.fc1)\.", r"blocks.\1.mlp.fc1."),
    (_BLOCK + r"(?:output\.dense|mlp\.fc2)\.", r"blocks.\1.mlp.fc2."),
]
# left out on purpose: VideoMAE pretraining's decoder and mask token, ViViT's tanh pooler (not used by its classifier)
_UNUSED = r"encoder_to_decoder\..*|mask_token|decoder\..*|pooler\.dense\..*"


def from_huggingface_video(state_dict: Mapping[str, torch.Tensor], config: Mapping) -> ViT:
    """Convert a Hugging Face VideoMAE or ViViT state dict (``config`` is its config.json as a dict)."""
    model_type = config.get("model_type")
    try:
        c = ChainMap(dict(config), DEFAULTS[model_type])
        prefix = re.compile(rf"^{model_type}\.")
        weights = {prefix.sub("", name): t for name, t in state_dict.items()}
        weights = {name: t for name, t in weights.items() if not re.fullmatch(_UNUSED, name)}
        activation = _ACTIVATIONS.get(c["hidden_act"])
        if activation is None:
            supported = ", ".join(_ACTIVATIONS)
            raise ModelLoadError(f"hidden_act {echo(c['hidden_act'])} is not supported; vitviz has {supported}")
        family = _videomae_fields(c, weights) if model_type == "videomae" else _vivit_fields(c)
        vit_config = ViTConfig(
            image_size=c["image_size"],
            num_channels=c["num_channels"],
            hidden_size=c["hidden_size"],
            num_layers=c["num_hidden_layers"],
            num_heads=c["num_attention_heads"],
            mlp_size=c["intermediate_size"],
            activation=activation,
            layer_norm_eps=c["layer_norm_eps"],
            dropout=c["hidden_dropout_prob"],
            attention_dropout=c["attention_probs_dropout_prob"],
            num_frames=c["num_frames"],
            num_classes=weights["classifier.weight"].shape[0] if "classifier.weight" in weights else 0,
            **family,
        )
        check_model_size(vit_config, f"the Hugging Face {model_type} model")  # before anything is built
        weights = rename(weights, _RULES, source="Hugging Face checkpoint")
        weights = fuse_qkv(_zero_key_biases(weights))
    except ModelLoadError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError) as error:
        raise ModelLoadError(
            f"Hugging Face config cannot describe a vitviz ViT ({model_type}): {describe(error)}"
        ) from None
    return build_model(vit_config, weights, source="Hugging Face checkpoint")


def _videomae_fields(c: Mapping, weights: dict) -> dict:
    """No [CLS]; positions from the fixed sine-cosine table; the key has no bias (zeros are added). The classifier
    reads the mean token through fc_norm (use_mean_pooling); without it, VideoMAEModel's final LayerNorm norms every
    token and the backbone is read by its mean token."""
    has_fc_norm, has_layernorm = "fc_norm.weight" in weights, "layernorm.weight" in weights
    if has_fc_norm and has_layernorm:
        raise ModelLoadError(
            "a VideoMAE checkpoint with both fc_norm and layernorm weights is not one transformers makes"
        )
    if "classifier.weight" in weights and not has_fc_norm:
        raise ModelLoadError(
            "VideoMAEForVideoClassification with use_mean_pooling=False is not supported: its classifier reads the "
            "first tubelet token as if it were a [CLS] token, which vitviz's pooling does not express"
        )
    return dict(
        patch_size=_side(c["patch_size"], "patch_size"),
        tubelet_size=c["tubelet_size"],
        class_token=False,
        pooling="mean",
        sinusoidal_positions=True,
        qkv_bias=any(name.endswith(("query.bias", "q_bias")) for name in weights),
        fc_norm=has_fc_norm,
        final_norm=has_fc_norm or has_layernorm,
        final_norm_eps=_FC_NORM_EPS if has_fc_norm else 0.0,
    )


def _vivit_fields(c: Mapping) -> dict:
    """[CLS] and learned positions; tubelet_size is (frames, height, width) of each token's block of pixels."""
    tubelet = c["tubelet_size"]
    if not (isinstance(tubelet, (list, tuple)) and len(tubelet) == 3 and tubelet[1] == tubelet[2]):
        raise ModelLoadError(
            f"ViViT's tubelet_size must be (frames, side, side): vitviz's patches are square; got {echo(tubelet, 80)}"
        )
    return dict(patch_size=tubelet[1], tubelet_size=tubelet[0], qkv_bias=c.get("qkv_bias", True))


def _side(size: object, name: str) -> int:
    """A square patch's side from an int or an (h, w) pair with h == w."""
    if isinstance(size, (list, tuple)) and len(size) == 2 and size[0] == size[1]:
        return size[0]
    if isinstance(size, (list, tuple)):
        raise ModelLoadError(f"{name} must be square (vitviz's patches are); got {echo(size, 80)}")
    return size


def _zero_key_biases(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """VideoMAE's key has no bias where its query has one: a zero bias is exact."""
    out = dict(weights)
    for name in [n for n in out if n.endswith(".attn.q.bias") or n.endswith(".attn.query.bias")]:
        key = name.replace(".attn.q.bias", ".attn.k.bias").replace(".attn.query.bias", ".attn.key.bias")
        if key not in out and key.replace(".k.", ".key.") not in out and key.replace(".key.", ".k.") not in out:
            out[key] = torch.zeros_like(out[name])
    return out
