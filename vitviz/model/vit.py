"""The Vision Transformer of Dosovitskiy et al. (2020), "An Image is Worth 16x16 Words".

One file, top to bottom in the order data flows: patch embedding -> prefix tokens ([CLS],
distillation, registers) and position embeddings -> pre-norm encoder blocks -> final LayerNorm ->
pooling -> linear head. The optional parts cover the families people use (DeiT, DINO, DINOv2 with
registers, CLIP, SigLIP, MAE; VideoMAE and ViViT, whose clips (B, frames, C, H, W) become tubelet tokens listed
time-major; TimeSformer's patch-major tokens, time embeddings and divided space-time blocks, ``divided.py``; V-JEPA 2's
3-D rotary embedding and attentive pooler, ``attentive_pooler.py``); each is one ``ViTConfig`` field.

Unlike most implementations, the attention weights are *returned* from every block when
asked for (``model(x, output_attentions=True)``) rather than captured with hooks, which
break silently when a library switches to fused attention kernels.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitviz.layout import TokenLayout, grid_layout, prefix_kinds
from vitviz.model.attentive_pooler import AttentivePooler
from vitviz.model.config import ViTConfig
from vitviz.model.divided import DividedAttention, DividedBlock
from vitviz.model.inputs import check_input
from vitviz.model.interventions import (
    ABLATIONS,
    Interventions,
    check_head_mask,
    check_key_mask,
    head_mask_of,
    key_mask_of,
)
from vitviz.model.layers import QKV, Ablation, AttentionControls, AttentionPool, Block, PatchEmbedding, norm_layer
from vitviz.model.rotary import Rope, mixed_angles, rotary_embedding

if TYPE_CHECKING:  # for the annotations only: both modules sit above the model and import from it
    from vitviz.preprocessing import Preprocessing
    from vitviz.text.towers import TextTower

Precision = Literal["fp32", "bf16"]


def autocast(precision: Precision = "fp32", device_type: str = "cpu") -> contextlib.AbstractContextManager:
    """Context for inference at a precision: "bf16" runs matrix products in bfloat16.

    Whether it is faster depends on the CPU (about 2x faster on an AMD EPYC here, 1.7x slower on an Intel Xeon
    without AMX): ``vitviz.model.precision.measure_precision`` times both. Returned attentions stay fp32.
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    raise ValueError(f"precision must be one of 'fp32', 'bf16'; got {precision!r}")


@dataclass
class ViTOutput:
    logits: torch.Tensor | None  # (B, num_classes), None for a backbone
    pooled: torch.Tensor  # (B, D) the representation the head sees
    last_hidden_state: torch.Tensor  # (B, T, D) after the final LayerNorm
    attentions: tuple[torch.Tensor, ...] | None  # per block (B, heads, T, T), rows sum to 1
    grid_size: tuple[int, ...]  # patch grid (rows, cols) of this input; a clip's (frames / tubelet, rows, cols)
    num_prefix_tokens: int  # tokens before the patches; T = num_prefix_tokens + the product of grid_size
    readout: torch.Tensor  # (B, T) how much of each token's final state the head reads; rows sum to 1
    # (B, heads, N) the pooling head's weights on the patches ("map"); "attentive": its query's, on the pooler's last
    # block's tokens (V-JEPA 2; ``readout`` carries them back through the pooler's blocks, attentive_pooler.py)
    pool_attention: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None  # per block, its output (B, T, D), on request
    qkv: tuple[QKV, ...] | None = None  # per block, its queries, keys and values (B, heads, T, head_dim), on request
    layout: TokenLayout | None = None  # every token's kind, pixels and frames (vitviz.layout): what maps are drawn on
    layouts: tuple[TokenLayout, ...] | None = None  # one per block (a plain ViT's blocks all see ``layout``)
    # "attentive" pooling (V-JEPA 2), with output_attentions: per pooler block (B, heads, T, T) (attentive_pooler.py)
    pooler_attentions: tuple[torch.Tensor, ...] | None = None
    # per block, with output_attentions, a divided block's attention over time (B * HW, heads, frames, frames) (row
    # b * HW + n: patch n's frames), None for a joint block; None for a model without divided blocks (TimeSformer's
    # ``attentions[l]`` is then its spatial attention, (B * frames, heads, 1 + HW, 1 + HW), as transformers returns)
    temporal_attentions: tuple[torch.Tensor | None, ...] | None = None


