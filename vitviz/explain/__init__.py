"""Explanations: attention tensors in, patch maps and statistics out, one module per kind.

    attention.py     rollout, [CLS] / patch / readout rows
    attention_flow.py  attention flow: the maximum flow from the readout to each patch (Abnar & Zuidema 2020)
    baselines.py     the model-agnostic baselines through Captum: input x gradient, Integrated Gradients, SmoothGrad,
                     occlusion and KernelSHAP
    rise.py          RISE: the class's probability under random masks (Petsiuk et al. 2018)
    pixels.py        which patch holds each pixel, and pixel-level maps summed or averaged per patch
    streaming.py     the streaming explainer: the attention maps folded in block by block during the forward pass
    stages.py        rollout and relevance across attention windows and stages (Swin), from the blocks' token layouts
    window_attention.py  one token's attention over its own window, per block and head (Swin's per-head view)
    gradients.py     class-specific maps (Chefer et al. 2021)
    legrad.py        LeGrad: each block's own prediction's gradient w.r.t. its attention (Bousselham et al. 2025)
    transition.py    Transition Attention Maps: attention as a Markov chain, integrated gradients (Yuan et al. 2021)
    lrp.py           AttnLRP and CP-LRP: layer-wise relevance through the blocks' own rules (model/relevance_rules.py)
    gradcam.py       Grad-CAM on the last block's norm1 tokens (Selvaraju et al. 2017, as pytorch-grad-cam does)
    lens.py          the patch-level logit lens: every token of every block read by the head
    method.py        the record each map method declares in its own file (name, caption, cost, compute)
    registry.py      every map method by name, and method_maps: what the CLI, the benchmark and the dashboard compute
    target.py        Target: what a map explains (a class, a prompt, a VLM answer token), one record for every method
    sanity.py        the model-randomisation sanity check (Adebayo et al. 2018)
    statistics.py    attention distance and entropy, position embeddings (or rotary phases), patch-embedding filters
    tokens.py        attention to prefix tokens, token norms, the attention-pooling head
    head_statistics.py  the per-head statistics as records (name, unit, description, computation from a block's
                     attention), read by streaming, the dataset index's heads table and the Dataset page
    head_importance.py  head importance: each head removed in turn, the target's logit and probability again
    logit_attribution.py  the target's logit split into embeddings, heads, MLPs and biases
    spacetime.py     maps over space and time for video ViTs: rollout, relevance, a token's attention over every frame,
                     frames x frames attention and the readout per frame (SpaceTimeMap)
    long_sequences.py  the bounded-memory engine behind them: an SDPA pass keeping each attention's input, then each
                     attention recomputed a chunk of query rows at a time and folded into row vectors over the tokens
                     (joint blocks, TimeSformer's divided ones, V-JEPA 2's pooler): never a block's (heads, T, T)
    facets.py        patch features from any block: tokens, keys, queries or values; one head's queries and keys
    feature_views.py  what patch features show: joint PCA colours, cosine matches, k-means parts
    faithfulness.py  perturbation curves
    common.py        argument checks, the grid, the readout

Everything is importable from ``vitviz.explain`` itself.

Conventions shared by every function:
- ``attentions`` is a sequence with one tensor per block, shape (B, heads, T, T), rows summing
  to 1, as returned by ``ViT(..., output_attentions=True)``.
- The tokens are described by the token layout (``output.layout``; ``output.layouts``, one per block:
  vitviz.layout.TokenLayout): what each token is ([CLS], distillation, register, patch) and which pixels and frames
  it covers. Every map function takes it: ``attention_rollout(out.attentions, out.layout, readout=...)``. Its prefix
  count and its grid come from it, and per-patch values become maps through the layout's own order
  (``grid_view``), so TimeSformer's patch-major tokens come back frame by frame; nothing is guessed from sqrt(N).
  The maps of ``stages.py`` read the per-block layouts, so windowed attention and merged tokens need no special
  case; the one-grid functions refuse a windowed layout in one line and name them (``spacetime.py`` for clips of
  divided attention).
- ``num_prefix_tokens`` and ``grid_size`` (``output.num_prefix_tokens``, ``output.grid_size``) stay only as what a
  plain ViT's layout is built from: prefix tokens, then the N = rows * cols patches in row-major order (a clip's
  frames * rows * cols, frame by frame). In the layout's place a function also takes that pair, and gives the same
  maps for such a model (``common.token_grid`` reads either).
- Maps come back as (B, rows, cols) (a clip's (B, frames, rows, cols)) from a layout or a ``grid_size``, else
  (B, N). They are not rescaled: display scaling belongs to the plotting code.
- Every map function takes its arguments in one order: the tensors it is computed from, then the token layout
  (``output.layout``, or the pair), then, by keyword only, ``readout`` (what the head reads: "cls", "mean"
  or ``output.readout``), ``start_layer`` and the method's own options. (``pooling`` is the model's config:
  how its head pools.)

The functions that need gradients or the head (class-specific maps, the logit lens, faithfulness, the sanity
check) take the model; everything else is a pure function of tensors.
"""

from __future__ import annotations

