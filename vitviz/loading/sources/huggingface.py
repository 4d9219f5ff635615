"""Hugging Face state dicts and configs into vitviz's ViT: one table of rules per model type.

    model_type             classes
    vit                    ViTModel, ViTForImageClassification
    deit                   DeiTModel, DeiTForImageClassification, DeiTForImageClassificationWithTeacher
    dinov2                 Dinov2Model, Dinov2ForImageClassification ([CLS] and mean patch token, side by side)
    dinov2_with_registers  the same with register tokens
    clip_vision_model      CLIPVisionModel, CLIPVisionModelWithProjection (backbones)
    clip                   CLIPModel: its vision half, as a backbone
    siglip_vision_model    SiglipVisionModel (a backbone pooled by its attention head; headless: its mean token)
    siglip                 SiglipModel: its vision half, as a backbone
    dinov3_vit             DINOv3ViTModel (rotary embeddings, storage tokens, GELU or SwiGLU MLP; a backbone)
    aimv2_vision_model     Aimv2VisionModel (RMSNorm, SwiGLU, no [CLS]; a backbone read by its mean patch token)
    aimv2                  Aimv2Model: its vision half
    ijepa                  IJepaModel (no [CLS]; a backbone read by its mean patch token)
    swin, swinv2           SwinModel, SwinForImageClassification, Swinv2...: into vitviz's Swin (huggingface_swin.py)
    videomae, vivit        VideoMAE..., Vivit...: video ViTs over clips (huggingface_video.py)
    timesformer            Timesformer...: divided (or joint) space-time attention (huggingface_video.py)
    vjepa2                 VJEPA2Model (the encoder), VJEPA2ForVideoClassification: 3-D rotary, the attentive pooler
                           (huggingface_vjepa2.py)

Each family is a table of renaming rules (plus the per-block rules all families share), the
defaults of its Hugging Face config class (config.json files may leave them out), and a small
function turning its config into ``ViTConfig`` fields; huggingface_convert.py does the rest, the same way for every
family, image or video. Converted models reproduce the originals' outputs and every attention map
(tests/test_import_huggingface.py).

The image tower needs no transformers. Folders and Hub repositories are read by ``huggingface_folder``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import torch

from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.common import add_zero_biases
from vitviz.loading.sources.huggingface_convert import Family, convert
from vitviz.loading.sources.huggingface_swin import HIERARCHICAL_TYPES, SWIN_TYPES, from_huggingface_swin
from vitviz.loading.sources.huggingface_video import VIDEO_TYPES, from_huggingface_video
from vitviz.loading.sources.huggingface_vjepa2 import VJEPA2_TYPES, from_huggingface_vjepa2
from vitviz.messages import echo
from vitviz.model import ViT, ViTConfig

# Encoder blocks, as files on the Hub (and transformers 4) name them -- encoder.layer.i (ViT, DeiT,
# DINOv2), encoder.layers.i (CLIP, SigLIP) -- and as transformers 5 models in memory do (layers.i).
_BLOCK = r"(?:encoder\.layers?|layers|(?:model\.)?layer)\.(\d+)\."
_BLOCK_RULES = [
    (_BLOCK + r"(?:layernorm_before|norm1|layer_norm1|rms_norm1)\.", r"blocks.\1.norm1."),
    (_BLOCK + r"(?:layernorm_after|norm2|layer_norm2|rms_norm2)\.", r"blocks.\1.norm2."),
    (_BLOCK + r"attention\.attention\.(query|key|value)\.", r"blocks.\1.attn.\2."),
    (_BLOCK + r"(?:attention|self_attn)\.(q|k|v)_proj\.", r"blocks.\1.attn.\2."),
    (
        _BLOCK + r"(?:attention\.output\.dense|attention\.o_proj|self_attn\.out_proj|attention\.out_proj)\.",
        r"blocks.\1.attn.proj.",
    ),
    (_BLOCK + r"(?:intermediate\.dense|mlp\.fc1|(?:mlp|ffn)\.up_proj)\.", r"blocks.\1.mlp.fc1."),
    (_BLOCK + r"(?:output\.dense|mlp\.fc2|(?:mlp|ffn)\.down_proj)\.", r"blocks.\1.mlp.fc2."),
    (_BLOCK + r"(?:mlp|ffn)\.gate_proj\.", r"blocks.\1.mlp.gate."),
    (_BLOCK + r"layer_scale([12])\.lambda1", r"blocks.\1.ls\2.gamma"),
]
_VIT_RULES = [
    (r"embeddings\.cls_token", r"cls_token"),
    (r"embeddings\.position_embeddings", r"pos_embed"),
    (r"embeddings\.patch_embeddings\.projection\.", r"patch_embed.proj."),
    (r"layernorm\.", r"norm."),
    (r"classifier\.", r"head."),
]
_DEIT_RULES = _VIT_RULES + [
    (r"embeddings\.distillation_token", r"dist_token"),
    (r"cls_classifier\.", r"head."),
    (r"distillation_classifier\.", r"head_dist."),
]
_DINOV2_RULES = _VIT_RULES + [(r"embeddings\.register_tokens", r"register_tokens")]
_CLIP_RULES = [
    (r"embeddings\.class_embedding", r"cls_token"),  # (D,): reshaped in _fix_layout
    (r"embeddings\.patch_embedding\.weight", r"patch_embed.proj.weight"),  # no bias: zeros are added
    (r"embeddings\.position_embedding\.weight", r"pos_embed"),  # an nn.Embedding, (1 + N, D)
    (r"pre_layrnorm\.", r"norm_pre."),  # sic
    (r"post_layernorm\.", r"norm."),
]
_DINOV3_RULES = [
    (r"embeddings\.cls_token", r"cls_token"),
    (r"embeddings\.register_tokens", r"register_tokens"),  # DINOv3's storage tokens
    (r"embeddings\.patch_embeddings\.", r"patch_embed.proj."),
    (r"norm\.", r"norm."),
]
_AIMV2_RULES = [
    (r"embeddings\.patch_embed\.", r"patch_embed.proj."),
    (r"embeddings\.rms_norm\.", r"patch_embed.norm."),  # AIMv2's norm inside the patch embedding
    (r"embeddings\.position_embedding\.weight", r"pos_embed"),  # (N, D): no [CLS]
    (r"rms_norm\.", r"norm."),
]
_SIGLIP_RULES = [
    (r"embeddings\.patch_embedding\.", r"patch_embed.proj."),
    (r"embeddings\.position_embedding\.weight", r"pos_embed"),  # (N, D): no [CLS]
    (r"post_layernorm\.", r"norm."),
    (r"head\.probe", r"attn_pool.query"),
    (r"head\.attention\.in_proj_(weight|bias)", r"attn_pool.in_proj.\1"),  # split into q and kv in _fix_layout
    (r"head\.attention\.out_proj\.", r"attn_pool.proj."),
    (r"head\.layernorm\.", r"attn_pool.norm."),
    (r"head\.mlp\.", r"attn_pool.mlp."),
]

# Defaults of the Hugging Face config classes, for keys a config.json leaves out (the SigLIP files
# on the Hub give little more than the patch size). Tests compare them with transformers'.
_VIT_DEFAULTS = dict(
    image_size=224,
    patch_size=16,
    num_channels=3,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    hidden_act="gelu",
    layer_norm_eps=1e-12,
    qkv_bias=True,
)
_DINOV2_DEFAULTS = {
    **{k: v for k, v in _VIT_DEFAULTS.items() if k != "intermediate_size"},
    **dict(patch_size=14, mlp_ratio=4, layer_norm_eps=1e-6, use_swiglu_ffn=False),
}
_CLIP_DEFAULTS = {
    **{k: v for k, v in _VIT_DEFAULTS.items() if k != "qkv_bias"},
    **dict(patch_size=32, hidden_act="quick_gelu", layer_norm_eps=1e-5),
}


def _vit_config(c: Mapping, weights: dict) -> dict:
    return dict(mlp_size=c["intermediate_size"], qkv_bias=c["qkv_bias"])


def _deit_config(c: Mapping, weights: dict) -> dict:
    """DeiTForImageClassification reads [CLS] only; ...WithTeacher averages a second head on the distillation token."""
    has_teacher_head = "distillation_classifier.weight" in weights
    return dict(_vit_config(c, weights), distillation_token=True, distillation_head=has_teacher_head)


def _dinov2_config(c: Mapping, weights: dict, registers: bool) -> dict:
    """The classifier reads [CLS] and the mean patch token side by side ("cls+mean").

    With registers, Hugging Face gives [CLS] a position embedding but not the registers that follow
    it: _fix_layout folds [CLS]'s position into the token, so vitviz's position embeddings are the
    patches' alone (pos_embed_prefix=False). That model's interpolation is antialiased, plain DINOv2's is not.
    """
    if c["use_swiglu_ffn"]:
        raise ModelLoadError(
            "DINOv2 with a SwiGLU feed-forward layer (use_swiglu_ffn=True, e.g. dinov2-giant) is not supported: "
            "vitviz's ViT has a GELU MLP"
        )
    return dict(
        mlp_size=int(c["hidden_size"] * c["mlp_ratio"]),
        qkv_bias=c["qkv_bias"],
        layer_scale=True,
        pooling="cls+mean" if "classifier.weight" in weights else "cls",
        num_register_tokens=c["num_register_tokens"] if registers else 0,
        pos_embed_prefix=not registers,
        pos_embed_antialias=registers,
    )


def _dinov3_config(c: Mapping, weights: dict) -> dict:
    """DINOv3: [CLS] and storage tokens, LayerScale, no position table, DINOv3's rotary embedding (rope_theta), a
    GELU or gated (SwiGLU) MLP; pooler_output is the normed [CLS]. Its key bias, when absent, becomes zeros."""
    if not (c["query_bias"] == c["value_bias"]) or not c["proj_bias"] or not c["mlp_bias"]:
        raise ModelLoadError(
            "DINOv3 with a query bias but no value bias (or the reverse), or without projection or "
            "MLP biases, is not supported"
        )
    if c["use_gated_mlp"] and c["hidden_act"] not in ("silu", "swish"):
        raise ModelLoadError(f"a gated MLP with {c['hidden_act']!r}: vitviz's gated MLP is SwiGLU (silu)")
    return dict(
        mlp_size=c["intermediate_size"],
        qkv_bias=bool(c["query_bias"] or c["key_bias"]),
        layer_scale=True,
        num_register_tokens=c["num_register_tokens"],
        absolute_positions=False,
        rotary="dinov3",
        rotary_temperature=float(c["rope_theta"]),
        gated_mlp=bool(c["use_gated_mlp"]),
        **({"activation": "gelu"} if c["use_gated_mlp"] else {}),  # unused: SwiGLU's SiLU is its own
    )


def _ijepa_config(c: Mapping, weights: dict) -> dict:
    """I-JEPA's encoder: a ViT without [CLS], read out by the mean patch token (a backbone)."""
    return dict(mlp_size=c["intermediate_size"], qkv_bias=c["qkv_bias"], class_token=False, pooling="mean")


