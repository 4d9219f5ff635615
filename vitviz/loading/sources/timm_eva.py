"""timm's ``Eva`` class into vitviz's ViT: the rotary-embedding family.

Converted: DINOv3 (S/16, S+/16, B/16, L/16, H+/16, with or without ``_qkvb``: 4 storage tokens as vitviz's
registers, LayerScale, no position table, DINOv3's axial rotary embedding, GELU or SwiGLU MLPs), EVA-02 (T, S, B, L
and the CLIP image towers: a learned position table and EVA's rotary embedding, SwiGLU packed or split, the norm
inside the MLP and the one on the attention output) and timm's ``vit_*_rope_*`` ViTs. Eva has no key bias: q and
v biases are joined with zeros. Like ``from_timm``, the architecture is read from the modules, and what vitviz's
ViT cannot reproduce yet (q/k norms in Eva blocks, RMSNorm in Eva blocks...) is
refused by name. Called by ``vitviz.loading.sources.from_timm.from_timm``.
"""

from __future__ import annotations

import torch
from torch import nn

from vitviz.loading.errors import ModelLoadError
from vitviz.model import ViTConfig

RULES = [
    (r"cls_token", r"cls_token"),
    (r"reg_token", r"register_tokens"),
    (r"pos_embed", r"pos_embed"),
    (r"rope\.freqs", r"rotary_frequencies"),  # RoPE-Mixed's learned frequencies
    (r"patch_embed\.proj\.", r"patch_embed.proj."),
    (r"blocks\.(\d+)\.gamma_([12])", r"blocks.\1.ls\2.gamma"),
    (r"blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.", r"blocks.\1.\2."),
    (r"blocks\.(\d+)\.attn\.(q|v)_bias", r"blocks.\1.attn.\2_bias"),  # joined with a zero key bias below
    (r"blocks\.(\d+)\.attn\.(q|k|v)_proj\.", r"blocks.\1.attn.\2_proj."),  # joined into qkv below
    (r"blocks\.(\d+)\.attn\.norm\.", r"blocks.\1.attn.norm."),
    (r"blocks\.(\d+)\.mlp\.fc1_g\.", r"blocks.\1.mlp.gate."),  # SwiGLU, split: the gate, then the value
    (r"blocks\.(\d+)\.mlp\.fc1_x\.", r"blocks.\1.mlp.fc1."),
    (r"blocks\.(\d+)\.mlp\.norm\.", r"blocks.\1.mlp.norm."),
    (r"norm_pre\.", r"norm_pre."),
    (r"(norm|fc_norm)\.", r"norm."),  # exactly one of the two has weights
    (r"attn_pool\.latent", r"attn_pool.query"),
    (r"attn_pool\.(q|kv|proj|norm|mlp\.fc1|mlp\.fc2)\.", r"attn_pool.\1."),
    (r"head\.", r"head."),
]


def timm_geometry(model: nn.Module, embed: nn.Module, blocks, attn: nn.Module, refuse) -> dict:
    """The ViTConfig fields that timm's VisionTransformer and Eva hold alike: the input size, patch size and channels,
    width, depth, heads, and the classes of the head (a Linear, or an Identity for none; ``refuse`` rejects others)."""
    head = model.head
    if not isinstance(head, (nn.Linear, nn.Identity)):
        refuse(f"a {type(head).__name__} head")
    height, width = embed.img_size
    return dict(
        image_size=(height, width),
        patch_size=embed.proj.kernel_size[0],
        num_channels=embed.proj.in_channels,
        hidden_size=model.embed_dim,
        num_layers=len(blocks),
        num_heads=attn.num_heads,
        num_classes=head.out_features if isinstance(head, nn.Linear) else 0,
    )


