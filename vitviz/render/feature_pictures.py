"""Pictures of patch features: PCA colours and part labels painted patch by patch onto the photo, and pictures put
side by side for a download. The patch maps of attention are drawn by ``overlays.py``; these are RGB per patch."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vitviz.layout import TokenLayout
from vitviz.render import overlays

# twelve colours that stay apart for the eye (ColorBrewer's "Paired", light and dark of each hue); parts past the
# twelfth reuse them
PART_COLOURS = np.array(
    [
        [31, 120, 180],
        [227, 26, 28],
        [51, 160, 44],
        [255, 127, 0],
        [106, 61, 154],
        [177, 89, 40],
        [166, 206, 227],
        [251, 154, 153],
        [178, 223, 138],
        [253, 191, 111],
        [202, 178, 214],
        [255, 255, 153],
    ],
    dtype=np.uint8,
)


def paint_patches(
    image: Image.Image,
    colours,
    box: tuple[float, float, float, float] | None = None,
    alpha: float = 1.0,
    layout: TokenLayout | None = None,
    frame: int = 0,
) -> Image.Image:
    """The photo with each patch of ``box`` painted in its colour: ``colours`` is (rows, cols, 3), floats in [0, 1]
    or whole numbers in [0, 255]. Patches stay sharp squares (nearest neighbour), since a PCA colour or a part
    label belongs to a whole patch; ``alpha`` below 1 lets the photo show through. Outside the box the photo is
    dimmed, as in ``overlays.overlay``.

    With the token layout (``output.layout``), ``colours`` is one colour per token or per patch token, (T, 3) or
    (N, 3) in the model's token order, drawn through ``layout.paint`` (input frame ``frame`` of a clip): each token
    over its own box, overlapping boxes averaged, and where no token lies the photo is left as it is. A plain ViT's
    layout paints the same picture as its (rows, cols, 3) grid."""
    colours = np.asarray(colours)
    if layout is None and (colours.ndim != 3 or colours.shape[-1] != 3):
        raise ValueError(f"colours must be (rows, cols, 3); got shape {colours.shape}")
    if layout is not None and (colours.ndim != 2 or colours.shape[-1] != 3):
        raise ValueError(f"with a layout, colours must be one per token, (T, 3) or (N, 3); got shape {colours.shape}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    if np.issubdtype(colours.dtype, np.integer) and colours.dtype != np.uint8:
        if colours.min() < 0 or colours.max() > 255:
            raise ValueError("whole-number colours must be in [0, 255]")
        colours = colours.astype(np.uint8)
    elif colours.dtype != np.uint8:
        if not np.isfinite(colours).all():
            raise ValueError("colours hold NaN or infinite values")
        colours = (np.clip(colours, 0.0, 1.0) * 255).round().astype(np.uint8)
    out = overlays.outline_patches(image, np.zeros((1, 1), dtype=bool), box)  # the photo, dimmed outside the box
    left, top, right, bottom = box or (0, 0, *image.size)
    x0, y0 = max(0, round(left)), max(0, round(top))
    x1, y1 = min(out.width, round(right)), min(out.height, round(bottom))
    size = (round(right) - round(left), round(bottom) - round(top))  # (width, height) of the whole box
    # paint the whole box, then keep the part on the photo (a centre crop may reach past it)
    if layout is None:
        painted, covered = Image.fromarray(colours).resize(size, Image.NEAREST), None
    else:
        planes = np.stack([layout.paint(colours[:, k], frame, (size[1], size[0])) for k in range(3)], axis=-1)
        drawn = ~np.isnan(planes[..., 0])
        painted = Image.fromarray(np.where(drawn[..., None], np.rint(np.nan_to_num(planes)), 0).astype(np.uint8))
        covered = Image.fromarray(drawn.astype(np.uint8) * 255)
    crop = (x0 - round(left), y0 - round(top), x1 - round(left), y1 - round(top))
    blended = Image.blend(out.crop((x0, y0, x1, y1)), painted.crop(crop), alpha)
    out.paste(blended, (x0, y0), None if covered is None else covered.crop(crop))
    return out


def part_colours(labels) -> np.ndarray:
    """Part labels (rows, cols) of ``explain.feature_clusters`` -> their colours (rows, cols, 3) uint8: one colour per
    part, the same in every image."""
    labels = np.asarray(labels)
    if labels.ndim != 2 or not np.issubdtype(labels.dtype, np.integer) or (labels < 0).any():
        raise ValueError(f"labels must be a (rows, cols) array of part numbers >= 0; got {labels.dtype} {labels.shape}")
    return PART_COLOURS[labels % len(PART_COLOURS)]


def side_by_side(pictures: list[Image.Image], height: int = 448, gap: int = 8, columns: int = 8) -> Image.Image:
    """Pictures scaled to one ``height`` and set in rows of up to ``columns`` on white, ``gap`` pixels apart: one file
    for a figure."""
    if not pictures:
        raise ValueError("there are no pictures to put side by side")
    scaled = [
        p.convert("RGB").resize((max(1, round(p.width * height / p.height)), height), Image.LANCZOS) for p in pictures
    ]
    rows = [scaled[start : start + columns] for start in range(0, len(scaled), columns)]
    width = max(sum(p.width for p in row) + gap * (len(row) - 1) for row in rows)
    sheet = Image.new("RGB", (width, len(rows) * height + gap * (len(rows) - 1)), "white")
    for index, row in enumerate(rows):
        x = 0
        for picture in row:
            sheet.paste(picture, (x, index * (height + gap)))
            x += picture.width + gap
    return sheet
