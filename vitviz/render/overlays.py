"""Patch maps in, pictures out: colormaps, overlays on the photo, outlined and masked patches, and a map's colour
scale with the values of its two ends (``scale_strip``; ``with_scale`` draws it under a picture). No streamlit here.

Maps arrive as (rows, cols) arrays at patch resolution. They are upsampled bilinearly onto
the original photo at its own resolution (not onto the model's small input), inside the box
of the photo the model actually saw (``Preprocessing.crop_box``). With the token layout (``output.layout``), a map
is one value per token instead, laid out by the layout: an image's grid through its ``grid_view``, any other tokens
(tiles, a clip's frame) through ``layout.paint``, the one drawing path from tokens to pixels.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import plotly.colors
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont

from vitviz.layout import TokenLayout

COLORMAPS = ("inferno", "viridis", "magma", "plasma", "turbo", "jet", "hot", "greys")


def as_array(values) -> np.ndarray:
    return values.detach().cpu().float().numpy() if isinstance(values, torch.Tensor) else np.asarray(values, np.float32)


@lru_cache(maxsize=len(COLORMAPS))
def colormap_table(name: str) -> np.ndarray:
    """(256, 3) uint8 RGB lookup table for one of ``COLORMAPS``."""
    if name not in COLORMAPS:
        raise ValueError(f"colormap must be one of {', '.join(COLORMAPS)}; got {name!r}")
    scale = plotly.colors.get_colorscale(name)
    samples = plotly.colors.sample_colorscale(scale, list(np.linspace(0, 1, 256)), colortype="rgb")
    return np.array([plotly.colors.unlabel_rgb(color) for color in samples]).round().astype(np.uint8)


@lru_cache(maxsize=len(COLORMAPS))
def plotly_colorscale(name: str) -> tuple[tuple[float, str], ...]:
    """The same colours as ``colormap_table`` as a plotly colorscale of "rgb(r, g, b)" strings.

    Hex codes are avoided on purpose: Streamlit's front end rewrites colours "#000001".."#0000xx"
    (its theme placeholders), which turns the dark end of inferno/magma (#000004) purple.
    """
    table = colormap_table(name)
    return tuple((i / 32, "rgb({}, {}, {})".format(*table[min(255, i * 8)])) for i in range(33))


def colour_bar(colormap: str = "inferno", width: int = 256, height: int = 10) -> Image.Image:
    """A horizontal strip of ``colormap``, low values on the left: the legend of an overlay."""
    row = colormap_table(colormap)[np.linspace(0, 255, width).round().astype(np.uint8)]  # (width, 3)
    return Image.fromarray(np.repeat(row[None], height, axis=0))


SCALE_MIN_WIDTH = 160  # the narrowest colour scale: its two values and the bar between them stay readable


def value_text(value: float) -> str:
    """A value of a colour scale as it is written: three significant digits."""
    return f"{value:.3g}"


def scale_strip(colormap: str, low: float, high: float, width: int = 256, label: str = "") -> Image.Image:
    """The colour scale of a map as a picture ``width`` pixels wide (at least SCALE_MIN_WIDTH): ``label`` (what the
    map shows, in at most three lines) when given, ``colour_bar`` across, and under its ends the values ``low`` and
    ``high`` that its first and last colours stand for. Black on white, the text sized to the width."""
    width = max(int(width), SCALE_MIN_WIDTH)
    size = max(11, min(28, round(width / 40)))  # the text's pixels: readable on a thumbnail and on a 4k photo
    font = ImageFont.load_default(size)
    pad, bar, line = size // 2, size, size + size // 3
    lines = _wrapped(label, font, width - 2 * pad)
    top = pad + line * len(lines)
    strip = Image.new("RGB", (width, top + bar + pad // 2 + line + pad // 2), "white")
    strip.paste(colour_bar(colormap, width - 2 * pad, bar), (pad, top))
    draw = ImageDraw.Draw(strip)
    for number, text in enumerate(lines):
        draw.text((pad, pad + number * line), text, fill="black", font=font)
    under = top + bar + pad // 2
    draw.text((pad, under), value_text(low), fill="black", font=font)
    draw.text((width - pad, under), value_text(high), fill="black", font=font, anchor="ra")
    return strip


def _wrapped(text: str, font, width: float, most: int = 3) -> list[str]:
    """``text`` in lines at most ``width`` pixels wide in ``font``, broken between words; at most ``most`` lines, the
    last cut with an ellipsis where more would follow."""
    lines: list[str] = []
    for word in text.split():
        if lines and font.getlength(f"{lines[-1]} {word}") <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    if len(lines) > most:
        lines = lines[: most - 1] + [" ".join(lines[most - 1 :])]
    return [_fitted(line, font, width) for line in lines]


def _fitted(text: str, font, width: float) -> str:
    """``text``, cut with an ellipsis where it is wider than ``width`` pixels in ``font``."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def with_scale(picture: Image.Image, colormap: str, low: float, high: float, label: str = "") -> Image.Image:
    """``picture`` (a map over a photo, unchanged at its own size) with its colour scale (``scale_strip``) drawn
    below it: the PNG that a map is saved as, readable without the page that drew it."""
    strip = scale_strip(colormap, low, high, picture.width, label)
    whole = Image.new("RGB", (max(picture.width, strip.width), picture.height + strip.height), "white")
    whole.paste(picture.convert("RGB"), (0, 0))
    whole.paste(strip, (0, picture.height))
    return whole


def rescale(patch_map) -> np.ndarray:
    """Min-max scale to [0, 1] for display (a constant map becomes all zeros)."""
    values = as_array(patch_map)
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


FLAT = 1e-5  # a map whose values all lie within this fraction of its largest magnitude picks out no patch


def is_flat(patch_map, relative: float = FLAT) -> bool:
    """Whether a map is flat: its spread (max - min) at most ``relative`` of its largest magnitude (or 0). Drawn on a
    scale from 0 it would be one bright wash, as if every patch mattered to the full."""
    values = as_array(patch_map)
    if values.size == 0 or not np.isfinite(values).all():
        return False
    spread, size = float(values.max() - values.min()), float(np.abs(values).max())
    return spread <= relative * size


def upsample(patch_map, height: int, width: int) -> np.ndarray:
    """(rows, cols) -> (height, width) by bilinear interpolation (align_corners=False)."""
    values = torch.as_tensor(as_array(patch_map))[None, None]
    return F.interpolate(values, size=(height, width), mode="bilinear", align_corners=False)[0, 0].numpy()


def colorize(values: np.ndarray, colormap: str = "inferno") -> np.ndarray:
    """[0, 1] values (H, W) -> (H, W, 3) uint8 colours: entry round(255 * value) of ``colormap_table``."""
    return np.asarray(_colour_image(Image.fromarray(np.asarray(values, dtype=np.float32), mode="F"), colormap))


def _colour_image(values: Image.Image, colormap: str) -> Image.Image:
    """An "F" image of [0, 1] values -> an RGB image, with PIL's C loops (faster than numpy indexing).
    PIL converts floats to bytes by truncation, so adding 0.5 rounds (halves up, where numpy's rint
    would round them to even: a difference of one table entry, for exact halves only)."""
    indices = values.point(lambda v: v * 255 + 0.5).convert("L")
    table = colormap_table(colormap)
    return Image.merge("RGB", [indices.point(table[:, channel].tolist()) for channel in range(3)])


_DIMMED = [int(0.35 * v) for v in range(256)] * 3  # the photo outside the box, at 35 % brightness


def overlay(
    image: Image.Image,
    patch_map,
    colormap: str = "inferno",
    alpha: float = 0.5,
    box: tuple[float, float, float, float] | None = None,
    value_range: tuple[float, float] | None = None,
    layout: TokenLayout | None = None,
    frame: int = 0,
) -> Image.Image:
    """Blend a coloured patch map onto the photo at the photo's own resolution.

    The map is min-max scaled (``rescale``), or with ``value_range`` (low, high) mapped linearly from that
    fixed range and clipped, so that maps of one kind compare by colour (probabilities: (0, 1)).

    ``box`` (left, top, right, bottom) is where the model's input came from; outside it the photo
    is shown dimmed, since the model never saw those pixels. Default: the whole photo.

    Inside the box each pixel is ``(1 - alpha) * photo + alpha * colour``, the colour taken from the
    map upsampled bilinearly with half-pixel centres (as ``upsample``). It is computed with PIL's C
    loops: a 1024 x 768 overlay takes 7 ms instead of 25 ms with numpy (bench/bench_render.py), which
    matters for a page that redraws it whenever the opacity or colormap changes. tests/test_plots.py
    checks it against the numpy formula with ``upsample``: at most 1 of 255 apart, or one colormap step
    on the rare pixel whose value rounds the other way.

    With the token layout (``output.layout``), ``patch_map`` is one value per token or per patch token, (T,) or
    (N,), in the model's token order. An image's grid of patches is laid out through the layout's own order
    (``grid_view``) and drawn as above, the same picture as its (rows, cols) map; tokens that form no one grid
    (tiles, a clip's frame ``frame``) are drawn through ``layout.paint``: each token over its own box, overlapping
    boxes averaged, and the photo left as it is where no token lies.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    photo = image if image.mode == "RGB" else image.convert("RGB")
    width, height = photo.size
    # the map covers the whole box, which may reach past the photo (a centre crop larger than the
    # resized photo pads it): only the part on the photo is drawn
    bx0, by0, bx1, by1 = (int(round(v)) for v in (box or (0, 0, width, height)))
    x0, y0, x1, y1 = max(0, bx0), max(0, by0), min(width, bx1), min(height, by1)
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"box {box} does not overlap the {width}x{height} image")
    painted = None  # the layout's painting of the whole box, when its tokens form no one image grid
    if layout is not None:
        values = as_array(patch_map)
        if values.ndim != 1:
            raise ValueError(f"with a layout, the map is one value per token, (T,) or (N,); got shape {values.shape}")
        if layout.grid is not None and layout.grid[0] == 1 and layout.num_frames == 1:
            patch_map = layout.grid_view(values)[0]
        else:
            painted = layout.paint(values, frame, (by1 - by0, bx1 - bx0))
            patch_map = painted[~np.isnan(painted)]
            if patch_map.size == 0:
                raise ValueError("no token of the layout covers the box's pixels")
    # PIL's bilinear filter, upsampling, is upsample's: triangle weights around half-pixel centres,
    # edges clamped (PIL drops the weights that fall outside and renormalises: the same values). On a
    # box smaller than the patch grid (a tiny photo) PIL averages neighbouring patches instead of
    # sampling between two of them, which is the better picture there.
    low, high = _value_range(patch_map, value_range)
    out = photo.point(_DIMMED)
    if painted is None:
        scaled = _scaled(as_array(patch_map), low, high)
        values = Image.fromarray(scaled.astype(np.float32), mode="F").resize((bx1 - bx0, by1 - by0), Image.BILINEAR)
        covered = None
    else:
        drawn = ~np.isnan(painted)
        values = Image.fromarray(np.where(drawn, _scaled(np.nan_to_num(painted), low, high), 0).astype(np.float32))
        covered = Image.fromarray(drawn.astype(np.uint8) * 255).crop((x0 - bx0, y0 - by0, x1 - bx0, y1 - by0))
    values = values.crop((x0 - bx0, y0 - by0, x1 - bx0, y1 - by0))
    region = photo.crop((x0, y0, x1, y1))
    if covered is not None:  # the photo itself where no token lies, not dimmed: the model saw those pixels
        out.paste(region, (x0, y0))
    out.paste(Image.blend(region, _colour_image(values, colormap), alpha), (x0, y0), covered)
    return out


def _value_range(patch_map, value_range: tuple[float, float] | None) -> tuple[float, float]:
    """The (low, high) a map's colours span: ``value_range``, checked, or the map's own min and max."""
    if value_range is None:
        values = as_array(patch_map)
        return float(values.min()), float(values.max())
    low, high = value_range
    if not high > low:
        raise ValueError(f"value_range must be (low, high) with high > low; got {value_range}")
    return low, high


def _scaled(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Values mapped linearly from [low, high] to [0, 1] and clipped (``rescale`` for the map's own range)."""
    if not high > low:
        return np.zeros_like(values)
    return np.clip((values - low) / (high - low), 0.0, 1.0)


def top_mass_mask(patch_map, mass: float = 0.6) -> np.ndarray:
    """DINO-style mask: the fewest patches holding at least ``mass`` of the (non-negative) total."""
    if not 0.0 < mass <= 1.0:
        raise ValueError(f"mass must be in (0, 1]; got {mass}")
    values = np.clip(as_array(patch_map), 0, None)
    flat = values.flatten()
    order = np.argsort(-flat, kind="stable")
    cumulative = np.cumsum(flat[order]) / max(flat.sum(), np.finfo(np.float32).tiny)
    keep = np.zeros(flat.size, dtype=bool)
    keep[order[: int(np.searchsorted(cumulative, mass - 1e-9)) + 1]] = True
    return keep.reshape(values.shape)


def masked_image(
    image: Image.Image,
    mask: np.ndarray,
    box: tuple[float, float, float, float] | None = None,
    layout: TokenLayout | None = None,
    frame: int = 0,
) -> Image.Image:
    """The photo with patches outside ``mask`` (rows, cols) darkened. With the token layout (``output.layout``),
    ``mask`` is one bool per token or per patch token, (T,) or (N,), in the model's token order, drawn through
    ``layout.paint`` (input frame ``frame`` of a clip): a pixel is kept where a kept token's box holds it. (The
    mask is drawn over the part of the box on the photo, as a (rows, cols) mask is.)"""
    photo = np.asarray(image.convert("RGB"), dtype=np.float32)
    height, width = photo.shape[:2]
    left, top, right, bottom = box or (0, 0, width, height)
    keep = np.zeros((height, width), dtype=bool)
    x0, y0, x1, y1 = (int(round(v)) for v in (left, top, right, bottom))
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(width, x1), min(height, y1)
    mask = np.asarray(mask)
    if layout is None:
        resized = Image.fromarray(mask.astype(np.uint8) * 255).resize((x1 - x0, y1 - y0), Image.NEAREST)
        keep[y0:y1, x0:x1] = np.asarray(resized) > 0
    else:
        if mask.ndim != 1:
            raise ValueError(f"with a layout, the mask is one bool per token, (T,) or (N,); got shape {mask.shape}")
        keep[y0:y1, x0:x1] = layout.paint(mask.astype(np.float64), frame, (y1 - y0, x1 - x0)) > 0.5
    return Image.fromarray(np.where(keep[..., None], photo, photo * 0.2).astype(np.uint8))


def outline_patches(
    image: Image.Image,
    mask,
    box: tuple[float, float, float, float] | None = None,
    colour: tuple[int, int, int] = (0, 255, 255),
) -> Image.Image:
    """The photo with an outlined rectangle on each patch where ``mask`` (rows, cols) is True, e.g. the
    high-norm patches of explain.high_norm_patches. ``box`` is where the model's input came from, as in
    ``overlay``: the grid covers it, and outside it the photo is dimmed, so the picture matches an overlay
    of the same photo beside it. The line is about a tenth of a patch wide (at least 2 pixels)."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise ValueError(f"mask must be (rows, cols); got shape {mask.shape}")
    photo = image if image.mode == "RGB" else image.convert("RGB")
    width, height = photo.size
    left, top, right, bottom = box or (0, 0, width, height)
    x0, y0, x1, y1 = (int(round(v)) for v in (left, top, right, bottom))
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(width, x1), min(height, y1)
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"box {box} does not overlap the {width}x{height} image")
    out = photo.point(_DIMMED)
    out.paste(photo.crop((x0, y0, x1, y1)), (x0, y0))
    _outline_cells(out, list(zip(*np.nonzero(mask))), mask.shape, (left, top, right, bottom), colour)
    return out


def mark_patch(
    image: Image.Image,
    patch: tuple[int, int],
    grid: tuple[int, int],
    box: tuple[float, float, float, float] | None = None,
    colour: tuple[int, int, int] = (0, 255, 255),
) -> Image.Image:
    """A copy of ``image`` (e.g. an overlay) with patch (row, col) of the (rows, cols) ``grid`` over ``box``
    outlined."""
    out = image.copy()
    _outline_cells(out, [patch], grid, box or (0, 0, *image.size), colour)
    return out


def _outline_cells(image: Image.Image, cells, grid: tuple[int, int], box, colour) -> None:
    """Draw a rectangle on each (row, col) of ``cells``, in place; the line is about a tenth of a patch wide."""
    left, top, right, bottom = box
    rows, cols = grid
    cell_w, cell_h = (right - left) / cols, (bottom - top) / rows
    line = max(2, round(min(cell_w, cell_h) / 10))
    draw = ImageDraw.Draw(image)
    for r, c in cells:
        x0, y0 = round(left + c * cell_w), round(top + r * cell_h)
        # a patch under a pixel wide (a thin photo, a fine grid) still gets a rectangle, never x1 < x0
        x1, y1 = max(x0, round(left + (c + 1) * cell_w) - 1), max(y0, round(top + (r + 1) * cell_h) - 1)
        draw.rectangle([x0, y0, x1, y1], outline=colour, width=line)


def grid_picture(
    image: Image.Image,
    grid: tuple[int, int],
    box: tuple[float, float, float, float] | None = None,
    selected: tuple[int, int] | None = None,
    max_lines: int = 40,
) -> Image.Image:
    """A copy of ``image`` with the model's (rows, cols) patch grid over ``box`` as thin light lines (up to
    ``max_lines`` patches a side: finer grids would hide the photo) and the ``selected`` (row, col) outlined:
    the picture to click in "Click a patch". Outside ``box`` the photo is dimmed, as in ``outline_patches``."""
    rows, cols = grid
    out = outline_patches(image, np.zeros(grid, dtype=bool), box)
    left, top, right, bottom = box or (0, 0, *image.size)
    if max(rows, cols) <= max_lines:
        lines = Image.new("RGBA", out.size)
        draw = ImageDraw.Draw(lines)
        width, height = out.size  # the last line of a box that ends at the picture's edge: its last pixel
        for k in range(cols + 1):
            x = min(round(left + k * (right - left) / cols), width - 1)
            draw.line([(x, round(top)), (x, round(bottom))], fill=(255, 255, 255, 110))
        for k in range(rows + 1):
            y = min(round(top + k * (bottom - top) / rows), height - 1)
            draw.line([(round(left), y), (round(right), y)], fill=(255, 255, 255, 110))
        out = Image.alpha_composite(out.convert("RGBA"), lines).convert("RGB")
    if selected is not None:
        _outline_cells(out, [selected], grid, (left, top, right, bottom), (0, 255, 255))
    return out


def patch_at(
    x: float,
    y: float,
    shown: tuple[float, float],
    size: tuple[int, int],
    grid: tuple[int, int],
    box: tuple[float, float, float, float] | None = None,
) -> tuple[int, int] | None:
    """The (row, col) of the patch under a click at pixel (x, y) of an image of ``size`` (width, height) shown
    at ``shown`` (width, height) pixels, for the (rows, cols) ``grid`` over ``box`` (in the image's pixels; the
    whole image by default). None where the click is outside ``box``: that part of the photo never reached
    the model (a centre crop, say)."""
    (shown_w, shown_h), (width, height) = shown, size
    if shown_w <= 0 or shown_h <= 0:
        raise ValueError(f"the shown size must be positive; got {shown}")
    left, top, right, bottom = box or (0, 0, width, height)
    # the clicked point in the image's pixels, kept inside the image: a browser may report a click on the
    # last (fractional) pixel column of the shown picture as its width
    px = min(max(x * width / shown_w, 0.0), width - 1e-6)
    py = min(max(y * height / shown_h, 0.0), height - 1e-6)
    if not (left <= px < right and top <= py < bottom):
        return None
    rows, cols = grid
    return min(rows - 1, int((py - top) / (bottom - top) * rows)), min(
        cols - 1, int((px - left) / (right - left) * cols)
    )
