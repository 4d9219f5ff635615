"""Cached results of the model: the model itself, the forward pass (the analysis), and the maps, features and
rankings the tabs draw.

Controls never re-run the model: the forward pass is kept per (model, image), and what the tabs draw from it per
choice of settings. One key convention: every function that runs a model takes the model's ``key`` (page.ModelKey:
its spec, prompts, knock-outs and precision) first, then the photo's digest (``image_key``; ``analyse`` takes the
ImageFile, keyed by its digest) and the choices; the model and the analysis follow unhashed (``_model``,
``_analysis``), since the key and the digest fix them. Everything but the models lives in budget.STORE, bounded in
bytes (VITVIZ_MEMORY_BUDGET): the least recently used entries go first. An analysis too big to keep whole
(budget.analysis_share) keeps only its small views, and a view it lacks is recomputed by a streaming pass, with
progress per block.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io

import numpy as np
import streamlit as st
import torch
from PIL import Image

import vitviz
from vitviz import analysis as analysis_module
from vitviz import explain
from vitviz.analysis import ImageAnalysis, WindowedAnalysis
from vitviz.loading import download
from vitviz.model import Swin
from vitviz.preprocessing import ImageFile
from vitviz_dashboard.cache.budget import analysis_share, kept
from vitviz_dashboard.cache.pictures import decode, display_photo, enlarged
from vitviz_dashboard.names import readout_title
from vitviz_dashboard.page import ModelKey, Page, Photo
from vitviz_dashboard.widgets.progress import progress_class


@st.cache_resource(max_entries=3, show_spinner="Loading the model...")
def get_model(spec: str) -> vitviz.ViT:
    return vitviz.load_model(spec)


def get_model_with_progress(spec: str) -> vitviz.ViT:
    """get_model, with a progress bar above the page while a download runs (none for a cached model)."""
    slot = st.empty()
    try:
        with download.progress_bar(progress_class(slot)):
            return get_model(spec)
    finally:
        slot.empty()


@contextlib.contextmanager
def block_progress(text: str, blocks: int, slot=None):
    """A progress bar for a pass through the model, moved on by the callback this yields (block index): in ``slot``
    (an st.empty() the page draws in every run, so nothing below it moves), or in a new one here."""
    slot = st.empty() if slot is None else slot

    def update(block: int) -> None:
        slot.progress((block + 1) / blocks, text=f"{text}: block {block + 1} of {blocks}")

    try:
        yield update
    finally:
        slot.empty()


@kept()
def analyse(key: ModelKey, file: ImageFile, *, _model: vitviz.ViT, _slot=None) -> ImageAnalysis | WindowedAnalysis:
    """One forward pass per (model, image): controls never re-run the model. The attention tensors are kept only
    within the budget's share for one analysis. ``_slot``: where its progress bar goes. A Swin gets its own analysis
    (analysis.WindowedAnalysis): predictions and every block's window attention, always kept (they are small)."""
    if is_windowed(_model):
        with block_progress("Running the Swin", _model.config.num_layers, _slot) as progress:
            return analysis_module.analyse_windowed(_model, decode(file), key.precision, progress)
    with block_progress("Running the ViT", _model.config.num_layers, _slot) as progress:
        return analysis_module.analyse_image(_model, decode(file), key.precision, analysis_share(), progress)


def is_windowed(model) -> bool:
    """A model that attends in windows and merges tokens between stages (Swin): the page draws its own tabs."""
    return isinstance(model, Swin)


def photo_and_analysis(
    key: ModelKey, model: vitviz.ViT, name: str, file: ImageFile, slot=None
) -> tuple[Photo, ImageAnalysis]:
    """The photo and its analysis, with the model's box scaled onto the shown photo (``slot``: block_progress's)."""
    analysis = analyse(key, file, _model=model, _slot=slot)
    photo = Photo(name, file.key, display_photo(file), decode(file))
    return photo, dataclasses.replace(analysis, box=tuple(v * photo.scale for v in analysis.box))


