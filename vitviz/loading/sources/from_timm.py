"""timm's ``VisionTransformer`` and ``VisionTransformerDistilled`` into vitviz's ViT.

One converter covers the families timm builds from these two classes: the original ViT and
AugReg, DeiT (with its distillation token and two heads) and DeiT III, DINO, DINOv2 with or without
registers, CLIP and SigLIP image towers, MAE, and the average-pooled models without [CLS].
``from_timm`` reads the architecture from the modules themselves, not from a model name, so a
model built with other arguments converts too. What vitviz's ViT cannot reproduce (rotary
embeddings, relative position bias, SwiGLU, q/k normalisation...) is refused with a message
that names the feature.

timm is imported inside the functions: ``import vitviz`` stays fast.
"""

from __future__ import annotations

import math

from torch import nn

from vitviz.loading.build import build_model
from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.common import add_zero_biases, rename
from vitviz.loading.sources.from_timm_swin import from_timm_swin, is_timm_swin, timm_swin_config
from vitviz.loading.sources.timm_eva import RULES as EVA_RULES
from vitviz.loading.sources.timm_eva import eva_config, join_qkv_biases, split_packed_swiglu, timm_geometry
from vitviz.model import ViT, ViTConfig
from vitviz.preprocessing import Preprocessing

# timm classes that are not plain ViTs, and the feature that keeps each out
_OTHER_FAMILIES = {
    "Beit": "relative position bias (BEiT)",
    "VisionTransformerRelPos": "relative position bias",
    "VisionTransformerSAM": "windowed attention with relative position (SAM)",
    "NaFlexVit": "variable-resolution patch sequences (NaFlex)",
    "VisionTransformerHybrid": "a convolutional stem (hybrid ViT)",
}
_RULES = [
    (r"cls_token", r"cls_token"),
    (r"dist_token", r"dist_token"),
    (r"reg_token", r"register_tokens"),
    (r"pos_embed", r"pos_embed"),
    (r"patch_embed\.(proj|norm)\.", r"patch_embed.\1."),
    (r"norm_pre\.", r"norm_pre."),
    (
        r"blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|attn\.q_norm|attn\.k_norm|attn\.norm|mlp\.fc1|mlp\.fc2|mlp\.norm)\.",
        r"blocks.\1.\2.",
    ),
    (r"blocks\.(\d+)\.mlp\.fc1_g\.", r"blocks.\1.mlp.gate."),  # SwiGLU, split: the gate, then the value
    (r"blocks\.(\d+)\.mlp\.fc1_x\.", r"blocks.\1.mlp.fc1."),
    (r"blocks\.(\d+)\.(ls1|ls2)\.gamma", r"blocks.\1.\2.gamma"),
    (r"(norm|fc_norm)\.", r"norm."),  # exactly one of the two has weights
    (r"attn_pool\.latent", r"attn_pool.query"),
    (r"attn_pool\.(q|kv|proj|norm|mlp\.fc1|mlp\.fc2)\.", r"attn_pool.\1."),
    (r"head\.", r"head."),
    (r"head_dist\.", r"head_dist."),
]


def from_timm(model: nn.Module) -> ViT:
    """Convert a timm ``VisionTransformer`` or ``VisionTransformerDistilled`` instance (any weights).

    The result reproduces the original's output (logits, or pooled features for a model without a
    head) and every block's attention weights. Class names and preprocessing are not part of a timm
    model; ``load_model("timm:<name>")`` attaches them from timm's pretrained config.
    """
    if is_timm_swin(model):  # hierarchical: vitviz's Swin, not its ViT
        return from_timm_swin(model)
    config = timm_config(model)
    source = f"timm {type(model).__name__}"
    if type(model).__name__ == "Eva":  # the rotary-embedding family (DINOv3)
        state_dict = join_qkv_biases(rename(model.state_dict(), EVA_RULES, source=source))
        state_dict = split_packed_swiglu(state_dict, config)
    else:
        state_dict = split_packed_swiglu(rename(model.state_dict(), _RULES, source=source), config)
    return build_model(config, add_zero_biases(config, state_dict), source=source)