def _aimv2_config(c: Mapping, weights: dict) -> dict:
    """AIMv2's image tower: RMSNorm everywhere (one inside the patch embedding), SwiGLU, no [CLS], a learned position
    table, read out by the mean patch token as timm does. Its optional attention-pooling head (use_head, the LiT
    variants) has a form vitviz's pooling head does not: refused."""
    if c["use_head"] and any(name.startswith("head.") for name in weights):
        raise ModelLoadError(
            "AIMv2 with its attention-pooling head (use_head=True, the LiT variants) is not supported: "
            "its head has no query projection and no MLP, unlike vitviz's; the backbones load"
        )
    if c.get("is_native"):
        raise ModelLoadError(
            "AIMv2's native-resolution variant (is_native=True, sine-cosine positions) is not supported"
        )
    if c["hidden_act"] not in ("silu", "swish"):
        raise ModelLoadError(f"AIMv2 with {c['hidden_act']!r}: vitviz's gated MLP is SwiGLU (silu)")
    return dict(
        mlp_size=c["intermediate_size"],
        qkv_bias=c["qkv_bias"],
        class_token=False,
        pooling="mean",
        norm="rmsnorm",
        patch_norm=True,
        gated_mlp=True,
        layer_norm_eps=c["rms_norm_eps"],
        activation="gelu",
    )


