"""vitviz's Vision Transformer (Dosovitskiy et al. 2020), as a small package read top to bottom:

    config.py   ViTConfig: one field per architectural choice (DeiT, DINO, DINOv2, CLIP, SigLIP, MAE...; VideoMAE and
                ViViT's clips: frames, tubelets, fixed sine-cosine positions)
    layers.py   patch (or tubelet) embedding, attention that returns its weights and q/k/v (steered by
                AttentionControls), MLP, LayerScale, the block, attention pooling
    vit.py      the ViT: embeddings, blocks, final norm, pooling, head, and what loaders attach (class names,
                preprocessing, text tower); ViTOutput; autocast
    divided.py  TimeSformer's divided space-time block (attention over each patch's frames, then over each frame's
                patches) and DividedAttention, its two attentions
    inputs.py   what the ViT checks of its input (images, clips, V-JEPA 2's clips), one clear line per refusal
    interventions.py  heads knocked out and tokens taken out of the attention: the masks, checked
    rotary.py   rotary position embeddings for a 2-D grid of patches (DINOv3, EVA, RoPE-Mixed) or V-JEPA 2's 3-D grid
    attentive_pooler.py  V-JEPA 2's attentive pooler: blocks over every token, then a query; its weights and readout
    relevance_rules.py  LRP rules in the gradient x input framework (AttnLRP, CP-LRP): norms, non-linearities and
                attention take the rules' backward pass while the rules are on (a context variable per thread)
    precision.py  precision "auto": the model timed in fp32 and bf16 autocast on this machine, the faster kept
    swin.py     Swin and Swin v2 (Swin, SwinOutput): window attention, the cyclic shift, patch merging
    swin_config.py  SwinConfig: one field per choice of Swin and Swin v2 (windows, shifts, padding convention...)
    windows.py  Swin's windows: partition and reverse, the shift's mask, padding, relative positions, window tokens

``from vitviz.model import ViT, ViTConfig`` is the public way in (``Swin, SwinConfig`` for the hierarchical models).
"""

from vitviz.model.config import ACTIVATIONS, POOLINGS, PROBABILITIES, Activation, Pooling, Probabilities, ViTConfig
from vitviz.model.interventions import ABLATIONS, Interventions
from vitviz.model.layers import (
    MLP,
    QKV,
    Attention,
    AttentionControls,
    AttentionOutput,
    AttentionPool,
    Block,
    BlockOutput,
    DropPath,
    LayerScale,
    PatchEmbedding,
)
from vitviz.model.swin import Swin, SwinConfig, SwinOutput
from vitviz.model.vit import Precision, ViT, ViTOutput, autocast

__all__ = [
    "ABLATIONS",
    "ACTIVATIONS",
    "MLP",
    "POOLINGS",
    "PROBABILITIES",
    "QKV",
    "Activation",
    "Attention",
    "AttentionControls",
    "AttentionOutput",
    "AttentionPool",
    "Block",
    "BlockOutput",
    "DropPath",
    "Interventions",
    "LayerScale",
    "PatchEmbedding",
    "Pooling",
    "Precision",
    "Probabilities",
    "Swin",
    "SwinConfig",
    "SwinOutput",
    "ViT",
    "ViTConfig",
    "ViTOutput",
    "autocast",
]
