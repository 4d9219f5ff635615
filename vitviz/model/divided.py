"""TimeSformer's divided space-time block (Bertasius et al. 2021, "Is Space-Time Attention All You Need for Video
Understanding?"), as transformers' ``TimesformerLayer`` computes it (attention_type "divided_space_time").

A clip's tokens are [CLS], then the patches listed patch-major: token ``1 + n * frames + t`` is patch n (row-major)
in frame t (``ViTConfig.patch_major``). One block, pre-norm as every ViT block:

1. time: each patch's ``frames`` tokens attend to each other (``temporal_norm``, ``temporal_attn``); the result goes
   through ``temporal_dense`` and is added to them. [CLS] takes no part.
2. space: each frame's patches, with a copy of [CLS] in front, attend to each other (``norm1``, ``attn``): sequences
   of 1 + HW tokens, B * frames of them; the [CLS] copies' outputs are averaged back into one and each is added to
   the token it came from.
3. the MLP (``norm2``, ``mlp``), as in ``layers.Block``.

The block returns both attentions as one ``DividedAttention`` wherever a joint block returns its (B, heads, T, T)
weights: in ``BlockOutput.weights`` and to ``ViT.forward``'s ``attention_sink``. Interventions: a key mask (B, T)
takes a token out of both attentions (its frame's spatial sequence, its patch's temporal one); a head mask scales
the spatial attention's heads (those ``ViTOutput.attentions`` holds), the temporal heads stay as trained.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from vitviz.model.config import ViTConfig
from vitviz.model.layers import Attention, AttentionControls, Block, BlockOutput, norm_layer


class DividedAttention(NamedTuple):
    """One divided block's attention weights (post-softmax; rows sum to 1), in transformers' shapes."""

    spatial: torch.Tensor  # (B * frames, heads, 1 + HW, 1 + HW): row b * frames + t is frame t's [CLS] and patches
    temporal: torch.Tensor  # (B * HW, heads, frames, frames): row b * HW + n is patch n's frames


class DividedBlock(Block):
    """TimeSformer's block: temporal attention, spatial attention per frame, MLP (see the module's docstring). A
    joint block's modules (``norm1``, ``attn``: the spatial attention; ``norm2``, ``mlp``) plus the temporal ones."""

    def __init__(self, config: ViTConfig, drop_path: float = 0.0):
        super().__init__(config, drop_path)
        self.frames = config.token_frames
        self.temporal_norm = norm_layer(config, config.hidden_size)
        self.temporal_attn = Attention(config)
        self.temporal_dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        controls: AttentionControls = AttentionControls(),
        need_weights: bool = False,
        need_qkv: bool = False,
        normed: torch.Tensor | None = None,
    ) -> BlockOutput:
        """x (B, 1 + HW * frames, D) -> BlockOutput: the output tokens, ``DividedAttention`` when ``need_weights``,
        and the spatial attention's queries, keys and values ((B * frames, heads, 1 + HW, head_dim)) when
        ``need_qkv``. ``normed`` (a joint block's norm1(x), for Grad-CAM) has no counterpart here: refused."""
        if normed is not None:
            raise ValueError("a divided space-time block (TimeSformer) norms each frame's tokens: it takes no normed")
        B, T, D = x.shape
        F = self.frames
        N = (T - 1) // F
        if T < 1 + F or (T - 1) % F:
            raise ValueError(f"a divided block reads [CLS] and patches of {F} frames each; got {T} tokens")
        spatial_keys, spatial_live, temporal_keys, temporal_live = _key_masks(controls.key_mask, B, N, F)
        head_mask = controls.head_mask
        if head_mask is not None and controls.ablation == "mean":
            raise ValueError(
                "head_ablation='mean' is not supported in divided space-time blocks (TimeSformer): use 'zero'"
            )
        if head_mask is not None and head_mask.shape[0] > 1:
            head_mask = head_mask.repeat_interleave(F, dim=0)  # (B * frames, heads): each frame of a clip alike
        cls, patches = x[:, :1], x[:, 1:]  # (B, 1, D), (B, HW * F, D)
        # time: (B * HW, F, D), each patch's frames
        temporal = self.temporal_attn(
            self.temporal_norm(patches.reshape(B * N, F, D)), AttentionControls(key_mask=temporal_keys), need_weights
        )
        temporal_out = _zero_dead(temporal.out, temporal_live)
        patches = patches + self.temporal_dense(self.drop_path(self.dropout(temporal_out)).reshape(B, N * F, D))
        # space: (B * F, 1 + HW, D), each frame's patches after a copy of [CLS]
        frame_patches = patches.reshape(B, N, F, D).transpose(1, 2).reshape(B * F, N, D)
        spatial_in = torch.cat([cls.expand(B, F, D).reshape(B * F, 1, D), frame_patches], dim=1)
        spatial_controls = AttentionControls(None, head_mask, spatial_keys, controls.ablation)
        spatial = self.attn(self.norm1(spatial_in), spatial_controls, need_weights, need_qkv)
        spatial_out = self.drop_path(self.ls1(self.dropout(_zero_dead(spatial.out, spatial_live))))
        cls_residual = spatial_out[:, 0].reshape(B, F, D).mean(dim=1, keepdim=True)  # the copies, averaged
        patch_residual = spatial_out[:, 1:].reshape(B, F, N, D).transpose(1, 2).reshape(B, N * F, D)
        x = torch.cat([cls, patches], dim=1) + torch.cat([cls_residual, patch_residual], dim=1)
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))
        weights = DividedAttention(spatial.weights, temporal.weights) if need_weights else None
        return BlockOutput(x, weights, spatial.qkv)


def _key_masks(
    key_mask: torch.Tensor | None, batch: int, patches: int, frames: int
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """A clip's key mask (B, 1 + HW * frames) as the spatial attention's (B * frames, 1 + HW) and the temporal
    attention's (B * HW, frames), each with the rows that keep a key (see ``_with_a_key``)."""
    if key_mask is None:
        return None, None, None, None
    grid = key_mask[:, 1:].reshape(batch, patches, frames)  # (B, HW, F)
    spatial = torch.cat([key_mask[:, :1, None].expand(batch, frames, 1), grid.transpose(1, 2)], dim=2)
    return *_with_a_key(spatial.reshape(batch * frames, 1 + patches)), *_with_a_key(grid.reshape(-1, frames))


def _with_a_key(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A sequence whose every key is taken out (every frame of a patch knocked out) reads nothing: its keys are put
    back so the softmax stays finite, and the second value, (rows,) booleans, says whose output is then zeroed."""
    live = mask.any(dim=1)
    if bool(live.all()):
        return mask, None
    return mask | ~live[:, None], live


def _zero_dead(out: torch.Tensor, live: torch.Tensor | None) -> torch.Tensor:
    """The attention's output (rows, tokens, D) with the rows that had no key zeroed."""
    return out if live is None else out * live[:, None, None].to(out.dtype)