def _clip_config(c: Mapping, weights: dict) -> dict:
    """A backbone whose pooled vector is Hugging Face's ``pooler_output`` (post_layernorm of [CLS]).

    ``visual_projection`` (CLIPVisionModelWithProjection, CLIPModel) is dropped: it maps that vector
    into the space shared with text embeddings, not onto classes. Hugging Face normalises only the
    pooled [CLS]; vitviz normalises every token, so ``last_hidden_state`` differs, attentions do not.
    """
    if "classifier.weight" in weights:
        raise ModelLoadError(
            "CLIPForImageClassification is not supported: its classifier reads the mean patch token before any "
            "LayerNorm, which vitviz's ViT cannot express; CLIPVisionModel and CLIPModel folders load (as backbones)"
        )
    return dict(mlp_size=c["intermediate_size"], norm_pre=True)


def _siglip_config(c: Mapping, weights: dict) -> dict:
    """No [CLS]; the pooled vector comes from the attention-pooling head ("map"), as ``pooler_output`` does. Without
    the head (vision_use_head=False: no ``pooler_output``) the mean patch token is read, as for I-JEPA."""
    if "classifier.weight" in weights:
        raise ModelLoadError(
            "SiglipForImageClassification is not supported; SiglipVisionModel and SiglipModel folders load (as "
            "backbones pooled by their attention head)"
        )
    if not c["vision_use_head"]:  # the towers of VLMs (PaliGemma, Gemma 3, LLaVA-OneVision): a backbone
        return dict(mlp_size=c["intermediate_size"], class_token=False, pooling="mean")
    return dict(mlp_size=c["intermediate_size"], class_token=False, pooling="map")


