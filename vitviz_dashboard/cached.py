"""Every cached computation of the page: the model, decoded photos, the forward pass, maps, figures.

Controls never re-run the model: the forward pass is kept per (model, image, precision), and what the tabs
draw from it per choice of settings. Everything but the models lives in budget.STORE, bounded in bytes
(VITVIZ_MEMORY_BUDGET): the least recently used entries go first. Kept functions take an ImageFile and are
keyed by its digest; functions given an ``_analysis`` name it in their key by (model spec, image key,
precision) instead, since those fix the analysis. An analysis too big to keep whole (budget.analysis_share)
keeps only its small views, and a view it lacks is recomputed by a streaming pass, with progress per block.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch
from PIL import Image

import vitviz
from vitviz import analysis as analysis_module
from vitviz import explain
from vitviz.analysis import ImageAnalysis
from vitviz.loading import download
from vitviz.preprocessing import ImageFile, load_image
from vitviz.render import figures, overlays
from vitviz.render.features import paint_patches
from vitviz_dashboard.budget import analysis_share, kept
from vitviz_dashboard.click_picture import jpeg_data_uri
from vitviz_dashboard.common import Photo, Settings, readout_title
from vitviz_dashboard.progress import progress_class

MAX_DISPLAY_SIDE = 1024
MIN_DISPLAY_SIDE = 256  # smaller photos are enlarged by a whole factor for the page (display_photo)
THUMBNAIL_SIDE = 256  # the photo under each small multiple (a head's map)
PICKER_SIDE = 768  # the click-a-patch picture's long side, in pixels


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


@kept()
def decode(file: ImageFile) -> Image.Image:
    """The decoded photo, shared (not copied) between reruns and sessions: never modify it in place."""
    return load_image(file.data)


@kept()
def display_photo(file: ImageFile) -> Image.Image:
    """The photo at most MAX_DISPLAY_SIDE pixels on its long side: what overlays are drawn on for the
    page (downloads use the full resolution). A small photo (a 32x32 CIFAR-10 image) is enlarged by a whole
    factor, pixels kept square, to at least MIN_DISPLAY_SIDE: stretched by the browser instead, a 1-pixel grid
    line or patch outline would cover a quarter of a 4-pixel patch. Shared like decode's result: never modify it."""
    photo = enlarged(decode(file), MIN_DISPLAY_SIDE)
    photo.thumbnail((MAX_DISPLAY_SIDE, MAX_DISPLAY_SIDE))
    return photo


