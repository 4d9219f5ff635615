"""timm's ``SwinTransformer`` (swin_*, swin_s3_*), ``SwinTransformerV2`` (swinv2_*) and ``SwinTransformerV2Cr``
(swinv2_cr_*) into vitviz's Swin.

The architecture is read from the modules (each block's window and shift as timm built them, for the model's
img_size), so a model created with other arguments (img_size, window_size, depths...) converts too. timm shifts
before it pads, and takes inputs of its img_size (or any multiple of the patch size with dynamic_img_size): the
converted model follows it (``SwinConfig.padding="timm"``). swinv2_cr is Swin v2 with its own position MLP, the
merging normed first, main-branch norms on some blocks and no final norm (``SwinConfig``'s last four fields). What
vitviz's Swin cannot reproduce is refused by name.

timm is imported inside the functions: ``import vitviz`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import torch
from torch import nn

from vitviz.loading.build_swin import build_swin
from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.common import rename
from vitviz.model.swin import Swin, SwinConfig
from vitviz.model.swin_config import CR_HIDDEN

SWIN_CLASSES = ("SwinTransformer", "SwinTransformerV2", "SwinTransformerV2Cr")
# timm's hierarchical families vitviz's Swin does not cover, with the reason
REFUSED = {
    "Hiera": (
        "timm's Hiera is not supported: its mask units and pooled queries make attention whose query and key tokens "
        "differ, which vitviz's window attention does not express"
    ),
}
_RULES = [
    (r"patch_embed\.(proj|norm)\.", r"patch_embed.\1."),
    (r"(?:layers|stages)\.(\d+)\.downsample\.(norm|reduction)\.", r"stages.\1.merge.\2."),
    (r"(?:layers|stages)\.(\d+)\.blocks\.(\d+)\.", r"stages.\1.blocks.\2."),
    (r"norm\.", r"norm."),
    (r"head\.fc\.", r"head."),
]


def is_timm_swin(model: nn.Module) -> bool:
    """Whether ``model`` is one of timm's Swin classes, or a hierarchical family this module refuses by name."""
    return type(model).__name__ in (*SWIN_CLASSES, *REFUSED)


def from_timm_swin(model: nn.Module) -> Swin:
    """Convert a timm SwinTransformer, SwinTransformerV2 or SwinTransformerV2Cr (any weights); class names and
    preprocessing are the loader's (``load_model("timm:<name>")``)."""
    config = timm_swin_config(model)
    source = f"timm {type(model).__name__}"
    state_dict = rename(dict(model.state_dict()), _RULES, source=source)
    if config.position_mlp == "cr":  # swinv2_cr's per-head scale is (heads,); vitviz's broadcasts as (heads, 1, 1)
        for name in [n for n in state_dict if n.endswith(".attn.logit_scale")]:
            state_dict[name] = state_dict[name].reshape(-1, 1, 1)
    for name in [n for n in state_dict if n.endswith(".attn.q_bias")]:  # v2: q and v biases, the key's fixed at 0
        q, v = state_dict.pop(name), state_dict.pop(name.replace(".q_bias", ".v_bias"))
        state_dict[name.replace(".q_bias", ".qkv.bias")] = torch.cat([q, torch.zeros_like(q), v])
    return build_swin(config, state_dict, source)