def _family(
    prefix: str,
    rules: list[tuple[str, str]],
    unused: str,
    defaults: dict,
    fields: Callable[[Mapping, dict], dict],
    patch_bias: bool = True,
) -> Family:
    """An image family: its rules then the per-block rules all share; its weights laid out as vitviz's after renaming
    (``_fix_layout``), with zero biases where the source has none (``patch_bias=False``: its patch convolution)."""

    def finish(weights: dict[str, torch.Tensor], config: ViTConfig) -> dict[str, torch.Tensor]:
        return add_zero_biases(config, _fix_layout(weights, config, patch_bias))

    return Family(prefix, rules + _BLOCK_RULES, unused, defaults, fields, finish)


# Weights left out on purpose: the masked-image-modelling token, ViT's and DeiT's tanh pooler (not used
# for classification), CLIP's projection into the text-image space, and the text half of image-text models.
_VIT_UNUSED = r"embeddings\.mask_token|pooler\.dense\..*"
_CLIP_UNUSED = r"embeddings\.position_ids|visual_projection\.weight|text_model\..*|text_projection\.weight|logit_scale"
_FAMILIES = {
    "vit": _family("vit", _VIT_RULES, _VIT_UNUSED, _VIT_DEFAULTS, _vit_config),
    "deit": _family("deit", _DEIT_RULES, _VIT_UNUSED, _VIT_DEFAULTS, _deit_config),
    "dinov2": _family(
        "dinov2", _DINOV2_RULES, r"embeddings\.mask_token", _DINOV2_DEFAULTS, partial(_dinov2_config, registers=False)
    ),
    "dinov2_with_registers": _family(
        "dinov2_with_registers",
        _DINOV2_RULES,
        r"embeddings\.mask_token",
        {**_DINOV2_DEFAULTS, "patch_size": 16, "num_register_tokens": 4},
        partial(_dinov2_config, registers=True),
    ),
    "dinov3_vit": _family(
        "",
        _DINOV3_RULES,
        r"embeddings\.mask_token",
        dict(
            _VIT_DEFAULTS,
            patch_size=16,
            layer_norm_eps=1e-5,
            rope_theta=100.0,
            query_bias=True,
            key_bias=False,
            value_bias=True,
            proj_bias=True,
            mlp_bias=True,
            use_gated_mlp=False,
            num_register_tokens=0,
        ),
        _dinov3_config,
    ),
    "ijepa": _family("ijepa", _VIT_RULES, r"embeddings\.mask_token|pooler\.dense\..*", _VIT_DEFAULTS, _ijepa_config),
    "aimv2_vision_model": _family(
        "vision_model",
        _AIMV2_RULES,
        r"embeddings\.position_ids|text_model\..*|logit_scale|visual_projection\..*|"
        r"text_projection\..*",
        dict(
            _VIT_DEFAULTS,
            patch_size=14,
            hidden_act="silu",
            rms_norm_eps=1e-5,
            qkv_bias=False,
            use_head=True,
            is_native=False,
            layer_norm_eps=1e-5,
        ),
        _aimv2_config,
    ),
    "clip_vision_model": _family("vision_model", _CLIP_RULES, _CLIP_UNUSED, _CLIP_DEFAULTS, _clip_config, False),
    "siglip_vision_model": _family(
        "vision_model",
        _SIGLIP_RULES,
        r"embeddings\.position_ids|text_model\..*|logit_scale|logit_bias",
        {
            **_CLIP_DEFAULTS,
            "patch_size": 16,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6,
            "vision_use_head": True,
        },
        _siglip_config,
    ),
}
_VISION_HALF = {
    "clip": "clip_vision_model",
    "siglip": "siglip_vision_model",
    "aimv2": "aimv2_vision_model",
}  # image-text models: vision_config
SUPPORTED_MODEL_TYPES = tuple(sorted([*_FAMILIES, *_VISION_HALF, *SWIN_TYPES, *VIDEO_TYPES, *VJEPA2_TYPES]))