def timm_config(model: nn.Module) -> ViTConfig:
    """The ViTConfig that reproduces a timm model, or a ModelLoadError naming what cannot be reproduced.
    Reads module types and sizes only, so it works on a model built on the meta device (no weights)."""
    from timm.models.vision_transformer import VisionTransformer

    name = type(model).__name__
    if name == "Eva":
        return eva_config(model)
    if is_timm_swin(model):
        return timm_swin_config(model)
    if not isinstance(model, VisionTransformer):
        for family, feature in _OTHER_FAMILIES.items():
            if name == family or name.startswith(family):
                raise ModelLoadError(f"timm {name} uses {feature}, which vitviz's ViT does not have")
        raise ModelLoadError(f"expected a timm VisionTransformer, got {name}")
    return ViTConfig(**_describe(model))


def _describe(model: nn.Module) -> dict:
    """The ViTConfig fields of a timm VisionTransformer, refusing every feature vitviz cannot reproduce."""
    from timm.layers import AttentionPoolLatent, GluMlp, LayerScale, Mlp, PatchEmbed, SwiGLU
    from timm.layers.attention import Attention
    from timm.models.vision_transformer import Block

    def refuse(feature: str):
        raise ModelLoadError(f"this timm {type(model).__name__} uses {feature}, which vitviz's ViT does not have")

    embed = model.patch_embed
    if type(embed) is not PatchEmbed:
        refuse(f"a {type(embed).__name__} patch embedding (a convolutional stem?)")
    proj = embed.proj
    if not isinstance(proj, nn.Conv2d) or proj.kernel_size != proj.stride or proj.kernel_size[0] != proj.kernel_size[1]:
        refuse("a patch embedding other than one square non-overlapping convolution")
    if getattr(embed, "dynamic_img_pad", False):
        refuse("padding of images that are not a multiple of the patch size (dynamic_img_pad)")
    if getattr(model, "pool_include_prefix", False):
        refuse("pooling that includes the prefix tokens (pool_include_prefix)")

    blocks = list(model.blocks)
    first = blocks[0]
    if any(type(block) is not Block for block in blocks):
        refuse(f"{type(next(b for b in blocks if type(b) is not Block)).__name__} blocks (not pre-norm x + f(LN(x)))")
    attn, mlp = first.attn, first.mlp
    if type(attn) is not Attention:
        refuse(f"{type(attn).__name__} (e.g. rotary embeddings)")
    if isinstance(attn.q_norm, nn.Identity) != isinstance(attn.k_norm, nn.Identity):
        refuse("a norm on the queries or on the keys alone")
    if getattr(attn, "gate", None) is not None:
        refuse("gated attention")
    if attn.head_dim * attn.num_heads != model.embed_dim:
        refuse("a head width other than embed_dim / num_heads")
    if type(mlp) in (SwiGLU, GluMlp):  # SwiGLU, split (fc1_g, fc1_x) or packed with the gate first
        if type(mlp.act) is not nn.SiLU or (type(mlp) is GluMlp and (mlp.gate_last or mlp.chunk_dim != -1)):
            refuse("a gated MLP other than SwiGLU with the gate first")
    elif type(mlp) is not Mlp:
        refuse(f"a {type(mlp).__name__} MLP")
    for module in (first.ls1, first.ls2):
        if not isinstance(module, (LayerScale, nn.Identity)):
            refuse(f"{type(module).__name__} on the residual branches")
    norms = [
        m
        for block in blocks
        for m in (
            block.norm1,
            block.norm2,
            block.attn.q_norm,
            block.attn.k_norm,
            getattr(block.attn, "norm", nn.Identity()),
            block.mlp.norm,
        )
    ]
    norm = _norm_kind(norms + [model.norm, model.fc_norm, model.norm_pre, embed.norm], refuse)
    fc_norm = not isinstance(model.fc_norm, nn.Identity)
    if fc_norm == (not isinstance(model.norm, nn.Identity)):
        refuse("no final norm, or two of them" if not fc_norm else "a norm both before and after pooling")

    distilled = hasattr(model, "dist_token")
    pooling = {"token": "cls", "avg": "mean", "map": "map"}.get(model.global_pool)
    if pooling is None:
        refuse(f"global_pool={model.global_pool!r} (vitviz pools by 'token', 'avg' or 'map')")
    if pooling == "map":
        pool = model.attn_pool
        if type(pool) is not AttentionPoolLatent or pool.latent_len != 1 or pool.pos_embed is not None:
            refuse("an attention-pooling head with more than one query or its own position embedding")
        if not (isinstance(pool.q_norm, nn.Identity) and isinstance(pool.k_norm, nn.Identity)):
            refuse("q/k normalisation in the pooling head")
        if (
            pool.num_heads != attn.num_heads
            or type(pool.mlp) is not Mlp
            or pool.mlp.fc1.out_features != mlp.fc1.out_features
        ):
            refuse("an attention-pooling head whose heads or MLP differ from the blocks'")
        if type(pool.mlp.act) is not type(mlp.act):
            refuse("an attention-pooling head whose activation differs from the blocks'")
    return dict(
        **timm_geometry(model, embed, blocks, attn, refuse),
        mlp_size=mlp.fc2.in_features,
        pooling=pooling,
        class_token=model.cls_token is not None,
        distillation_token=distilled,
        distillation_head=distilled,
        num_register_tokens=model.num_reg_tokens,
        pos_embed_prefix=not model.no_embed_class,
        pos_embed_antialias=True,  # timm's resample_abs_pos_embed
        norm_pre=not isinstance(model.norm_pre, nn.Identity),
        layer_scale=isinstance(first.ls1, LayerScale),
        activation=_activation(mlp.act, refuse) if type(mlp) is Mlp else "gelu",  # SwiGLU's SiLU is its own
        fc_norm=fc_norm,
        layer_norm_eps=first.norm1.eps,
        qkv_bias=attn.qkv.bias is not None,
        gated_mlp=type(mlp) is not Mlp,
        mlp_norm=not isinstance(mlp.norm, nn.Identity),
        attention_norm=not isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity),
        qk_norm=not isinstance(attn.q_norm, nn.Identity),
        norm=norm,
        patch_norm=not isinstance(embed.norm, nn.Identity),
        absolute_positions=model.pos_embed is not None,  # pos_embed="none": no positions at all
    )


