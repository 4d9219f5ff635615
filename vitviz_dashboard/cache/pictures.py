"""Cached pictures of the photo, none of which runs the model: the decoded and shown photo, thumbnails, overlays of a
map, the patch grid to click, and Plotly figures; and the sample photos offered before any upload.

One key convention: a picture drawn on a photo is keyed by the photo's digest (``image_key``, or an ImageFile, which
is keyed by its digest) and the choices that shape it; the picture to draw on is passed unhashed (``_image``).
Everything lives in budget.STORE, bounded in bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import random
from pathlib import Path, PurePosixPath

import numpy as np
import plotly.graph_objects as go
import torch
from PIL import Image

from vitviz.dataset.sources import Entry, SourceError, open_source
from vitviz.preprocessing import ImageFile, load_image
from vitviz.render import feature_pictures, figures, overlays
from vitviz_dashboard.cache.budget import kept
from vitviz_dashboard.page import Photo, Settings

MAX_DISPLAY_SIDE = 1024
MIN_DISPLAY_SIDE = 256  # smaller photos are enlarged by a whole factor for the page (display_photo)
THUMBNAIL_SIDE = 256  # the photo under each small multiple (a head's map)
PICKER_SIDE = 768  # the click-a-patch picture's long side, in pixels


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
def _thumbnail(image_key: str, *, _image: Image.Image) -> Image.Image:
    return shrunk(_image, THUMBNAIL_SIDE)


def thumbnail(photo: Photo) -> tuple[Photo, float]:
    """The shown photo at most THUMBNAIL_SIDE pixels on its long side, as a Photo of its own (for small multiples
    drawn over the photo), and its scale against the shown photo (multiply a box by it)."""
    small = _thumbnail(photo.key, _image=photo.image)
    return dataclasses.replace(photo, key=f"{photo.key}|thumbnail", image=small), small.width / photo.image.width


@kept()
def _overlay_jpeg(
    image_key: str,
    patch_map: np.ndarray,
    box: tuple,
    colormap: str,
    alpha: float,
    value_range,
    mark,
    *,
    _image: Image.Image,
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
def _vote_jpeg(image_key: str, votes: np.ndarray, shown: tuple, box: tuple, alpha: float, *, _image) -> bytes:
    buffer = io.BytesIO()
    picture = feature_pictures.paint_patches(_image, figures.vote_colours(votes, list(shown)), box, alpha)
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def vote_picture(photo: Photo, votes: np.ndarray, shown: tuple, box, alpha: float) -> bytes:
    """The shown photo with each patch painted in its class's colour (figures.vote_colours), as JPEG bytes, cached."""
    return _vote_jpeg(photo.key, np.asarray(votes), shown, tuple(box), alpha, _image=photo.image)


@kept()
def _outlined_jpeg(image_key: str, mask: np.ndarray, box: tuple, *, _image) -> bytes:
    buffer = io.BytesIO()
    overlays.outline_patches(_image, mask, box).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def outlined_picture(photo: Photo, mask: np.ndarray, box) -> bytes:
    """The shown photo with the patches of ``mask`` (rows, cols) outlined, as JPEG bytes, cached."""
    return _outlined_jpeg(photo.key, np.asarray(mask, dtype=bool), tuple(box), _image=photo.image)


@kept()
def _grid_picture(image_key: str, box: tuple, grid: tuple[int, int], *, _image) -> tuple[Image.Image, tuple]:
    small = shrunk(_image, PICKER_SIDE)  # one cached picture per photo: the grid drawn on the thumbnail
    small_box = tuple(v * small.width / _image.width for v in box)
    return overlays.grid_picture(small, grid, small_box), small_box


@kept()
def _grid_picture_uri(image_key: str, box: tuple, grid: tuple[int, int], selected: tuple[int, int], *, _image) -> str:
    picture, small_box = _grid_picture(image_key, box, grid, _image=_image)
    return jpeg_data_uri(overlays.mark_patch(picture, selected, grid, small_box))


def grid_picture_uri(photo: Photo, box, grid: tuple[int, int], selected: tuple[int, int]) -> str:
    """The picture to click in "Click a patch", as a JPEG data URI: the shown photo with the patch grid over
    ``box`` and the ``selected`` patch outlined, at most PICKER_SIDE pixels on its long side (it sits in half a
    page, and is sent to the browser in every run of the tab). The grid is drawn once per photo."""
    return _grid_picture_uri(photo.key, tuple(box), tuple(grid), tuple(selected), _image=photo.image)


def jpeg_data_uri(picture: Image.Image, quality: int = 85) -> str:
    """The picture as a JPEG data URI, for an <img> the page draws itself (widgets.click_picture)."""
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def cached_figure(builder: str, *args, **kwargs) -> go.Figure:
    """``figures.<builder>(*args)``, built once per distinct input: a rerun after an unrelated control
    reuses the figure instead of building it again. Shared between sessions, so never modified."""
    args = tuple(a.numpy() if isinstance(a, torch.Tensor) else a for a in args)  # hashed by their bytes
    return _figure(builder, *args, **kwargs)


@kept()
def _figure(builder: str, *args, **kwargs) -> go.Figure:
    return getattr(figures, builder)(*args, **kwargs)


@kept()
def colour_bar_png(colormap: str) -> bytes:
    """A 384 x 14 strip of ``colormap``, as PNG: the colour legend under every map."""
    buffer = io.BytesIO()
    overlays.colour_bar(colormap, width=384, height=14).save(buffer, format="PNG")
    return buffer.getvalue()


# at most this many photos of each sample folder are read and kept: VITVIZ_SAMPLES may name a dataset-sized folder
MAX_FOLDER_SAMPLES = 64


@kept()
def sample_images(sources: tuple[Path, ...], count: int = 10) -> list[tuple[str, ImageFile]]:
    """The photos offered before any upload: the images of the folders among ``sources`` (named by their path in
    the folder; the first MAX_FOLDER_SAMPLES of each), then one random image per class (its folder) from the first
    zip among them, at most ``count`` ("bird 0001.png"). Read through vitviz's own source reader
    (vitviz.dataset.sources.open_source), the one that walks folders and zips for `vitviz index`; a source that is
    missing or holds no image is passed over."""
    folders = [path for path in sources if path.is_dir()]
    found = [(e.path, ImageFile.of(e.read())) for path in folders for e in _entries(path)[:MAX_FOLDER_SAMPLES]]
    archive = next((p for p in sources if p.is_file() and p.suffix.lower() == ".zip"), None)
    if archive is None:
        return found
    by_class: dict[str, list[Entry]] = {}
    for entry in _entries(archive):
        by_class.setdefault(entry.label or "", []).append(entry)
    rng = random.Random(0)
    picks = [rng.choice(entries) for _, entries in sorted(by_class.items())][:count]
    return found + [(" ".join(PurePosixPath(e.path).parts[-2:]), ImageFile.of(e.read())) for e in picks]


def _entries(path: Path) -> list[Entry]:
    """The image entries of a folder or zip, or none where it holds no readable image."""
    try:
        return list(open_source(path))
    except SourceError:
        return []