@kept()
def class_map(
    key: ModelKey, image_key: str, target: int, method: str, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> np.ndarray:
    """One class-specific map (explain.CLASS_SPECIFIC), computed once per method: choosing another method
    computes only that one."""
    return explain.method_maps(_model, _analysis.pixel_values, [method], target, key.precision).maps[method].numpy()


@kept(spinner="Reading every block's tokens through the head...")
def logit_lens(
    key: ModelKey, image_key: str, target: int, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> dict[str, np.ndarray]:
    """The patch-level logit lens for ``target``: "probability" (layers, rows, cols), the class's probability read from
    each patch token; "votes" (layers, rows, cols), each patch's top class; "readout" (layers,), the class's
    probability when the head reads that block's output whole."""
    lens = explain.method_maps(_model, _analysis.pixel_values, ["lens"], target, key.precision).lens
    return {
        "probability": lens.probability[:, 0].numpy(),
        "votes": lens.votes[:, 0].numpy(),
        "readout": lens.readout_probability[:, 0].numpy(),
    }


@kept(spinner="Replacing patches and re-running the model...")
def faithfulness_curves(
    key: ModelKey, image_key: str, target: int, baseline: str, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> dict[str, dict]:
    maps = {"rollout": _analysis.rollout}
    # what the tokens the head reads attend to in the last block, fused over heads
    maps[f"{readout_title(_model.config)} (last layer)"] = _analysis.readout_attention[-1].mean(dim=0)
    relevance = class_map(key, image_key, target, "relevance", _analysis=_analysis, _model=_model)
    maps["relevance (Chefer et al.)"] = torch.from_numpy(relevance)
    pixels = _analysis.pixel_values
    return {
        name: explain.faithfulness(_model, pixels, m, target, baseline, precision=key.precision)
        for name, m in maps.items()
    }


@kept()
def model_input_png(key: ModelKey, image_key: str, *, _analysis: ImageAnalysis, _model: vitviz.ViT) -> bytes:
    """What the model saw: its input tensor, normalisation undone, enlarged by whole pixels to about 128 px."""
    mean = torch.tensor(_model.transform.mean)[:, None, None]
    std = torch.tensor(_model.transform.std)[:, None, None]
    pixels = (_analysis.pixel_values[0].float() * std + mean).clamp(0, 1)  # (3, H, W)
    picture = enlarged(Image.fromarray((pixels.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)), 128)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


@kept()
def rollout_map(
    key: ModelKey,
    image_key: str,
    fusion: str,
    discard: float,
    start: int,
    *,
    _analysis: ImageAnalysis,
    _model: vitviz.ViT,
) -> np.ndarray:
    """The rollout for one choice of settings, computed once: from the kept attentions, or by a streaming pass
    when the analysis did not keep them (the default settings' rollout comes with every analysis)."""
    if (fusion, discard, start) == ("mean", 0.0, 0):
        return _analysis.rollout.numpy()
    if _analysis.attentions is not None:
        return analysis_module.rollout(_model, _analysis, fusion, discard, start).numpy()
    with block_progress("Recomputing the rollout for these settings", _model.config.num_layers) as progress:
        return analysis_module.rollout(_model, _analysis, fusion, discard, start, progress).numpy()


@kept()
def patch_maps(
    key: ModelKey,
    image_key: str,
    layer: int,
    row: int,
    col: int,
    *,
    _analysis: ImageAnalysis,
    _model: vitviz.ViT,
) -> tuple[np.ndarray, np.ndarray]:
    """What patch (row, col) attends to in one layer: fused over heads (rows, cols) and per head (H, rows, cols)."""
    if _analysis.attentions is not None:
        per_head = analysis_module.patch_attention(_model, _analysis, layer, (row, col))
    else:
        with block_progress(f"Recomputing what patch ({row}, {col}) attends to", layer + 1) as progress:
            per_head = analysis_module.patch_attention(_model, _analysis, layer, (row, col), progress)
    return per_head.mean(dim=0).numpy(), per_head.numpy()


@kept(spinner="Computing the patch features...")
def patch_features(
    key: ModelKey,
    image_key: str,
    block: int,
    facet: str,
    *,
    _analysis: ImageAnalysis,
    _model: vitviz.ViT,
) -> np.ndarray:
    """One photo's patch features (N, D) float32 in one block and facet (explain.patch_features), computed once:
    the PCA, the matches and the parts are then cheap functions of them."""
    return explain.patch_features(_model, _analysis.pixel_values, block, facet, key.precision)[0].numpy()


@kept()
def pca_colours(
    key: ModelKey,
    image_keys: tuple[str, ...],
    block: int,
    facet: str,
    foreground: float | None,
    flip: bool,
    *,
    _features: list[np.ndarray],
) -> explain.PCAColours:
    """One PCA fitted over the chosen photos' features (explain.pca_rgb), once per choice of photos and options:
    a click elsewhere in the tab does not fit it again."""
    return explain.pca_rgb([torch.from_numpy(f) for f in _features], foreground=foreground, flip_first=flip)


@kept(spinner="Finding the parts (k-means)...")
def feature_parts(
    key: ModelKey,
    image_keys: tuple[str, ...],
    block: int,
    facet: str,
    k: int,
    *,
    _features: list[np.ndarray],
) -> list[np.ndarray]:
    """k-means part labels (N_i,) for each chosen photo, fitted over all of them (explain.feature_clusters), once
    per choice of photos and k."""
    return [labels.numpy() for labels in explain.feature_clusters([torch.from_numpy(f) for f in _features], k)]


@kept()
def head_ranking(
    key: ModelKey, image_key: str, target: int, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> dict[str, np.ndarray]:
    """Each head removed in turn (explain.head_importance): the target's logit and probability change, (layers,
    heads) each, with a progress bar per layer; computed once per (model, image, class)."""
    with block_progress("Removing each head in turn", _model.config.num_layers) as progress:
        result = explain.head_importance(
            _model, _analysis.pixel_values, target, progress=progress, precision=key.precision
        )
    return {
        "logit_change": result.logit_change[0].numpy(),
        "probability_change": result.probability_change[0].numpy(),
        "logit": result.logit.numpy(),
        "probability": result.probability.numpy(),
    }


@kept(spinner="Splitting the logit into what each part wrote...")
def logit_parts(
    key: ModelKey, image_key: str, target: int, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> dict[str, np.ndarray] | str:
    """Direct logit attribution (explain.direct_logit_attribution) of the target's logit, or why this model's readout
    cannot be split (an attention-pooling head...)."""
    try:
        parts = explain.direct_logit_attribution(_model, _analysis.pixel_values, target)
    except ValueError as error:
        return str(error)
    return {
        name: getattr(parts, name)[0].numpy() for name in ("embeddings", "heads", "mlps", "biases", "edits", "logit")
    }


@kept()
def model_anatomy(key: ModelKey, *, _model: vitviz.ViT) -> dict:
    """Weights-only views, computed once per model."""
    c = _model.config
    similarity = rotary = None
    if _model.pos_embed is not None:  # a learned position table
        similarity = explain.position_embedding_similarity(_model.pos_embed.detach(), c.grid_size, c.prefix_positions)
    if c.rotary != "none":  # rotary embeddings: how alike the rotations of two patches are
        rope = _model.rotary_embeddings(c.grid_size)[0]  # the first block's (all blocks share it but RoPE-Mixed's)
        rotary = explain.rotary_similarity(rope.sin.detach().cpu(), rope.cos.detach().cpu(), c.grid_size)
    components, explained = explain.patch_embedding_components(_model.patch_embed.proj.weight, count=16)
    return {"similarity": similarity, "rotary": rotary, "components": components, "explained": explained}


@kept()
def window_maps(
    key: ModelKey, image_key: str, block: int, row: int, col: int, *, _analysis: WindowedAnalysis
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What token (row, col) of block ``block``'s grid attends to inside its own window
    (explain.window_attention_map): per head (heads, rows, cols) and fused by the mean (rows, cols), NaN outside the
    window, and the window's cells (rows, cols) bool, all on that block's stage grid."""
    attentions, layouts = _analysis.attentions, _analysis.layouts
    layout = layouts[block]
    heads = attentions[block].shape[1]
    per_head = [
        explain.window_attention_map(attentions, layouts, block, (row, col), head).values[0] for head in range(heads)
    ]
    per_head = layout.grid_view(torch.stack(per_head).cpu().numpy())[:, 0]  # (heads, rows, cols): one frame
    window = ~np.isnan(per_head[0])
    return per_head, per_head.mean(axis=0), window


@kept(spinner="Running the model for the block's tokens...")
def block_tokens(key: ModelKey, image_key: str, block: int, *, _analysis: WindowedAnalysis, _model: Swin) -> np.ndarray:
    """Block ``block``'s output tokens for the photo, (T_block, D_block) float32 (analysis.windowed_block_tokens):
    the residual stream after the block, before the final norm, row-major on its stage's grid."""
    return analysis_module.windowed_block_tokens(_model, _analysis.pixel_values, block)[0].cpu().numpy()


# --- views every analysis holds: no computation to keep -------------------------------------------------------------


def readout_maps(analysis: ImageAnalysis) -> np.ndarray:
    """What the tokens the head reads attend to, every block and head: (layers, heads, rows, cols).
    The [CLS] rows for a [CLS] model, the mean patch row for mean pooling, the rows weighted by the
    pooling head's weights for attention pooling (explain.readout_attention_all); part of every analysis."""
    return analysis.readout_attention.numpy()


def session_photo(page: Page, name: str) -> tuple[Photo, ImageAnalysis]:
    """The session's photo ``name`` and its analysis by the page's model, for the tabs that compare photos: the page's
    own for the chosen photo, else decoded and analysed (kept like every analysis). ImageError when it cannot be
    read."""
    if name == page.photo.name:
        return page.photo, page.analysis
    return photo_and_analysis(page.model_key, page.model, name, page.images[name])


def intact_analysis(page: Page) -> ImageAnalysis:
    """The chosen photo's analysis by the model before its knock-outs and SAE edits (``page.intact_model``, which
    must be there): what the "what changes" views compare against."""
    return photo_and_analysis(page.model_key.intact(), page.intact_model, page.photo.name, page.file)[1]