def from_huggingface(state_dict: dict[str, torch.Tensor], config: dict) -> ViT:
    """Convert a Hugging Face state dict of one of the model types in this module's docstring.

    ``config`` is the model's config.json as a dict. Models without a classification head become
    backbones (num_classes=0). Class names come from ``id2label`` (see ``huggingface_folder.load_huggingface_folder``).
    """
    if not isinstance(config, Mapping) or not isinstance(state_dict, Mapping):
        raise ModelLoadError("a Hugging Face checkpoint needs a state dict and a config dict")
    model_type = config.get("model_type", "vit")
    if not isinstance(model_type, str):
        raise ModelLoadError(f"a Hugging Face model_type is a name; got {echo(model_type, 80)}")
    if model_type in _VISION_HALF:  # CLIPModel, SiglipModel: the vision tower only
        config = config.get("vision_config") or {}
        model_type = _VISION_HALF[model_type]
        if not isinstance(config, Mapping):
            raise ModelLoadError(
                f"Hugging Face config cannot describe a vitviz ViT ({model_type}): its vision_config "
                f"is not an object but {echo(config, 80)}"
            )
    if model_type in HIERARCHICAL_TYPES:  # vitviz's Swin, not its ViT (Hiera: refused there)
        return from_huggingface_swin(state_dict, config)
    if model_type in VIDEO_TYPES:  # clips: tubelet embeddings
        return from_huggingface_video(state_dict, config)
    if model_type in VJEPA2_TYPES:  # clips: a 3-D rotary embedding and an attentive pooler (huggingface_vjepa2.py)
        return from_huggingface_vjepa2(state_dict, config)
    family = _FAMILIES.get(model_type)
    if family is None:
        raise ModelLoadError(
            f"Hugging Face model_type {echo(model_type)} is not supported; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return convert(state_dict, config, model_type, family)


def _fix_layout(weights: dict[str, torch.Tensor], config: ViTConfig, patch_bias: bool) -> dict[str, torch.Tensor]:
    """Where Hugging Face lays out a weight differently from vitviz; shapes are checked by build_model."""
    for name in ("cls_token", "pos_embed"):  # CLIP's (D,) and nn.Embedding (P, D) -> (1, P, D)
        if name in weights and weights[name].ndim in (1, 2):
            weights[name] = weights[name].reshape(1, -1, weights[name].shape[-1])
    if config.class_token and not config.pos_embed_prefix and {"cls_token", "pos_embed"} <= weights.keys():
        # [CLS] has a position but the registers after it have none: fold it into the token
        weights["cls_token"] = weights["cls_token"] + weights["pos_embed"][:, :1]
        weights["pos_embed"] = weights["pos_embed"][:, 1:]
    for kind in ("weight", "bias"):  # nn.MultiheadAttention's in_proj: q rows, then k and v rows
        fused = weights.pop(f"attn_pool.in_proj.{kind}", None)
        if fused is not None:
            D = fused.shape[0] // 3
            weights[f"attn_pool.q.{kind}"], weights[f"attn_pool.kv.{kind}"] = fused[:D], fused[D:]
    if not patch_bias:
        weights["patch_embed.proj.bias"] = torch.zeros(config.hidden_size)
    return weights