def _norm_kind(modules: list[nn.Module], refuse) -> str:
    """ "layernorm" or "rmsnorm": the one kind of norm among ``modules`` (Identity aside), else a refusal."""
    from timm.layers import RmsNorm

    kinds = {
        "layernorm"
        if isinstance(m, nn.LayerNorm)
        else "rmsnorm"
        if isinstance(m, (RmsNorm, nn.RMSNorm))
        else type(m).__name__
        for m in modules
        if not isinstance(m, nn.Identity)
    }
    if len(kinds) != 1 or not kinds <= {"layernorm", "rmsnorm"}:
        refuse(f"norms of kinds {', '.join(sorted(kinds))} (vitviz has one kind per model: LayerNorm or RMSNorm)")
    return kinds.pop()


def _activation(module: nn.Module, refuse) -> str:
    name = type(module).__name__
    if isinstance(module, nn.GELU):
        return "gelu_tanh" if module.approximate == "tanh" else "gelu"
    kinds = {"GELU": "gelu", "GELUTanh": "gelu_tanh", "QuickGELU": "quick_gelu"}  # timm.layers.activations
    if name not in kinds:
        refuse(f"the activation {name}")
    return kinds[name]


def imagenet_class_names(model: nn.Module) -> list[str] | None:
    """The model's class names from timm's own ImageNet metadata (shipped with timm), or None."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset(model) if getattr(model, "num_classes", 0) else None
    if subset is None:
        return None
    names = ImageNetInfo(subset).label_descriptions()
    return [str(n) for n in names] if len(names) == model.num_classes else None


def preprocessing_from_timm(model: nn.Module) -> Preprocessing:
    """timm's evaluation transform (resolve_data_config) as a vitviz Preprocessing.

    "center" crop mode: the shorter side to floor(size / crop_pct), then a centre crop; "squash":
    both sides to floor(size / crop_pct), then a centre crop. Other modes are squashed to the input size.
    """
    from timm.data import resolve_data_config

    data = resolve_data_config({}, model=model)
    _, height, width = data["input_size"]
    crop_pct = data.get("crop_pct") or 0.875
    mode = data.get("crop_mode") or "center"
    interpolation = data.get("interpolation", "bicubic")
    if interpolation not in ("nearest", "bilinear", "bicubic"):
        interpolation = "bicubic"
    scaled = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    if mode == "center" and height == width:
        resize, crop = scaled[0], height
    elif mode == "squash":
        resize, crop = scaled, (height, width)
    else:
        resize, crop = (height, width), None
    return Preprocessing(
        resize=resize, crop=crop, mean=tuple(data["mean"]), std=tuple(data["std"]), interpolation=interpolation
    )
