"""Explanations: attention tensors in, patch maps and statistics out, one module per kind.

    attention.py     rollout, [CLS] / patch / readout rows, the streaming explainer
    gradients.py     class-specific maps (Chefer et al. 2021)
    statistics.py    attention distance and entropy, position embeddings, patch-embedding filters
    tokens.py        attention to prefix tokens, token norms, the attention-pooling head
    faithfulness.py  perturbation curves
    common.py        argument checks, the grid, the readout

Everything is importable from ``vitviz.explain`` itself.

Conventions shared by every function:
- ``attentions`` is a sequence with one tensor per block, shape (B, heads, T, T), rows summing
  to 1, as returned by ``ViT(..., output_attentions=True)``.
- Tokens are ``num_prefix_tokens`` prefix tokens ([CLS] first, then distillation or register
  tokens) followed by the N = rows * cols patches in row-major order. The grid is passed in
  (``output.grid_size``); it is never guessed from sqrt(N), so non-square images work.
- Maps come back as (B, rows, cols) when ``grid_size`` is given, else (B, N). They are not
  rescaled: display scaling belongs to the plotting code.

The functions that need gradients (class-specific maps, faithfulness) take the model;
everything else is a pure function of tensors.
"""

from __future__ import annotations

from vitviz.explain.common import HEAD_FUSIONS, HeadFusion, Pooling
from vitviz.explain.attention import StreamingExplainer, attention_rollout, cls_attention, cls_attention_all, discard_weakest, fuse_heads, query_attention, readout_attention_all
from vitviz.explain.gradients import attention_gradients, gradient_weighted_attention, gradient_weighted_rollout
from vitviz.explain.statistics import attention_entropy, mean_attention_distance, patch_distances, patch_embedding_components, position_embedding_similarity
from vitviz.explain.tokens import attention_to_prefix_tokens, high_norm_patches, pooling_attention, token_norms
from vitviz.explain.faithfulness import Baseline, area_under_curve, faithfulness, fraction_replaced, gaussian_blur, perturbation_curve

__all__ = [
    "Baseline",
    "HEAD_FUSIONS",
    "HeadFusion",
    "Pooling",
    "StreamingExplainer",
    "area_under_curve",
    "attention_entropy",
    "attention_gradients",
    "attention_rollout",
    "attention_to_prefix_tokens",
    "cls_attention",
    "cls_attention_all",
    "discard_weakest",
    "faithfulness",
    "fraction_replaced",
    "fuse_heads",
    "gaussian_blur",
    "gradient_weighted_attention",
    "gradient_weighted_rollout",
    "high_norm_patches",
    "mean_attention_distance",
    "patch_distances",
    "patch_embedding_components",
    "perturbation_curve",
    "pooling_attention",
    "position_embedding_similarity",
    "query_attention",
    "readout_attention_all",
    "token_norms",
]