def enlarged(image: Image.Image, side: int) -> Image.Image:
    """A copy of ``image`` enlarged by the largest whole factor that keeps its long side within ``side`` (pixels
    kept square, NEAREST), or a plain copy when it is already that big."""
    factor = max(1, side // max(image.size))
    return image.resize((image.width * factor, image.height * factor), Image.NEAREST)


def shrunk(image: Image.Image, side: int) -> Image.Image:
    """A copy of ``image`` at most ``side`` pixels on its long side (PIL's thumbnail: never enlarged)."""
    small = image.copy()
    small.thumbnail((side, side))
    return small


@kept()
def _thumbnail(key: str, _image) -> Image.Image:
    return shrunk(_image, THUMBNAIL_SIDE)


def thumbnail(photo: Photo) -> tuple[Photo, float]:
    """The shown photo at most THUMBNAIL_SIDE pixels on its long side, as a Photo of its own (for small multiples
    drawn over the photo), and its scale against the shown photo (multiply a box by it)."""
    small = _thumbnail(photo.key, _image=photo.image)
    return dataclasses.replace(photo, key=f"{photo.key}|thumbnail", image=small), small.width / photo.image.width


@kept()
def _overlay_jpeg(
    key: str, patch_map: np.ndarray, box: tuple, colormap: str, alpha: float, value_range, mark, _image
) -> bytes:
    buffer = io.BytesIO()
    picture = overlays.overlay(_image, patch_map, colormap, alpha, box, value_range)
    if mark is not None:
        picture = overlays.mark_patch(picture, mark, patch_map.shape, box)
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def overlay_picture(photo: Photo, patch_map, box, settings: Settings, value_range=None, mark=None) -> bytes:
    """The overlay as JPEG bytes, cached: redrawing after an unrelated control change costs nothing.
    ``value_range`` fixes the colour scale (overlays.overlay); by default each map is min-max scaled. ``mark``, a
    (row, col) patch, is outlined."""
    values = np.asarray(patch_map.numpy() if isinstance(patch_map, torch.Tensor) else patch_map, dtype=np.float32)
    return _overlay_jpeg(
        photo.key, values, tuple(box), settings.colormap, settings.alpha, value_range, mark, _image=photo.image
    )


@kept()
def _vote_jpeg(key: str, votes: np.ndarray, shown: tuple, box: tuple, alpha: float, _image) -> bytes:
    buffer = io.BytesIO()
    picture = paint_patches(_image, figures.vote_colours(votes, list(shown)), box, alpha)
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def vote_picture(photo: Photo, votes: np.ndarray, shown: tuple, box, alpha: float) -> bytes:
    """The shown photo with each patch painted in its class's colour (figures.vote_colours), as JPEG bytes, cached."""
    return _vote_jpeg(photo.key, np.asarray(votes), shown, tuple(box), alpha, _image=photo.image)


@kept()
def _outlined_jpeg(key: str, mask: np.ndarray, box: tuple, _image) -> bytes:
    buffer = io.BytesIO()
    overlays.outline_patches(_image, mask, box).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def outlined_picture(photo: Photo, mask: np.ndarray, box) -> bytes:
    """The shown photo with the patches of ``mask`` (rows, cols) outlined, as JPEG bytes, cached."""
    return _outlined_jpeg(photo.key, np.asarray(mask, dtype=bool), tuple(box), _image=photo.image)


@kept()
def _grid_picture(key: str, box: tuple, grid: tuple[int, int], _image) -> tuple[Image.Image, tuple]:
    small = shrunk(_image, PICKER_SIDE)  # one cached picture per photo: the grid drawn on the thumbnail
    small_box = tuple(v * small.width / _image.width for v in box)
    return overlays.grid_picture(small, grid, small_box), small_box


@kept()
def _grid_picture_uri(key: str, box: tuple, grid: tuple[int, int], selected: tuple[int, int], _image) -> str:
    picture, small_box = _grid_picture(key, box, grid, _image=_image)
    return jpeg_data_uri(overlays.mark_patch(picture, selected, grid, small_box))


def grid_picture_uri(photo: Photo, box, grid: tuple[int, int], selected: tuple[int, int]) -> str:
    """The picture to click in "Click a patch", as a JPEG data URI: the shown photo with the patch grid over
    ``box`` and the ``selected`` patch outlined, at most PICKER_SIDE pixels on its long side (it sits in half a
    page, and is sent to the browser in every run of the tab). The grid is drawn once per photo."""
    return _grid_picture_uri(photo.key, tuple(box), tuple(grid), tuple(selected), _image=photo.image)


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
def analyse(_model: vitviz.ViT, model_spec: str, file: ImageFile, precision: str, _slot=None) -> ImageAnalysis:
    """One forward pass per (model, image, precision): controls never re-run the model. The attention
    tensors are kept only within the budget's share for one analysis. ``_slot``: where its progress bar goes."""
    with block_progress("Running the ViT", _model.config.num_layers, _slot) as progress:
        return analysis_module.analyse_image(_model, decode(file), precision, analysis_share(), progress)


def photo_and_analysis(
    model: vitviz.ViT, settings: Settings, name: str, file: ImageFile, slot=None
) -> tuple[Photo, ImageAnalysis]:
    """The photo and its analysis, with the model's box scaled onto the shown photo (``slot``: block_progress's)."""
    analysis = analyse(model, settings.model_spec, file, settings.precision, _slot=slot)
    photo = Photo(name, file.key, display_photo(file), decode(file))
    return photo, dataclasses.replace(analysis, box=tuple(v * photo.scale for v in analysis.box))


@kept()
def class_map(_model, model_spec: str, file: ImageFile, precision: str, target: int, method: str) -> np.ndarray:
    """One class-specific map (explain.CLASS_SPECIFIC), computed once per method: choosing another method
    computes only that one."""
    analysis = analyse(_model, model_spec, file, precision)
    return analysis_module.class_maps(_model, analysis, target, precision, methods=[method])[method]


@kept(spinner="Reading every block's tokens through the head...")
def logit_lens(_model, model_spec: str, file: ImageFile, precision: str, target: int) -> dict[str, np.ndarray]:
    return analysis_module.logit_lens(_model, analyse(_model, model_spec, file, precision), target, precision)


@kept(spinner="Replacing patches and re-running the model...")
def faithfulness_curves(_model, model_spec: str, file: ImageFile, precision: str, target: int, baseline: str):
    analysis = analyse(_model, model_spec, file, precision)
    maps = {"rollout": analysis.rollout}
    # what the tokens the head reads attend to in the last block, fused over heads
    maps[f"{readout_title(_model.config)} (last layer)"] = analysis.readout_attention[-1].mean(dim=0)
    maps["relevance (Chefer et al.)"] = torch.from_numpy(
        class_map(_model, model_spec, file, precision, target, "relevance")
    )
    with vitviz.autocast(precision, analysis.pixel_values.device.type):
        return {
            name: explain.faithfulness(_model, analysis.pixel_values, m, target, baseline) for name, m in maps.items()
        }


@kept()
def model_input_png(
    model_spec: str, image_key: str, precision: str, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> bytes:
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
    model_spec: str,
    image_key: str,
    precision: str,
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


def readout_maps(_analysis: ImageAnalysis) -> np.ndarray:
    """What the tokens the head reads attend to, every block and head: (layers, heads, rows, cols).
    The [CLS] rows for a [CLS] model, the mean patch row for mean pooling, the rows weighted by the
    pooling head's weights for attention pooling (explain.readout_attention_all); part of every analysis."""
    return _analysis.readout_attention.numpy()


@kept()
def patch_maps(
    model_spec: str,
    image_key: str,
    precision: str,
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
    model_spec: str,
    image_key: str,
    precision: str,
    block: int,
    facet: str,
    *,
    _analysis: ImageAnalysis,
    _model: vitviz.ViT,
) -> np.ndarray:
    """One photo's patch features (N, D) float32 in one block and facet (explain.patch_features), computed once:
    the PCA, the matches and the parts are then cheap functions of them."""
    return explain.patch_features(_model, _analysis.pixel_values, block, facet, precision)[0].numpy()


@kept()
def pca_colours(
    model_spec: str,
    image_keys: tuple[str, ...],
    precision: str,
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
    model_spec: str,
    image_keys: tuple[str, ...],
    precision: str,
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
    model_spec: str, image_key: str, precision: str, target: int, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> dict[str, np.ndarray]:
    """Each head removed in turn (explain.head_importance): the target's logit and probability change, (layers,
    heads) each, with a progress bar per layer; computed once per (model, image, class)."""
    with block_progress("Removing each head in turn", _model.config.num_layers) as progress:
        result = explain.head_importance(_model, _analysis.pixel_values, target, progress=progress, precision=precision)
    return {
        "logit_change": result.logit_change[0].numpy(),
        "probability_change": result.probability_change[0].numpy(),
        "logit": result.logit.numpy(),
        "probability": result.probability.numpy(),
    }


@kept(spinner="Splitting the logit into what each part wrote...")
def logit_parts(
    model_spec: str, image_key: str, precision: str, target: int, *, _analysis: ImageAnalysis, _model: vitviz.ViT
) -> dict[str, np.ndarray] | str:
    """Direct logit attribution (explain.direct_logit_attribution) of the target's logit, or why this model's readout
    cannot be split (an attention-pooling head...)."""
    try:
        parts = explain.direct_logit_attribution(_model, _analysis.pixel_values, target)
    except ValueError as error:
        return str(error)
    return {name: getattr(parts, name)[0].numpy() for name in ("embeddings", "heads", "mlps", "biases", "logit")}


def statistics(_analysis: ImageAnalysis) -> dict[str, np.ndarray]:
    return analysis_module.head_statistics(_analysis)


def token_views(_analysis: ImageAnalysis) -> dict[str, np.ndarray]:
    """The Tokens tab's numbers: attention to each prefix token and among patches (layers, heads, P + 1),
    every token's norm after every block (layers, T)."""
    return {"prefix_shares": _analysis.prefix_shares.numpy(), "token_norms": _analysis.token_norms.numpy()}


def cached_figure(builder: str, *args, **kwargs) -> go.Figure:
    """``figures.<builder>(*args)``, built once per distinct input: a rerun after an unrelated control
    reuses the figure instead of building it again. Shared between sessions, so never modified."""
    args = tuple(a.numpy() if isinstance(a, torch.Tensor) else a for a in args)  # Streamlit hashes numpy
    return _figure(builder, *args, **kwargs)


@kept()
def _figure(builder: str, *args, **kwargs) -> go.Figure:
    return getattr(figures, builder)(*args, **kwargs)


@kept()
def model_anatomy(_model, model_spec: str) -> dict:
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