class ViT(nn.Module):
    """Vision Transformer returning logits and, on request, every block's attention weights.

    Besides its modules it carries what a loader knows about it (``vitviz.load_model``, the importers,
    ``load_checkpoint`` fill these in): ``class_names``, ``transform``, ``text_tower`` and ``text_tower_note``, and
    ``training_info``. They are plain attributes, so the state dict, ``parameters()`` and ``.to()`` are the image
    tower's alone.
    """

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.config = config
        D = config.hidden_size
        self.patch_embed = PatchEmbedding(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if config.distillation_token else None
        self.register_tokens = (
            nn.Parameter(torch.zeros(1, config.num_register_tokens, D)) if config.num_register_tokens else None
        )
        rows, cols = config.grid_size
        per_frame = 1 if config.time_embeddings else config.token_frames  # TimeSformer: one table for every frame
        positions = config.prefix_positions + per_frame * rows * cols
        learned = config.absolute_positions and not config.sinusoidal_positions  # VideoMAE's table is computed
        self.pos_embed = nn.Parameter(torch.zeros(1, positions, D)) if learned else None
        # TimeSformer: one learned vector per frame, added to every patch of that frame ([CLS] has none)
        self.time_embed = nn.Parameter(torch.zeros(1, config.token_frames, D)) if config.time_embeddings else None
        # RoPE-Mixed: learned rotary frequencies along both axes, per block and head
        frequencies = (2, config.num_layers, config.num_heads, D // config.num_heads // 2)
        self.rotary_frequencies = nn.Parameter(torch.zeros(frequencies)) if config.rotary == "mixed" else None
        self.pos_dropout = nn.Dropout(config.dropout)
        self.norm_pre = norm_layer(config, D) if config.norm_pre else nn.Identity()
        rates = [config.drop_path * i / max(1, config.num_layers - 1) for i in range(config.num_layers)]
        block = DividedBlock if config.attention == "divided" else Block
        self.blocks = nn.ModuleList(block(config, rate) for rate in rates)
        self.norm = norm_layer(config, D, config.final_norm_eps) if config.final_norm else nn.Identity()
        pools = {"map": AttentionPool, "attentive": AttentivePooler}  # SigLIP's head, V-JEPA 2's pooler
        self.attn_pool = pools[config.pooling](config) if config.pooling in pools else None
        self.head = nn.Linear(config.pooled_size, config.num_classes) if config.num_classes > 0 else None
        self.head_dist = nn.Linear(D, config.num_classes) if config.distillation_head and self.head else None
        # Which attention kernel runs when no weights are asked for: "sdpa" (the fused
        # scaled_dot_product_attention) or "eager" (the explicit softmax path). Same maths; on a
        # CPU with short sequences "eager" is faster to train (bench/bench_train_step.py).
        self.attn_implementation = "sdpa"
        # knock-outs applied to every forward pass (``knock_out``); none by default
        self.interventions = Interventions()
        # one name per logit ("class 0"... until a loader knows better); none for a backbone
        self.class_names: list[str] = [f"class {i}" for i in range(config.num_classes)]
        # PIL image -> the (C, H, W) input this model was trained on; None until a loader or training sets it
        self.transform: Preprocessing | None = None
        # a video model's clip transform, uint8 frames (F, H, W, 3) -> (F, C, H, W) (vitviz.video_clips); set by loaders
        self.clip_transform: Callable | None = None
        # a CLIP or SigLIP model's text half, which turns prompts into classes (``vitviz.zero_shot``); not a
        # module of the ViT, so its weights stay out of the ViT's state dict and parameters
        self.text_tower: TextTower | None = None
        self.text_tower_note: str | None = None  # why an image-text model came without its text tower, if it did
        self.training_info: dict = {}  # a vitviz checkpoint's "training" entry (epochs, arguments, metrics)
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated normal for tokens and linear layers, as in the ViT paper's reference code;
        # a zero head so training starts from uniform predictions
        for param in (self.cls_token, self.dist_token, self.register_tokens, self.pos_embed, self.time_embed):
            if param is not None:
                nn.init.trunc_normal_(param, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if self.rotary_frequencies is not None:  # RoPE-Mixed's start: EVA-like magnitudes, a random direction per head
            _, layers, heads, half = self.rotary_frequencies.shape
            magnitudes = 1.0 / (self.config.rotary_temperature ** (torch.arange(0, 2 * half, 4) / (2 * half)))
            direction = torch.rand(layers, heads, 1) * 2 * math.pi
            x_axis = torch.cat([magnitudes * direction.cos(), magnitudes * (direction + math.pi / 2).cos()], dim=-1)
            y_axis = torch.cat([magnitudes * direction.sin(), magnitudes * (direction + math.pi / 2).sin()], dim=-1)
            with torch.no_grad():
                self.rotary_frequencies.copy_(torch.stack([x_axis, y_axis]))
        fan_in = self.patch_embed.proj.weight[0].numel()  # channels x (tubelet x) patch x patch
        nn.init.trunc_normal_(self.patch_embed.proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.patch_embed.proj.bias)
        if self.attn_pool is not None:
            nn.init.trunc_normal_(self.attn_pool.query, std=0.02)
        for head in (self.head, self.head_dist):
            if head is not None:
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)

    def rotary_embeddings(self, grid: tuple[int, ...]) -> list[Rope | None]:
        """Each block's rotary embedding of a rows x cols grid's patch tokens (sin and cos, (N, head_dim) each, fp32;
        (heads, N, head_dim) with learned per-head frequencies), or None for every block of a model without one.
        Each block rotates its queries and keys by its own; made once per forward pass. A clip's grid (frames /
        tubelet, rows, cols) is read whole by V-JEPA 2's 3-D rotary embedding, by its rows and cols otherwise."""
        c = self.config
        if c.rotary == "mixed":
            angles = mixed_angles(self.rotary_frequencies, grid[-2:], c.rotary_column_first)
            angles = angles.repeat_interleave(2, dim=-1)
            return [Rope(a.sin(), a.cos(), interleaved=True) for a in angles]  # (heads, N, head_dim) per block
        rope = rotary_embedding(
            c.rotary,
            grid,
            c.hidden_size // c.num_heads,
            c.rotary_temperature,
            c.rotary_reference_grid,
            c.rotary_column_first,
            c.rotary_offset,
            self.patch_embed.proj.weight.device,
        )
        return [rope] * c.num_layers

    def block_arguments(
        self,
        grid: tuple[int, int],
        batch: int,
        head_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        head_ablation: Ablation | None = None,
    ) -> list[AttentionControls]:
        """Each block's attention controls for an input of this grid and batch size: its rotary embedding, and the
        interventions (the model's own, ``interventions``, combined with those given: masks multiply). Every pass
        through the blocks takes them from here, so a knocked-out model stays knocked out everywhere."""
        c = self.config
        device = self.patch_embed.proj.weight.device
        tokens = c.num_prefix_tokens + math.prod(grid)
        own = self.interventions
        if head_mask is not None:
            head_mask = check_head_mask(head_mask, batch, c.num_layers, c.num_heads).to(device)
        if own.heads:
            default = head_mask_of(own.heads, c.num_layers, c.num_heads)[None].to(device)  # (1, layers, heads)
            head_mask = default if head_mask is None else head_mask * default
        key_mask = self.token_mask(batch, tokens, key_mask)
        head_ablation = head_ablation or own.ablation
        if head_ablation not in ABLATIONS:
            raise ValueError(f"head_ablation must be one of {ABLATIONS}; got {head_ablation!r}")
        return [
            AttentionControls(rope, None if head_mask is None else head_mask[:, index], key_mask, head_ablation)
            for index, rope in enumerate(self.rotary_embeddings(grid))
        ]

    def token_mask(self, batch: int, tokens: int, key_mask: torch.Tensor | None = None) -> torch.Tensor | None:
        """The (B, T) key mask of a pass: the one given (checked), combined with the tokens this model knocks out
        (``interventions``); None when neither takes a token out."""
        device = self.patch_embed.proj.weight.device
        if key_mask is not None:
            key_mask = check_key_mask(key_mask.to(device), batch, tokens)
        if self.interventions.tokens:
            default = key_mask_of(self.interventions.tokens, batch, tokens, device)
            key_mask = default if key_mask is None else key_mask & default
        return key_mask

    def knock_out(
        self, heads: Sequence[tuple[int, int]] = (), tokens: Sequence[int] = (), ablation: Ablation = "zero"
    ) -> ViT:
        """A model sharing every module of this one whose every forward pass removes these (layer, head) outputs and
        takes these token indices out of every query's view (0: [CLS], the registers after it); the interventions
        this model already carries are replaced. This model is left unchanged."""
        c = self.config
        head_mask_of(heads, c.num_layers, c.num_heads)  # checks each (layer, head)
        if any(token < 0 for token in tokens):
            raise ValueError(f"token indices must be >= 0; got {list(tokens)}")
        if ablation not in ABLATIONS:
            raise ValueError(f"ablation must be one of {ABLATIONS}; got {ablation!r}")
        new = self.sharing_copy()
        new.interventions = Interventions(tuple(sorted(set(heads))), tuple(sorted(set(tokens))), ablation)
        return new

    def sharing_copy(self) -> ViT:
        """A new ViT object over the very same modules, parameters and attributes (blocks, norms, head, transform,
        class names...), with tables of its own: setting ``copy.head`` or ``copy.interventions`` leaves this model
        unchanged. What ``knock_out`` and the zero-shot prompt head build on."""
        new = copy.copy(self)
        new._modules = dict(self._modules)
        new._parameters = dict(self._parameters)
        new._buffers = dict(self._buffers)
        return new

    def position_embeddings(self, rows: int, cols: int, token_frames: int = 1) -> torch.Tensor | None:
        """Position embeddings for a rows x cols patch grid, (1, prefix + rows * cols, D); for a clip of
        ``token_frames`` tubelets along time, (1, prefix + token_frames * rows * cols, D), at its training size only
        (TimeSformer: at its frame count, any frame size; its table is resized by nearest neighbour, as transformers'
        ``TimesformerEmbeddings`` does, wherever the patch count differs from the table's).

        At another grid than the training one, the patch part is resized with bicubic interpolation
        (align_corners=False, antialiased if ``pos_embed_antialias``, as in timm and Hugging Face); prefix
        tokens keep theirs. Without ``pos_embed_prefix`` there are none: (1, rows * cols, D). A rotary model
        without a position table (``absolute_positions=False``): None.
        """
        c = self.config  # a video model without a position table (V-JEPA 2, rotary) has nothing to refuse here
        # TimeSformer's table is resized to other frame sizes (as transformers does, below); its frames are fixed
        fixed = (token_frames,) if self.time_embed is not None else (token_frames, rows, cols)
        if c.is_video and c.absolute_positions and fixed != (c.token_frames, *c.grid_size)[: len(fixed)]:
            raise ValueError(
                f"this video model's positions are for {c.num_frames} frames of {c.image_hw[0]}x{c.image_hw[1]} "
                f"pixels ({c.token_frames}x{c.grid_size[0]}x{c.grid_size[1]} tubelets); got "
                f"{token_frames}x{rows}x{cols}: sample and resize the clip to that size"
            )
        if c.sinusoidal_positions:
            return sinusoidal_table(token_frames * rows * cols, c.hidden_size).to(self.patch_embed.proj.weight)[None]
        if self.time_embed is not None:  # TimeSformer: patch n in frame t gets position n plus time t
            prefix, patch_pos = self.pos_embed[:, : c.prefix_positions], self.pos_embed[:, c.prefix_positions :]
            if rows * cols != patch_pos.shape[1]:  # transformers' TimesformerEmbeddings: nearest, from the table's grid
                D, (train_rows, train_cols) = patch_pos.shape[-1], c.grid_size
                patch_pos = patch_pos.transpose(1, 2).reshape(1, D, train_rows, train_cols)
                patch_pos = F.interpolate(patch_pos, size=(rows, cols), mode="nearest").flatten(2).transpose(1, 2)
            if c.patch_major:  # (1, N, frames, D): token n * frames + t
                patch_pos = patch_pos[:, :, None] + self.time_embed[:, None]
            else:  # (1, frames, N, D): token t * N + n
                patch_pos = patch_pos[:, None] + self.time_embed[:, :, None]
            return torch.cat([prefix, patch_pos.flatten(1, 2)], dim=1)
        if self.pos_embed is None or c.is_video:
            return self.pos_embed
        train_rows, train_cols = self.config.grid_size
        if (rows, cols) == (train_rows, train_cols):
            return self.pos_embed
        prefix = self.config.prefix_positions
        prefix_pos, patch_pos = self.pos_embed[:, :prefix], self.pos_embed[:, prefix:]
        D = patch_pos.shape[-1]
        patch_pos = patch_pos.reshape(1, train_rows, train_cols, D).permute(0, 3, 1, 2)  # (1, D, r, c)
        patch_pos = F.interpolate(
            patch_pos, size=(rows, cols), mode="bicubic", align_corners=False, antialias=self.config.pos_embed_antialias
        )
        patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, rows * cols, D)  # (1, N, D)
        return torch.cat([prefix_pos, patch_pos], dim=1)

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool = False,
        attention_sink: Callable[[int, torch.Tensor], None] | None = None,
        output_hidden_states: bool = False,
        output_qkv: bool = False,
        head_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        head_ablation: Ablation | None = None,
    ) -> ViTOutput:
        """Classify a batch of images, shape (B, C, H, W) with H and W multiples of the patch size (a video model: clips
        (B, frames, C, H, W) of its ``num_frames`` at its ``image_size``; TimeSformer at any frame size).

        Any such size works, non-square too: position embeddings are interpolated to the grid.
        ``attention_sink(block_index, weights)``, if given, receives each block's attention
        weights (B, heads, T, T) as soon as they exist; unless ``output_attentions`` is also set
        they are not kept, so statistics can be streamed without holding every T x T matrix. A divided block
        (TimeSformer) gives it a ``DividedAttention`` instead: its (spatial, temporal) weights, in transformers' shapes
        (``ViTOutput.attentions`` and ``temporal_attentions``), never a (B, heads, T, T) tensor.
        ``output_hidden_states`` keeps every block's output tokens (before the final LayerNorm), ``output_qkv``
        every block's queries, keys and values as its attention uses them (``QKV``): the "facets" of patch features.

        Interventions: ``head_mask`` (layers, heads) or (B, layers, heads) multiplies each head's attention weights
        before they reach the values (0 removes the head's output, or with ``head_ablation="mean"`` replaces it by
        its mean over the batch); the returned attentions stay the softmax. ``key_mask`` (B, T) booleans takes
        the keys marked False out of every query's view (V-JEPA 2's attentive pooler's too), each row renormalised.
        """
        x, grid = self.embed(pixel_values)
        frames = pixel_values.shape[1] if self.config.is_video else None  # the input's own (V-JEPA 2: maybe 1)
        attentions, temporal, hidden_states, qkvs = [], [], [], []
        need_weights = output_attentions or attention_sink is not None
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation must be 'sdpa' or 'eager', not {self.attn_implementation!r}")
        explicit = need_weights or self.attn_implementation == "eager"
        controls = self.block_arguments(grid, x.shape[0], head_mask, key_mask, head_ablation)
        for index, block in enumerate(self.blocks):
            x, weights, qkv = block(x, controls[index], need_weights=explicit, need_qkv=output_qkv)
            if attention_sink is not None:
                attention_sink(index, weights)
            if output_attentions:
                divided = isinstance(weights, DividedAttention)
                attentions.append(weights.spatial if divided else weights)
                temporal.append(weights.temporal if divided else None)
            if output_hidden_states:
                hidden_states.append(x)
            if output_qkv:
                qkvs.append(qkv)
        return replace(
            self.forward_head(x, grid, output_attentions, controls[0].key_mask, frames),
            attentions=tuple(attentions) if output_attentions else None,
            temporal_attentions=tuple(temporal) if output_attentions and any(t is not None for t in temporal) else None,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            qkv=tuple(qkvs) if output_qkv else None,
            layouts=(self.token_layout(grid, frames),) * len(self.blocks),
        )

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits (..., classes) -> probabilities in at least fp32: a softmax over the classes, or for a model trained
        with a sigmoid loss (SigLIP) an independent sigmoid per class, whose values need not sum to 1."""
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return logits.sigmoid() if self.config.probabilities == "sigmoid" else logits.softmax(dim=-1)

    def token_layout(self, grid_size: tuple[int, ...], num_frames: int | None = None) -> TokenLayout:
        """The layout of an input whose patches form ``grid_size`` (rows, cols), or a clip's (frames / tubelet, rows,
        cols): the prefix tokens, then the patches (each tubelet spanning its frames), frame by frame or, for a
        ``patch_major`` model (TimeSformer), patch by patch. ``num_frames``: the clip's own frame count, where it
        fills fewer than its tubelets (V-JEPA 2 repeats a 1-frame clip into one tubelet): the layout then has those
        frames only, each tubelet covering the ones it has."""
        c = self.config
        prefix = prefix_kinds(c.class_token, c.distillation_token, c.num_register_tokens)
        if len(grid_size) != 3:
            return grid_layout(prefix, tuple(grid_size), c.patch_size)
        frames = grid_size[0] * c.tubelet_size
        layout = grid_layout(prefix, tuple(grid_size[1:]), c.patch_size, frames, c.tubelet_size, c.patch_major)
        if num_frames is None or not 1 <= num_frames < frames:
            return layout
        covered = np.minimum(layout.frames, num_frames - 1)
        covered.flags.writeable = False  # immutable, as every layout's arrays are
        return replace(layout, num_frames=num_frames, frames=covered)

    def embed(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        """Patches, prefix tokens and position embeddings: the first block's input (B, T, D), and the grid ((rows,
        cols), or a clip's (frames / tubelet, rows, cols))."""
        check_input(self.config, pixel_values)
        c = self.config
        if c.is_video and c.rotary == "vjepa2" and pixel_values.shape[1] < c.tubelet_size:
            pixel_values = pixel_values.repeat(1, c.tubelet_size, 1, 1, 1)  # an image: repeated, as V-JEPA 2 does
        B, H, W = pixel_values.shape[0], *pixel_values.shape[-2:]
        grid = (H // self.config.patch_size, W // self.config.patch_size)
        if self.config.is_video:
            grid = (pixel_values.shape[1] // self.config.tubelet_size, *grid)
        x = self.patch_embed(pixel_values)  # (B, N, D)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.dist_token, self.register_tokens) if t is not None]
        positions = self.position_embeddings(*grid[-2:], *grid[:-2])
        if positions is None:  # rotary only: the blocks rotate queries and keys instead
            x = torch.cat([*prefix, x], dim=1)
        elif self.config.pos_embed_prefix:  # concatenate, then add positions to every token
            x = torch.cat([*prefix, x], dim=1) + positions  # (B, T, D), T = prefix + N
        else:  # positions for the patches only, then concatenate
            x = torch.cat([*prefix, x + positions], dim=1)
        return self.norm_pre(self.pos_dropout(x)), grid

    def forward_head(
        self,
        x: torch.Tensor,
        grid_size: tuple[int, ...],
        pooler_weights: bool = False,
        key_mask: torch.Tensor | None = None,
        num_frames: int | None = None,
    ) -> ViTOutput:
        """Final LayerNorm, pooling and head on the last block's output tokens (B, T, D).

        ``forward`` ends here. Given an earlier block's output instead, it reads that block as if it were
        the last: the logit lens that LeGrad and ``vitviz.explain.logit_lens`` use. ``pooler_weights``: keep the
        attentive pooler's block weights (``pooler_attentions``; V-JEPA 2). ``key_mask`` (B, T), with the tokens
        this model knocks out: the tokens taken out of the attentive pooler's view as out of the blocks'.
        ``num_frames``: the input's own frame count, for the layout (``token_layout``).
        """
        if not self.config.fc_norm:
            x = self.norm(x)  # (B, T, D)
        pooled, readout, pool_attention, pooler_attentions = self._pool(x, pooler_weights, key_mask)
        if self.config.fc_norm:
            pooled = self.norm(pooled)
        if self.head_dist is not None:  # DeiT at inference: the mean of the [CLS] and distillation heads
            logits = (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2
        else:
            logits = self.head(pooled) if self.head is not None else None
        return ViTOutput(
            logits=logits,
            pooled=pooled,
            last_hidden_state=x,
            attentions=None,
            grid_size=grid_size,
            num_prefix_tokens=self.config.num_prefix_tokens,
            readout=readout,
            pool_attention=pool_attention,
            layout=self.token_layout(grid_size, num_frames),
            pooler_attentions=pooler_attentions,
        )

    def _pool(
        self, x: torch.Tensor, pooler_weights: bool = False, key_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
        """(B, T, D) -> the pooled vector, the weight the head gives each token (B, T), for "map" and "attentive"
        pooling the pooling head's attention (B, heads, N), and with ``pooler_weights`` the attentive pooler's block
        weights (B, heads, T, T) each. ``key_mask``: the tokens the attentive pooler does not read (with the model's
        knock-outs)."""
        B, T, _ = x.shape
        p = self.config.num_prefix_tokens
        readout = x.new_zeros(B, T, dtype=torch.promote_types(x.dtype, torch.float32))
        patches = x[:, p:]
        pool_attention = None
        # the tokens knocked out (given, or the model's own) are out of the head's view too, as out of the blocks'
        key_mask = self.token_mask(B, T, key_mask)
        if self.config.pooling == "attentive":  # V-JEPA 2: blocks over every token, then a query (attentive_pooler.py)
            pooled, pool_attention, readout, pooler_attentions = self.attn_pool(x, pooler_weights, key_mask)
            return pooled, readout, pool_attention[:, :, p:] if p else pool_attention, pooler_attentions
        if self.config.pooling == "map" and self.config.pool_prefix:  # the Perception Encoder's head reads every token
            pooled, pool_attention = self.attn_pool(x, key_mask)
            readout[:] = pool_attention.mean(dim=1)
            pool_attention = pool_attention[:, :, p:]  # what the patches get: the map the page draws
        elif self.config.pooling == "map":
            pooled, pool_attention = self.attn_pool(patches, None if key_mask is None else key_mask[:, p:])
            readout[:, p:] = pool_attention.mean(dim=1)
        elif self.config.pooling in ("mean", "cls+mean"):
            weights = patch_weights(key_mask, B, T, p, readout)  # (B, N): 1 / N, or 1 / kept over the kept ones
            if key_mask is None:
                mean = patches.mean(dim=1)
            else:  # the kept patches' mean, summed in fp32 or wider
                mean = (weights[:, :, None] * patches.to(weights.dtype)).sum(dim=1).to(patches.dtype)
            if self.config.pooling == "mean":
                pooled, readout[:, p:] = mean, weights
            else:  # DINOv2's classifier reads both, side by side
                pooled = torch.cat([x[:, 0], mean], dim=-1)
                readout[:, 0], readout[:, p:] = 0.5, 0.5 * weights
        elif self.config.distillation_head:  # DeiT: both tokens, averaged (timm's pre-logits)
            pooled = (x[:, 0] + x[:, 1]) / 2
            readout[:, :2] = 0.5
        else:
            pooled = x[:, 0]
            readout[:, 0] = 1.0
        return pooled, readout, pool_attention, None


def patch_weights(key_mask: torch.Tensor | None, B: int, T: int, p: int, like: torch.Tensor) -> torch.Tensor:
    """(B, N) the weight mean pooling gives each patch token: 1 / N each, or, with tokens knocked out (``key_mask``
    False), 1 / kept over the patches kept and 0 over the others."""
    if key_mask is None:
        return like.new_full((B, T - p), 1 / (T - p))
    kept = key_mask[:, p:].to(like.dtype)
    return kept / kept.sum(dim=1, keepdim=True).clamp(min=1)


def sinusoidal_table(positions: int, width: int) -> torch.Tensor:
    """VideoMAE's fixed position table (from "Attention Is All You Need"), (positions, width) fp32: feature pair
    (2i, 2i + 1) of position n is sin and cos of n / 10000 ** (2i / width). Made in fp64, as the original is."""
    position = torch.arange(positions, dtype=torch.float64)[:, None]
    exponent = (torch.arange(width) // 2 * 2).to(torch.float64) / width
    angles = position / 10000.0**exponent  # (positions, width)
    table = torch.empty_like(angles)
    table[:, 0::2], table[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
    return table.to(torch.float32)