def timm_swin_config(model: nn.Module) -> SwinConfig:
    """The SwinConfig that reproduces a timm Swin, from its modules' types and sizes (works on the meta device)."""
    name = type(model).__name__
    if name in REFUSED:
        raise ModelLoadError(REFUSED[name])
    if name not in SWIN_CLASSES:
        raise ModelLoadError(f"expected a timm SwinTransformer, SwinTransformerV2 or SwinTransformerV2Cr, got {name}")

    def refuse(feature: str) -> NoReturn:
        raise ModelLoadError(f"this timm {name} uses {feature}, which vitviz's Swin does not have")

    version = 1 if name == "SwinTransformer" else 2
    cr = name == "SwinTransformerV2Cr"
    layers = model.stages if cr else model.layers
    embed = model.patch_embed
    proj = embed.proj
    if proj.kernel_size != proj.stride or proj.kernel_size[0] != proj.kernel_size[1]:
        refuse("a patch embedding other than one square non-overlapping convolution")
    if not isinstance(embed.norm, nn.LayerNorm):
        refuse("a patch embedding without its LayerNorm")
    pool = model.head.global_pool.pool_type if cr else getattr(model, "global_pool", "avg")
    if pool != "avg":
        refuse(f"global_pool={pool!r} (vitviz's Swin averages the last stage's tokens)")
    D = proj.out_channels
    depths, heads, windows, shifts, pretrained, main_norms = [], [], [], [], [], []
    ratio = layers[0].blocks[0].mlp.fc1.out_features / D
    for stage_index, stage in enumerate(layers):
        blocks = list(stage.blocks)
        dim = blocks[0].norm1.normalized_shape[0]
        if dim != D * 2**stage_index:
            refuse(f"stage widths other than doubling from {D} (stage {stage_index + 1} has {dim})")
        if {tuple(b.window_size) for b in blocks} != {tuple(blocks[0].window_size)}:
            refuse("windows that differ between the blocks of a stage")
        odd = {tuple(b.shift_size) for b in blocks[1::2]} or {(0, 0)}
        if len(odd) > 1 or any(any(b.shift_size) for b in blocks[0::2]):
            refuse("a shift pattern other than every second block")
        attn = blocks[0].attn
        if attn.proj.in_features != dim or attn.qkv.out_features != 3 * dim:
            refuse("a head width other than the stage's width / heads")
        for block in blocks:
            # torch's GELU or timm's own (timm.layers.GELU), both exact
            if type(block.mlp.act).__name__ != "GELU" or getattr(block.mlp.act, "approximate", "none") != "none":
                refuse(f"the activation {type(block.mlp.act).__name__}")
            if block.mlp.fc1.out_features != int(dim * ratio):
                refuse("MLP widths that are not one ratio of the stages' widths")
        if cr:
            _check_cr_blocks(blocks, refuse)
            first = sum(depths)
            main_norms += [first + i for i, b in enumerate(blocks) if isinstance(b.norm3, nn.LayerNorm)]
        depths.append(len(blocks))
        heads.append(attn.num_heads)
        windows.append(tuple(blocks[0].window_size))
        shifts.append(odd.pop())
        if version == 2 and not cr:
            side = tuple(attn.pretrained_window_size)
            if side[0] != side[1]:
                refuse(f"a non-square pretraining window {side}")
            pretrained.append(side[0])
    final = [] if cr else [model.norm]  # swinv2_cr has none: its last block norms the main branch
    norms = [*final, embed.norm] + [m for m in layers.modules() if isinstance(m, nn.LayerNorm)]
    if any(not isinstance(n, nn.LayerNorm) for n in norms) or {n.eps for n in norms} != {1e-5}:
        refuse("norms other than LayerNorms of epsilon 1e-5")
    if version == 2 and not cr:
        qkv_bias = blocks[0].attn.q_bias is not None
    else:
        qkv_bias = blocks[0].attn.qkv.bias is not None
    height, width = embed.img_size
    return SwinConfig(
        image_size=(int(height), int(width)),
        patch_size=proj.kernel_size[0],
        num_channels=proj.in_channels,
        embed_dim=D,
        depths=tuple(depths),
        num_heads=tuple(heads),
        window_size=tuple(max(w) for w in windows),
        windows=tuple(windows),
        shifts=tuple(shifts),
        version=version,
        pretrained_windows=tuple(pretrained) if pretrained else None,
        padding="timm",
        mlp_ratio=ratio,
        qkv_bias=qkv_bias,
        layer_norm_eps=1e-5,
        num_classes=model.num_classes,
        main_norms=tuple(main_norms),
        final_norm=not cr,
        merge_norm="before" if cr else None,
        position_mlp="cr" if cr else "swinv2",
    )


def _check_cr_blocks(blocks: list[nn.Module], refuse: Callable[[str], NoReturn]) -> None:
    """Refuse a swinv2_cr stage whose blocks vitviz's Swin would not reproduce: a position MLP other than timm's
    (2 -> 384 -> heads through a ReLU) or a main-branch norm other than a LayerNorm."""
    for block in blocks:
        meta = block.attn.meta_mlp
        if (
            meta.fc1.in_features != 2
            or meta.fc1.out_features != CR_HIDDEN
            or not isinstance(meta.act, nn.ReLU)
            or not isinstance(meta.norm, nn.Identity)
            or meta.fc1.bias is None
            or meta.fc2.bias is None
        ):
            refuse(f"a position MLP other than 2 -> {CR_HIDDEN} -> heads through a ReLU, with biases")
        if not isinstance(block.norm3, (nn.LayerNorm, nn.Identity)):
            refuse(f"the main-branch norm {type(block.norm3).__name__}")
        if block.attn.logit_scale.shape != (block.attn.num_heads,):
            refuse("a logit scale other than one per head")