def eva_config(model: nn.Module) -> ViTConfig:
    """The ViTConfig that reproduces a timm Eva model, or a ModelLoadError naming what it cannot reproduce yet."""
    from timm.layers import AttentionPoolLatent, GluMlp, LayerNorm, Mlp, PatchEmbed, SwiGLU
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, RotaryEmbeddingDinoV3, RotaryEmbeddingMixed
    from timm.models.eva import EvaBlock

    def refuse(feature: str):
        raise ModelLoadError(f"this timm Eva model uses {feature}, which vitviz's ViT does not have yet")

    embed = model.patch_embed
    if type(embed) is not PatchEmbed or not isinstance(embed.norm, nn.Identity):
        refuse("a norm inside the patch embedding or another patch embedding")
    proj = embed.proj
    if proj.kernel_size != proj.stride or proj.kernel_size[0] != proj.kernel_size[1]:
        refuse("a patch embedding other than one square non-overlapping convolution")
    pool = getattr(model, "attn_pool", None)
    if pool is not None:  # the Perception Encoder's: one query over every token, prefix included
        if type(pool) is not AttentionPoolLatent or pool.latent_len != 1 or pool.pos_embed is not None:
            refuse("an attention-pooling head with more than one query or its own position embedding")
        if not (isinstance(pool.q_norm, nn.Identity) and isinstance(pool.k_norm, nn.Identity)):
            refuse("q/k normalisation in the pooling head")
        if type(pool.mlp) is not Mlp or pool.mlp.fc1.out_features != model.blocks[0].mlp.fc2.in_features:
            refuse("an attention-pooling head whose MLP differs from the blocks'")
    rotary = _rotary(model.rope, refuse, RotaryEmbeddingCat, RotaryEmbeddingDinoV3, RotaryEmbeddingMixed)
    blocks = list(model.blocks)
    first = blocks[0]
    if any(type(block) is not EvaBlock for block in blocks):
        refuse(f"{type(blocks[0]).__name__} blocks")
    attn, mlp = first.attn, first.mlp
    if type(attn).__name__ not in ("EvaAttention", "AttentionRope") or getattr(attn, "num_kv_groups", 1) != 1:
        refuse(f"{type(attn).__name__} (grouped-query attention?)")
    if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)):
        refuse("q/k normalisation")
    if getattr(attn, "gate", None) is not None:
        refuse("gated attention")
    if attn.head_dim * attn.num_heads != model.embed_dim:
        refuse("a head width other than embed_dim / num_heads")
    attention_norm = not isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity)
    if type(mlp) is Mlp:
        gated, hidden = False, mlp.fc1.out_features
        if type(mlp.act) is not nn.GELU or mlp.act.approximate != "none":
            refuse(f"the activation {type(mlp.act).__name__}")
    elif type(mlp) in (GluMlp, SwiGLU):  # SwiGLU, packed (fc1 holds gate and value) or split (fc1_g, fc1_x)
        gated = True
        hidden = mlp.fc2.in_features
        if type(mlp.act) is not nn.SiLU or (type(mlp) is GluMlp and (mlp.gate_last or mlp.chunk_dim != -1)):
            refuse("a gated MLP other than SwiGLU with the gate first")
    else:
        refuse(f"a {type(mlp).__name__} MLP")
    if pool is not None and (gated or type(pool.mlp.act) is not type(mlp.act)):  # vitviz's pool MLP is the blocks'
        refuse("an attention-pooling head whose MLP differs from the blocks'")
    if (first.gamma_1 is None) != (first.gamma_2 is None):
        refuse("LayerScale on one branch only")
    norms = [m for block in blocks for m in (block.norm1, block.norm2)] + [
        model.norm,
        model.fc_norm,
        mlp.norm,
        model.norm_pre,
    ]
    if any(not isinstance(m, (nn.LayerNorm, LayerNorm, nn.Identity)) for m in norms):
        refuse("a normalisation other than LayerNorm (e.g. RMSNorm)")
    fc_norm = not isinstance(model.fc_norm, nn.Identity)
    final_norm = fc_norm or not isinstance(model.norm, nn.Identity)  # PE-Spatial has neither
    if fc_norm and not isinstance(model.norm, nn.Identity):
        refuse("a norm both before and after pooling")
    pooling = "map" if pool is not None else {"token": "cls", "avg": "mean"}.get(model.global_pool)
    if pooling is None:
        refuse(f"global_pool={model.global_pool!r} (vitviz pools by 'token', 'avg' or an attention-pooling head)")
    registers = model.reg_token.shape[1] if model.reg_token is not None else 0
    return ViTConfig(
        **timm_geometry(model, embed, blocks, attn, refuse),
        mlp_size=hidden,
        pooling=pooling,
        class_token=model.cls_token is not None,
        num_register_tokens=registers,
        pos_embed_prefix=not model.no_embed_class,
        pos_embed_antialias=True,  # timm's resample_abs_pos_embed
        layer_scale=first.gamma_1 is not None,
        fc_norm=fc_norm,
        layer_norm_eps=first.norm1.eps,
        qkv_bias=_has_qkv_bias(attn),
        absolute_positions=model.pos_embed is not None,
        gated_mlp=gated,
        mlp_norm=not isinstance(mlp.norm, nn.Identity),
        attention_norm=attention_norm,
        norm_pre=not isinstance(model.norm_pre, nn.Identity),
        final_norm=final_norm,
        pool_heads=pool.num_heads if pool is not None else 0,
        pool_prefix=pool is not None,
        **rotary,
    )


