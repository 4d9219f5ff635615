"""timm's ``Eva`` class into vitviz's ViT: the rotary-embedding family.

Converted so far: DINOv3 with its GELU MLP (ViT-S/16, B/16, L/16, with or without ``_qkvb``): 4 storage tokens
(vitviz's registers), LayerScale, no learned position table, DINOv3's axial rotary embedding on the patch tokens,
the key bias fixed at zero. Like ``from_timm``, the architecture is read from the modules, and what vitviz's ViT
cannot reproduce yet (SwiGLU MLPs, EVA's interleaved rotary embedding, q/k norms, norms inside the attention or
the MLP, attention-pooling heads...) is refused by name. Called by ``vitviz.importers.timm.from_timm``.
"""

from __future__ import annotations

import torch
from torch import nn

from vitviz.checkpoint import ModelLoadError
from vitviz.model import ViTConfig

RULES = [
    (r"cls_token", r"cls_token"),
    (r"reg_token", r"register_tokens"),
    (r"pos_embed", r"pos_embed"),
    (r"patch_embed\.proj\.", r"patch_embed.proj."),
    (r"blocks\.(\d+)\.gamma_([12])", r"blocks.\1.ls\2.gamma"),
    (r"blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.", r"blocks.\1.\2."),
    (r"blocks\.(\d+)\.attn\.(q|v)_bias", r"blocks.\1.attn.\2_bias"),  # joined with a zero key bias below
    (r"(norm|fc_norm)\.", r"norm."),  # exactly one of the two has weights
    (r"head\.", r"head."),
]


def eva_config(model: nn.Module) -> ViTConfig:
    """The ViTConfig that reproduces a timm Eva model, or a ModelLoadError naming what it cannot reproduce yet."""
    from timm.layers import LayerNorm, Mlp, PatchEmbed
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3
    from timm.models.eva import EvaAttention, EvaBlock

    def refuse(feature: str):
        raise ModelLoadError(f"this timm Eva model uses {feature}, which vitviz's ViT does not have yet")

    embed = model.patch_embed
    if type(embed) is not PatchEmbed or not isinstance(embed.norm, nn.Identity):
        refuse("a norm inside the patch embedding or another patch embedding")
    proj = embed.proj
    if proj.kernel_size != proj.stride or proj.kernel_size[0] != proj.kernel_size[1]:
        refuse("a patch embedding other than one square non-overlapping convolution")
    if getattr(model, "attn_pool", None) is not None:
        refuse("an attention-pooling head (Perception Encoder)")
    if not isinstance(model.norm_pre, nn.Identity):
        refuse("a norm before the blocks")
    rope = model.rope
    if rope is not None and not isinstance(rope, RotaryEmbeddingDinoV3):
        refuse(f"{type(rope).__name__}: EVA's interleaved rotary position embeddings (EVA-02, the Perception "
               "Encoder) or learned per-head frequencies (rope_mixed)")  # fmt: skip
    if rope is not None and (rope.min_period is not None or rope.normalize_coords != "separate" or rope.grid_offset
                             or rope.grid_indexing != "ij" or not rope.rotate_half):  # fmt: skip
        refuse("a DINOv3 rotary embedding with other coordinates or periods")
    blocks = list(model.blocks)
    first = blocks[0]
    if any(type(block) is not EvaBlock for block in blocks):
        refuse(f"{type(blocks[0]).__name__} blocks")
    attn, mlp = first.attn, first.mlp
    if type(attn) is not EvaAttention or attn.qkv is None:
        refuse(f"{type(attn).__name__} with separate q, k and v projections")
    if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)):
        refuse("q/k normalisation")
    if not isinstance(attn.norm, nn.Identity):
        refuse("a norm on the attention output (scale_attn_inner)")
    if attn.gate is not None:
        refuse("gated attention")
    if attn.head_dim * attn.num_heads != model.embed_dim:
        refuse("a head width other than embed_dim / num_heads")
    if type(mlp) is not Mlp:
        refuse(f"a {type(mlp).__name__} MLP (SwiGLU)")
    if not isinstance(mlp.norm, nn.Identity):
        refuse("a norm inside the MLP (scale_mlp)")
    if type(mlp.act) is not nn.GELU or mlp.act.approximate != "none":
        refuse(f"the activation {type(mlp.act).__name__}")
    if (first.gamma_1 is None) != (first.gamma_2 is None):
        refuse("LayerScale on one branch only")
    norms = [m for block in blocks for m in (block.norm1, block.norm2)] + [model.norm, model.fc_norm]
    if any(not isinstance(m, (nn.LayerNorm, LayerNorm, nn.Identity)) for m in norms):
        refuse("a normalisation other than LayerNorm (e.g. RMSNorm)")
    fc_norm = not isinstance(model.fc_norm, nn.Identity)
    if fc_norm == (not isinstance(model.norm, nn.Identity)):
        refuse("no final norm, or two of them")
    pooling = {"token": "cls", "avg": "mean"}.get(model.global_pool)
    if pooling is None:
        refuse(f"global_pool={model.global_pool!r} (vitviz pools by 'token' or 'avg')")
    head = model.head
    if not isinstance(head, (nn.Linear, nn.Identity)):
        refuse(f"a {type(head).__name__} head")
    registers = model.reg_token.shape[1] if model.reg_token is not None else 0
    height, width = embed.img_size
    return ViTConfig(
        image_size=(height, width),
        patch_size=proj.kernel_size[0],
        num_channels=proj.in_channels,
        hidden_size=model.embed_dim,
        num_layers=len(blocks),
        num_heads=attn.num_heads,
        mlp_size=mlp.fc1.out_features,
        num_classes=head.out_features if isinstance(head, nn.Linear) else 0,
        pooling=pooling,
        class_token=model.cls_token is not None,
        num_register_tokens=registers,
        pos_embed_prefix=not model.no_embed_class,
        pos_embed_antialias=True,  # timm's resample_abs_pos_embed
        layer_scale=first.gamma_1 is not None,
        fc_norm=fc_norm,
        layer_norm_eps=first.norm1.eps,
        qkv_bias=attn.q_bias is not None,
        absolute_positions=model.pos_embed is not None,
        rotary="dinov3" if rope is not None else "none",
        rotary_temperature=float(rope.temperature) if rope is not None else 100.0,
    )


def join_qkv_biases(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """blocks.i.attn.{q,v}_bias -> blocks.i.attn.qkv.bias (q, a zero key bias, v): Eva has no key bias."""
    out = {}
    for name, tensor in state_dict.items():
        if name.endswith(".attn.q_bias"):
            stem = name.removesuffix(".q_bias")
            values = state_dict[f"{stem}.v_bias"]
            out[f"{stem}.qkv.bias"] = torch.cat([tensor, torch.zeros_like(tensor), values])
        elif not name.endswith(".attn.v_bias"):
            out[name] = tensor
    return out
