"""Hugging Face video ViTs into vitviz's ViT: clips (B, frames, C, H, W) cut into tubelets or per-frame patches.

    model_type  classes
    videomae    VideoMAEModel, VideoMAEForVideoClassification (the mean token, then fc_norm), VideoMAEForPreTraining's
                encoder (a backbone read by its mean token); fixed sine-cosine positions, no [CLS]
    vivit       VivitModel, VivitForVideoClassification ([CLS], learned positions; VivitModel's tanh pooler is left out)
    timesformer TimesformerModel, TimesformerForVideoClassification ([CLS]; one-frame patches listed patch-major,
                position and time embeddings; attention_type "divided_space_time" (vitviz.model.divided) or
                "joint_space_time"; "space_only", whose classifier gives one prediction per frame, is refused)

Weights are read under the names files carry (transformers 4's ``q_bias`` and ``v_bias`` for VideoMAE, whose key has
no bias) and those of transformers 5's modules. The converted model reads clips of the config's ``num_frames``.
VideoMAE and ViViT read them at the config's ``image_size`` only, as transformers' do by default (their positions
are for that grid of tubelets; ViViT's optional ``interpolate_pos_encoding`` is not reproduced). TimeSformer reads
any frame size whose sides are multiples of the patch size: its position table is resized by nearest neighbour from
its square grid wherever the patch count differs, as transformers' ``TimesformerEmbeddings`` does. Other frame counts
are refused (transformers also resizes TimeSformer's time table to them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import torch

from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.huggingface_convert import Family, convert, square_side
from vitviz.messages import echo
from vitviz.model import ViT

VIDEO_TYPES = ("videomae", "vivit", "timesformer")
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
    "timesformer": dict(
        _COMMON_DEFAULTS,
        patch_size=16,
        num_frames=8,
        hidden_act="gelu",
        layer_norm_eps=1e-6,
        qkv_bias=True,
        attention_type="divided_space_time",
    ),
}
_FC_NORM_EPS = 1e-5  # VideoMAEForVideoClassification's fc_norm is a default nn.LayerNorm, whatever the config says
_BLOCK = r"(?:encoder\.layer|layers)\.(\d+)\."  # VideoMAE's, ViViT's, TimeSformer's
_RULES = [
    (r"embeddings\.patch_embeddings\.projection\.", r"patch_embed.proj."),
    (r"embeddings\.cls_token", r"cls_token"),
    (r"embeddings\.position_embeddings", r"pos_embed"),
    (r"embeddings\.time_embeddings", r"time_embed"),  # TimeSformer's
    (r"(?:layernorm|fc_norm)\.", r"norm."),
    (r"classifier\.", r"head."),
    (_BLOCK + r"layernorm_before\.", r"blocks.\1.norm1."),
    (_BLOCK + r"layernorm_after\.", r"blocks.\1.norm2."),
    (_BLOCK + r"attention\.attention\.(query|key|value|qkv)\.", r"blocks.\1.attn.\2."),
    (_BLOCK + r"temporal_layernorm\.", r"blocks.\1.temporal_norm."),  # TimeSformer's temporal half
    (_BLOCK + r"temporal_attention\.attention\.qkv\.", r"blocks.\1.temporal_attn.qkv."),
    (_BLOCK + r"temporal_attention\.output\.dense\.", r"blocks.\1.temporal_attn.proj."),
    (_BLOCK + r"temporal_dense\.", r"blocks.\1.temporal_dense."),
    (_BLOCK + r"attention\.attention\.(q|v)_bias", r"blocks.\1.attn.\2.bias"),  # transformers 4's VideoMAE
    (_BLOCK + r"attention\.(q|k|v)_proj\.", r"blocks.\1.attn.\2."),
    (_BLOCK + r"attention\.(?:output\.dense|o_proj)\.", r"blocks.\1.attn.proj."),
    (_BLOCK + r"(?:intermediate\.dense|mlp\.fc1)\.", r"blocks.\1.mlp.fc1."),
    (_BLOCK + r"(?:output\.dense|mlp\.fc2)\.", r"blocks.\1.mlp.fc2."),
]
# left out on purpose: VideoMAE pretraining's decoder and mask token, ViViT's tanh pooler (not used by its classifier)
_UNUSED = r"encoder_to_decoder\..*|mask_token|decoder\..*|pooler\.dense\..*"


def from_huggingface_video(state_dict: Mapping[str, torch.Tensor], config: Mapping) -> ViT:
    """Convert a Hugging Face VideoMAE, ViViT or TimeSformer state dict (``config`` is its config.json as a dict)."""
    model_type = config.get("model_type")
    return convert(state_dict, config, model_type, _FAMILIES[model_type])


def _video_fields(own: Callable[[Mapping, dict], dict], c: Mapping, weights: dict) -> dict:
    """What every video family reads the same way (its frames, its MLP's width), then the family's own fields."""
    return dict(num_frames=c["num_frames"], mlp_size=c["intermediate_size"]) | own(c, weights)


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
        patch_size=square_side(c["patch_size"], "patch_size"),
        tubelet_size=c["tubelet_size"],
        class_token=False,
        pooling="mean",
        sinusoidal_positions=True,
        qkv_bias=any(name.endswith(("query.bias", "q_bias")) for name in weights),
        fc_norm=has_fc_norm,
        final_norm=has_fc_norm or has_layernorm,
        final_norm_eps=_FC_NORM_EPS if has_fc_norm else 0.0,
    )


def _vivit_fields(c: Mapping, weights: dict) -> dict:
    """[CLS] and learned positions; tubelet_size is (frames, height, width) of each token's block of pixels."""
    tubelet = c["tubelet_size"]
    if not (isinstance(tubelet, (list, tuple)) and len(tubelet) == 3 and tubelet[1] == tubelet[2]):
        raise ModelLoadError(
            f"ViViT's tubelet_size must be (frames, side, side): vitviz's patches are square; got {echo(tubelet, 80)}"
        )
    return dict(patch_size=tubelet[1], tubelet_size=tubelet[0], qkv_bias=c.get("qkv_bias", True))


def _timesformer_fields(c: Mapping, weights: dict) -> dict:
    """[CLS]; each frame cut into patches, listed patch-major (token 1 + n * frames + t); a position table shared by
    the frames plus a time table shared by the patches; divided or joint space-time attention."""
    kind = c["attention_type"]
    if kind == "space_only":
        raise ModelLoadError(
            "TimeSformer with attention_type='space_only' is not supported: transformers' classifier then gives one "
            "prediction per frame, (B * frames, labels), not one per clip"
        )
    if kind not in ("divided_space_time", "joint_space_time"):
        raise ModelLoadError(
            f"TimeSformer's attention_type must be divided_space_time or joint_space_time; got {echo(kind, 80)}"
        )
    return dict(
        patch_size=square_side(c["patch_size"], "patch_size"),
        qkv_bias=c["qkv_bias"],
        time_embeddings=True,
        patch_major=True,
        attention="divided" if kind == "divided_space_time" else "joint",
    )


_FAMILIES = {
    model_type: Family(model_type, _RULES, _UNUSED, DEFAULTS[model_type], partial(_video_fields, fields))
    for model_type, fields in [
        ("videomae", _videomae_fields),
        ("vivit", _vivit_fields),
        ("timesformer", _timesformer_fields),
    ]
}