def _rotary(rope: nn.Module | None, refuse, cat_class: type, dinov3_class: type, mixed_class: type) -> dict:
    """The ViTConfig fields of timm's rotary embedding module, or a refusal for a kind vitviz does not have."""
    if rope is None:
        return {}
    if isinstance(rope, dinov3_class):
        if (
            rope.min_period is not None
            or rope.normalize_coords != "separate"
            or rope.grid_offset
            or rope.grid_indexing != "ij"
            or not rope.rotate_half
        ):
            refuse("a DINOv3 rotary embedding with other coordinates or periods")
        return dict(rotary="dinov3", rotary_temperature=float(rope.temperature))
    if isinstance(rope, cat_class):
        if rope.grid_type != "index" or rope.in_pixels or rope.rotate_half:
            refuse("a rotary embedding on pixel coordinates or in the rotate-half layout")
        reference = tuple(rope.ref_feat_shape) if rope.ref_feat_shape is not None else None
        return dict(
            rotary="eva",
            rotary_temperature=float(rope.temperature),
            rotary_reference_grid=reference,
            rotary_column_first=rope.grid_indexing == "xy",
            rotary_offset=float(rope.grid_offset),
        )
    if isinstance(rope, mixed_class):  # learned frequencies per block and head (RoPE-Mixed), integer positions
        if rope.grid_indexing not in ("ij", "xy") or getattr(rope, "aug_active", False) and rope.training:
            refuse("a RoPE-Mixed embedding with other coordinates")
        return dict(rotary="mixed", rotary_column_first=rope.grid_indexing == "xy")
    refuse(f"{type(rope).__name__}: a rotary embedding vitviz does not have")


def _has_qkv_bias(attn: nn.Module) -> bool:
    if getattr(attn, "qkv", None) is not None:
        return attn.qkv.bias is not None or getattr(attn, "q_bias", None) is not None
    return attn.q_proj.bias is not None


def join_qkv_biases(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Eva's separate query, key and value weights (q_proj, k_proj, v_proj) and its q and v biases (no key bias)
    into vitviz's fused qkv layer: blocks.i.attn.qkv.{weight,bias} in q, k, v order, the key bias zero."""
    out = dict(state_dict)
    for name in [n for n in state_dict if n.endswith(".attn.q_proj.weight")]:
        stem = name.removesuffix(".q_proj.weight")
        out[f"{stem}.qkv.weight"] = torch.cat([out.pop(f"{stem}.{part}_proj.weight") for part in "qkv"])
        if f"{stem}.q_proj.bias" in out:
            out[f"{stem}.q_bias"] = out.pop(f"{stem}.q_proj.bias")
            out[f"{stem}.v_bias"] = out.pop(f"{stem}.v_proj.bias")
    for name in [n for n in out if n.endswith(".attn.q_bias")]:
        stem = name.removesuffix(".q_bias")
        q, v = out.pop(f"{stem}.q_bias"), out.pop(f"{stem}.v_bias")
        out[f"{stem}.qkv.bias"] = torch.cat([q, torch.zeros_like(q), v])
    return out


def split_packed_swiglu(state_dict: dict[str, torch.Tensor], config: ViTConfig) -> dict[str, torch.Tensor]:
    """timm's packed SwiGLU (GluMlp: fc1 holds the gate's rows, then the value's) into vitviz's gate and fc1."""
    out = dict(state_dict)
    if not config.gated_mlp:
        return out
    for name in [n for n in state_dict if n.endswith(".mlp.fc1.weight")]:
        stem = name.removesuffix(".fc1.weight")
        if f"{stem}.gate.weight" in out or out[name].shape[0] != 2 * config.mlp_size:
            continue
        for kind in ("weight", "bias"):
            if f"{stem}.fc1.{kind}" in out:
                out[f"{stem}.gate.{kind}"], out[f"{stem}.fc1.{kind}"] = out[f"{stem}.fc1.{kind}"].chunk(2)
    return out
