"""Hugging Face Swin and Swin v2 state dicts and configs into vitviz's Swin.

    model_type   classes
    swin         SwinModel, SwinForImageClassification (and SwinForMaskedImageModeling's encoder, as a backbone)
    swinv2       Swinv2Model, Swinv2ForImageClassification (likewise)

Weights are read under the names files carry (transformers 4's, which transformers 5 still writes: ``attention.self.
query``, ``intermediate.dense``...) and those of transformers 5's modules in memory (``attention.q_proj``,
``mlp.fc1``...). The converted model follows transformers' conventions (``SwinConfig``): the padding goes in before
the cyclic shift; Swin decides per input that a stage whose grid fits in one window is not shifted, Swin v2 fixes
each stage's window and shift from the config's image_size (along the height, as transformers does), and adds the
shift's mask twice (so -200). ``pretrained_window_sizes`` set the scale of Swin v2's position offsets.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping

import torch

from vitviz.loading.build_swin import build_swin
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import fuse_qkv, rename
from vitviz.loading.sources.huggingface_convert import ACTIVATIONS, zero_key_biases
from vitviz.messages import echo
from vitviz.model.swin import Swin, SwinConfig

SWIN_TYPES = ("swin", "swinv2")
HIERARCHICAL_TYPES = (*SWIN_TYPES, "hiera")  # the model types this module answers for, Hiera by a refusal
HIERA_REFUSAL = (
    "Hugging Face Hiera (model_type hiera) is not supported: its mask units and pooled queries make attention whose "
    "query and key tokens differ, which vitviz's window attention does not express"
)
# the config classes' defaults, for keys a config.json leaves out (tests compare them with transformers')
DEFAULTS = dict(
    image_size=224,
    patch_size=4,
    num_channels=3,
    embed_dim=96,
    depths=[2, 2, 6, 2],
    num_heads=[3, 6, 12, 24],
    window_size=7,
    mlp_ratio=4.0,
    qkv_bias=True,
    hidden_act="gelu",
    use_absolute_embeddings=False,
    layer_norm_eps=1e-5,
    pretrained_window_sizes=[0, 0, 0, 0],
)
_BLOCK = r"encoder\.layers\.(\d+)\.blocks\.(\d+)\."
_QKV_NAMES = (("q", "query"), ("k", "key"), ("v", "value"))  # transformers 5's module names, 4's in files
_RULES = [
    (r"embeddings\.patch_embeddings\.projection\.", r"patch_embed.proj."),
    (r"embeddings\.norm\.", r"patch_embed.norm."),
    (r"embeddings\.position_embeddings", r"pos_embed"),
    (r"merge\.(\d+)\.", r"stages.\1.merge."),  # renamed from encoder.layers.<i>.downsample first (_merge_names)
    (_BLOCK + r"layernorm_before\.", r"stages.\1.blocks.\2.norm1."),
    (_BLOCK + r"layernorm_after\.", r"stages.\1.blocks.\2.norm2."),
    (_BLOCK + r"attention\.(?:self\.)?(query|key|value)\.", r"stages.\1.blocks.\2.attn.\3."),
    *((_BLOCK + rf"attention\.{short}_proj\.", rf"stages.\1.blocks.\2.attn.{name}.") for short, name in _QKV_NAMES),
    (_BLOCK + r"attention\.(?:output\.dense|o_proj)\.", r"stages.\1.blocks.\2.attn.proj."),
    (
        _BLOCK + r"attention\.(?:self|relative_position_bias)\.relative_position_bias_table",
        r"stages.\1.blocks.\2.attn.relative_position_bias_table",
    ),
    (_BLOCK + r"attention\.self\.logit_scale", r"stages.\1.blocks.\2.attn.logit_scale"),
    (_BLOCK + r"attention\.self\.continuous_position_bias_mlp\.", r"stages.\1.blocks.\2.attn.cpb_mlp."),
    (_BLOCK + r"(?:intermediate\.dense|mlp\.fc1)\.", r"stages.\1.blocks.\2.mlp.fc1."),
    (_BLOCK + r"(?:output\.dense|mlp\.fc2)\.", r"stages.\1.blocks.\2.mlp.fc2."),
    (r"layernorm\.", r"norm."),
    (r"classifier\.", r"head."),
]
# left out on purpose: buffers older files saved (recomputed by vitviz), SimMIM's mask token and decoder
_UNUSED = r".*\.(relative_position_index|relative_coords_table)|embeddings\.mask_token|decoder\..*"


def from_huggingface_swin(state_dict: Mapping[str, torch.Tensor], config: Mapping) -> Swin:
    """Convert a Hugging Face ``swin`` or ``swinv2`` state dict with its config.json as a dict (a model without a
    classifier becomes a backbone, num_classes=0)."""
    model_type = config.get("model_type")
    if model_type == "hiera":
        raise ModelLoadError(HIERA_REFUSAL)
    if model_type not in SWIN_TYPES:
        raise ModelLoadError(f"expected a Hugging Face swin or swinv2 config; got model_type {echo(model_type)}")
    source = f"the Hugging Face {model_type} model"
    try:
        swin_config = _swin_config(ChainMap(dict(config), DEFAULTS), model_type, state_dict)
        prefix = re.compile(rf"^{model_type}\.")
        weights = {prefix.sub("", name): t for name, t in state_dict.items()}
        weights = {_merge_names(name): t for name, t in weights.items() if not re.fullmatch(_UNUSED, name)}
        weights = rename(weights, _RULES, source=f"Hugging Face {model_type} checkpoint")
        weights = fuse_qkv(zero_key_biases(weights))  # Swin v2's key has no bias: 0
    except ModelLoadError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError) as error:
        raise ModelLoadError(
            f"Hugging Face config cannot describe a vitviz Swin ({model_type}): {describe(error)}"
        ) from None
    return build_swin(swin_config, weights, source)


def _merge_names(name: str) -> str:
    """transformers merges at the end of a stage, vitviz at the start of the next: encoder.layers.<i>.downsample
    becomes merge.<i + 1>."""
    return re.sub(r"^encoder\.layers\.(\d+)\.downsample\.", lambda m: f"merge.{int(m[1]) + 1}.", name)


def _side(value: object, name: str) -> tuple[int, int]:
    """An int or [height, width] of a config, as (height, width)."""
    pair = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ModelLoadError(f"{name} must be a positive integer or [height, width]; got {echo(value, 80)}")
    return pair


def _swin_config(c: Mapping, model_type: str, weights: Mapping) -> SwinConfig:
    depths, heads = list(c["depths"]), list(c["num_heads"])
    window = c["window_size"]
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ModelLoadError(f"window_size must be a positive integer; got {echo(window, 80)}")
    height, width = _side(c["image_size"], "image_size")
    patch = _side(c["patch_size"], "patch_size")
    if patch[0] != patch[1]:
        raise ModelLoadError(f"patches of {patch[0]}x{patch[1]} pixels: vitviz's Swin has square patches")
    activation = ACTIVATIONS.get(c["hidden_act"]) if isinstance(c["hidden_act"], str) else None
    if activation is None:
        raise ModelLoadError(
            f"hidden_act {echo(c['hidden_act'])} is not supported; vitviz has {', '.join(ACTIVATIONS)}"
        )
    classes = weights.get("classifier.weight")
    fields = dict(
        image_size=(height, width),
        patch_size=patch[0],
        num_channels=c["num_channels"],
        embed_dim=c["embed_dim"],
        depths=tuple(depths),
        num_heads=tuple(heads),
        window_size=window,
        padding="huggingface",
        mlp_ratio=float(c["mlp_ratio"]),
        qkv_bias=bool(c["qkv_bias"]),
        activation=activation,
        layer_norm_eps=float(c["layer_norm_eps"]),
        absolute_positions=bool(c["use_absolute_embeddings"]),
        num_classes=int(classes.shape[0]) if isinstance(classes, torch.Tensor) else 0,
    )
    if model_type == "swin":  # one window everywhere; the shift decided per input
        shift = (window // 2, window // 2)
        return SwinConfig(
            **fields, windows=((window, window),) * len(depths), shifts=(shift,) * len(depths), shift_rule="input"
        )
    if c["use_absolute_embeddings"]:
        raise ModelLoadError(
            "Swin v2 with use_absolute_embeddings=True is not supported: transformers' own Swinv2Model cannot add its "
            "position table (one row more than the patches) to the patches either"
        )
    # transformers' Swinv2Layer: from the height of each stage's grid at image_size (floored), the window cut to it
    # and no shift where it fits
    rows = height // patch[0]
    windows, shifts = [], []
    for stage in range(len(depths)):
        side = min(rows // 2**stage, window)
        windows.append((side, side))
        shifts.append((0, 0) if rows // 2**stage <= side else (window // 2, window // 2))
    pretrained = [*c["pretrained_window_sizes"], *[0] * len(depths)][: len(depths)]  # the default lists 4 stages
    return SwinConfig(
        **fields,
        windows=tuple(windows),
        shifts=tuple(shifts),
        version=2,
        pretrained_windows=tuple(int(p) for p in pretrained),
        mask_value=-200.0,  # transformers' Swinv2SelfAttention adds the mask twice
    )