from vitviz.explain.attention import (
    attention_rollout,
    cls_attention,
    cls_attention_all,
    discard_weakest,
    fuse_heads,
    query_attention,
    readout_attention_all,
)
from vitviz.explain.common import HEAD_FUSIONS, HeadFusion, Readout
from vitviz.explain.facets import FACETS, Facet, head_queries_and_keys, patch_features
from vitviz.explain.faithfulness import (
    Baseline,
    area_under_curve,
    faithfulness,
    fraction_replaced,
    gaussian_blur,
    perturbation_curve,
    saco,
    saco_coefficient,
)
from vitviz.explain.feature_views import (
    PCAColours,
    feature_clusters,
    patch_rows_as_grid,
    patch_similarity,
    pca_rgb,
    top_matches,
)
from vitviz.explain.gradcam import Norm1Gradients, grad_cam, norm1_gradients, on_first_stage, stage_norm1_gradients
from vitviz.explain.gradients import (
    AttentionGradients,
    attention_gradients,
    gradient_weighted_attention,
    gradient_weighted_rollout,
)
from vitviz.explain.head_importance import HeadImportance, head_importance
from vitviz.explain.legrad import legrad, legrad_gradients
from vitviz.explain.lens import LogitLens, logit_lens, token_logits
from vitviz.explain.logit_attribution import LogitAttribution, direct_logit_attribution
from vitviz.explain.long_sequences import VideoMapError
from vitviz.explain.method import COSTS, Cost, MapInputs, MapOptions, Method, MethodOutput
from vitviz.explain.registry import CLASS_SPECIFIC, METHODS, MethodMaps, get_method, method_maps, refusal, refusals
from vitviz.explain.sanity import MapMethod, SanityCheck, cascading_randomization, spearman_correlation
from vitviz.explain.spacetime import (
    SpaceTimeMap,
    frame_attention,
    readout_per_frame,
    video_patch_attention,
    video_relevance,
    video_rollout,
)
from vitviz.explain.stages import (
    gradient_rollout_across_stages,
    merge_targets,
    relevance_across_stages,
    rollout_across_stages,
)
from vitviz.explain.statistics import (
    attention_entropy,
    layout_distances,
    mean_attention_distance,
    patch_distances,
    patch_embedding_components,
    position_embedding_similarity,
    rotary_similarity,
)
from vitviz.explain.streaming import StreamingExplainer
from vitviz.explain.target import Target, as_target
from vitviz.explain.tokens import attention_to_prefix_tokens, high_norm_patches, pooling_attention, token_norms
from vitviz.explain.transition import (
    TAM_STEPS,
    IntegratedGradient,
    integrated_attention_gradient,
    transition_attention_map,
)
from vitviz.explain.window_attention import WindowAttention, window_attention_map

__all__ = [
    "Target",
    "as_target",
    "CLASS_SPECIFIC",
    "COSTS",
    "FACETS",
    "HEAD_FUSIONS",
    "METHODS",
    "TAM_STEPS",
    "AttentionGradients",
    "Baseline",
    "Cost",
    "Facet",
    "HeadFusion",
    "HeadImportance",
    "IntegratedGradient",
    "LogitAttribution",
    "LogitLens",
    "MapInputs",
    "MapMethod",
    "MapOptions",
    "Method",
    "MethodMaps",
    "MethodOutput",
    "Norm1Gradients",
    "PCAColours",
    "Readout",
    "SanityCheck",
    "SpaceTimeMap",
    "StreamingExplainer",
    "VideoMapError",
    "WindowAttention",
    "area_under_curve",
    "attention_entropy",
    "attention_gradients",
    "attention_rollout",
    "attention_to_prefix_tokens",
    "cascading_randomization",
    "cls_attention",
    "cls_attention_all",
    "direct_logit_attribution",
    "discard_weakest",
    "faithfulness",
    "feature_clusters",
    "frame_attention",
    "fraction_replaced",
    "fuse_heads",
    "gaussian_blur",
    "get_method",
    "grad_cam",
    "gradient_rollout_across_stages",
    "gradient_weighted_attention",
    "gradient_weighted_rollout",
    "head_importance",
    "head_queries_and_keys",
    "high_norm_patches",
    "integrated_attention_gradient",
    "legrad",
    "legrad_gradients",
    "logit_lens",
    "layout_distances",
    "mean_attention_distance",
    "merge_targets",
    "method_maps",
    "norm1_gradients",
    "on_first_stage",
    "patch_distances",
    "patch_embedding_components",
    "patch_features",
    "patch_similarity",
    "patch_rows_as_grid",
    "pca_rgb",
    "perturbation_curve",
    "saco",
    "saco_coefficient",
    "pooling_attention",
    "position_embedding_similarity",
    "query_attention",
    "readout_attention_all",
    "readout_per_frame",
    "refusal",
    "refusals",
    "relevance_across_stages",
    "rollout_across_stages",
    "rotary_similarity",
    "spearman_correlation",
    "stage_norm1_gradients",
    "token_logits",
    "token_norms",
    "top_matches",
    "transition_attention_map",
    "video_patch_attention",
    "video_relevance",
    "video_rollout",
    "window_attention_map",
]
