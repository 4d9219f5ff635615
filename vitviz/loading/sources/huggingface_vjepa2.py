"""Hugging Face's V-JEPA 2 into vitviz's ViT: tubelets of 2 frames, no [CLS], no position table (a 3-D rotary embedding
instead, ``rotary="vjepa2"``), the encoder's final LayerNorm, and the classifier's attentive pooler.

    model_type  classes
    vjepa2      VJEPA2ForVideoClassification (the attentive pooler, ``pooling="attentive"``, then the classifier),
                VJEPA2Model (its encoder: a backbone read by its mean token; ``last_hidden_state`` is transformers')

VJEPA2Model's predictor (the JEPA pretraining's, which predicts masked tokens' features from the others) is left out:
it explains no prediction of the encoder's. The converted model reads clips of any number of frames (whole tubelets;
an image is repeated to fill one, as transformers does) at the config's ``crop_size`` only: its rotary positions are
made from the crop's grid, so other sizes are refused rather than read with wrong positions.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vitviz.loading.sources.common import fuse_qkv
from vitviz.loading.sources.huggingface_convert import Family, convert, real_number, square_side
from vitviz.model import ViT, ViTConfig

VJEPA2_TYPES = ("vjepa2",)
DEFAULTS = dict(  # VJEPA2Config's defaults (vjepa2-vitl-fpc64-256), for keys a config.json leaves out
    patch_size=16,
    crop_size=256,
    frames_per_clip=64,
    tubelet_size=2,
    hidden_size=1024,
    in_chans=3,
    num_attention_heads=16,
    num_hidden_layers=24,
    drop_path_rate=0.0,
    mlp_ratio=4.0,
    layer_norm_eps=1e-6,
    qkv_bias=True,
    attention_probs_dropout_prob=0.0,
    hidden_act="gelu",
    num_pooler_layers=3,
)
ROPE_THETA = 10000.0  # transformers' rotate_queries_or_keys: fixed, not in the config
_LAYER = r"encoder\.layer\.(\d+)\."
_POOL_LAYER = r"pooler\.self_attention_layers\.(\d+)\."
_CROSS = r"pooler\.cross_attention_layer\."
_RULES = [
    (r"encoder\.embeddings\.patch_embeddings\.proj\.", r"patch_embed.proj."),
    (_LAYER + r"norm([12])\.", r"blocks.\1.norm\2."),
    (_LAYER + r"attention\.(query|key|value)\.", r"blocks.\1.attn.\2."),
    (_LAYER + r"attention\.proj\.", r"blocks.\1.attn.proj."),
    (_LAYER + r"mlp\.(fc[12])\.", r"blocks.\1.mlp.\2."),
    (r"encoder\.layernorm\.", r"norm."),
    (r"pooler\.query_tokens", r"attn_pool.query"),
    # the pooler's blocks are named pool.blocks.<i>. until _pooler_blocks fuses their q, k, v and moves them
    (_POOL_LAYER + r"layer_norm([12])\.", r"pool.blocks.\1.norm\2."),
    (_POOL_LAYER + r"self_attn\.(q|k|v)_proj\.", r"pool.blocks.\1.attn.\2."),
    (_POOL_LAYER + r"self_attn\.out_proj\.", r"pool.blocks.\1.attn.proj."),
    (_POOL_LAYER + r"mlp\.(fc[12])\.", r"pool.blocks.\1.mlp.\2."),
    (_CROSS + r"layer_norm([12])\.", r"attn_pool.cross.norm\1."),
    (_CROSS + r"cross_attn\.(q|k|v)_proj\.", r"attn_pool.cross.\1."),
    (_CROSS + r"mlp\.(fc[12])\.", r"attn_pool.cross.mlp.\1."),
    (r"classifier\.", r"head."),
]
_UNUSED = r"predictor\..*"  # VJEPA2Model's predictor: pretraining only


def from_huggingface_vjepa2(state_dict: Mapping[str, torch.Tensor], config: Mapping) -> ViT:
    """Convert a Hugging Face VJEPA2Model or VJEPA2ForVideoClassification state dict (``config``: its config.json)."""
    return convert(state_dict, config, "vjepa2", FAMILY)


def _fields(c: Mapping, weights: dict) -> dict:
    """V-JEPA 2's names for the common fields (crop_size, in_chans, mlp_ratio, frames_per_clip), and its own: no
    [CLS], no position table but the 3-D rotary embedding, and the attentive pooler where there is a classifier (a
    VJEPA2Model is read by its mean token)."""
    classifier = "classifier.weight" in weights
    return dict(
        image_size=c["crop_size"],
        num_channels=c["in_chans"],
        patch_size=square_side(c["patch_size"], "patch_size"),
        mlp_size=int(real_number(c, "hidden_size") * real_number(c, "mlp_ratio")),  # as VJEPA2MLP: int(D * ratio)
        drop_path=c["drop_path_rate"],
        qkv_bias=c["qkv_bias"],
        num_frames=c["frames_per_clip"],
        tubelet_size=c["tubelet_size"],
        class_token=False,
        absolute_positions=False,
        rotary="vjepa2",
        rotary_temperature=ROPE_THETA,
        pooling="attentive" if classifier else "mean",
        pool_layers=c["num_pooler_layers"] if classifier else 0,
    )


def _pooler_blocks(weights: dict[str, torch.Tensor], config: ViTConfig) -> dict[str, torch.Tensor]:
    """The pooler's self-attention blocks, named ``pool.blocks.<i>.`` (which the encoder's q/k/v fusion leaves alone),
    have their q, k and v fused as an encoder block's and move under ``attn_pool.``: they are vitviz's ``Block``."""
    pool = {name.removeprefix("pool."): t for name, t in weights.items() if name.startswith("pool.")}
    rest = {name: t for name, t in weights.items() if not name.startswith("pool.")}
    return rest | {f"attn_pool.{name}": t for name, t in fuse_qkv(pool).items()}


# image_size and num_channels are V-JEPA 2's crop_size and in_chans (_fields): convert reads no common name for them
FAMILY = Family("vjepa2", _RULES, _UNUSED, DEFAULTS, _fields, _pooler_blocks)
