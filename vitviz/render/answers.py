"""A vision-language model's Answer out: its record (answer.json), its arrays (attention.npz), its maps drawn over
the photo, and the image-share chart. Both `vitviz ask` and the dashboard's Ask page write and draw through these.

Tokens and answers are shown through ``readable_text``, so a line break or a lone space is never a blank pill, an
empty "A:" or an empty line of the command's output.

A VLM's map is drawn where its pixels came from: ``vitviz.vlm.photo_map`` lays each tile's token grid into the tile's
box on the photo (NaN where no tile looked: a crop), ``map_over_photo`` colours that raster over the photo, dimming
what the model never saw, and ``map_picture`` adds its colour scale (the value range, drawn into the picture) for the
PNGs that the command and the page's download write.
"""

from __future__ import annotations

import unicodedata

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from vitviz.render.overlays import overlay, with_scale
from vitviz.vlm import Answer, image_shares, photo_map, tile_maps

MAP_SIDE = 512  # the long side, in pixels, of the raster a map is laid into before it is drawn over the photo
_DIMMED = [int(0.35 * v) for v in range(256)] * 3  # pixels no tile saw, at 35 % brightness (as overlay's outside)
MARKS = {"\n": "↵", "\r": "␍", "\t": "⇥"}  # whitespace that would break or blank a line, as it is shown
INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}  # the Unicode categories of characters that print nothing
# the charts' legend, in rows at the top of the chart (the container, not the plot): plotly sets the top margin to hold
# every row, whatever the width. Below the plot (y=-0.25 of its height) it met the x-axis title at 1920 px, which sits
# a fixed number of pixels under the axis; above the plot in its coordinates (y=1.02) it stayed where a narrower
# window's taller legend had put it, over the plot, when the window widened.
LEGEND = dict(orientation="h", yref="container", yanchor="top", y=1, x=0)


def readable_text(text: str) -> str:
    """``text`` (a token, or a whole answer) as the page and the command show it: line breaks as ↵, tabs as ⇥, other
    control characters and line separators escaped (``\\x1b``); where nothing visible is left, spaces as · and any
    other invisible character escaped (``\\u200b``), so a space, a line break or 32 line breaks read as something."""
    blank = all(unicodedata.category(c) in INVISIBLE for c in text)

    def shown(c: str) -> str:
        category = unicodedata.category(c)
        if c in MARKS:
            return MARKS[c]
        if blank and category == "Zs":
            return "·"
        if category in ("Cc", "Zl", "Zp") or (blank and category in INVISIBLE):
            return c.encode("unicode_escape").decode("ascii")
        return c

    return "".join(shown(c) for c in text)


def token_text(answer: Answer, index: int) -> str:
    """Answer token ``index`` as people read it: decoded and stripped, or where that leaves nothing its whitespace
    made visible (``readable_text``); the token's string where decoding gives nothing (a special token, an id with no
    string)."""
    decoded = answer.model.tokenizer.decode([answer.token_ids[index]])
    return readable_text(decoded.strip() or decoded or answer.tokens[index])


def token_name(answer: Answer, index: int | None) -> str:
    """Answer token ``index`` by its index and its text ("token 2 'cat'"); "the whole answer" for None."""
    return "the whole answer" if index is None else f"token {index} '{token_text(answer, index)}'"


def tile_name(answer: Answer, tile: int | None) -> str:
    """Which tile a map covers, where the model splits the photo into tiles ("tile 2 (tile 1,2)" by its index and its
    name, "all tiles"); "" where the model reads the photo as one tile."""
    if len(answer.tiles) < 2:
        return ""
    return "all tiles" if tile is None else f"tile {tile} ({answer.tiles[tile].name})"


def map_raster(answer: Answer, values: np.ndarray, tile: int | None = None) -> np.ndarray:
    """Per-image-token ``values`` (N,) laid into the tiles' boxes on a raster of the photo's shape, at most MAP_SIDE
    pixels on its long side: float32 (height, width), NaN where no (chosen) tile looked."""
    width, height = answer.photo_size
    scale = min(1.0, MAP_SIDE / max(width, height))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    maps = tile_maps(answer, np.asarray(values, dtype=np.float32))
    return photo_map(answer.tiles, maps, answer.photo_size, size, tile)


def map_over_photo(
    photo: Image.Image,
    raster: np.ndarray,
    colormap: str = "inferno",
    alpha: float = 0.5,
    value_range: tuple[float, float] | None = None,
) -> Image.Image:
    """``raster`` (any resolution of the photo's shape, NaN where unseen) coloured over ``photo`` at the photo's own
    size: min-max scaled over the seen pixels, or from ``value_range``; the unseen pixels dimmed."""
    values = np.asarray(raster, dtype=np.float32)
    seen = ~np.isnan(values)
    if not seen.any():
        raise ValueError("the map covers no pixel of the photo")
    low, high = value_range or (float(values[seen].min()), float(values[seen].max()))
    if not high > low:  # a constant map: drawn at the low end of the colours
        high = low + 1.0
    picture = overlay(photo, np.where(seen, values, low), colormap, alpha, None, (low, high))
    if not seen.all():
        unseen = Image.fromarray((~seen).astype(np.uint8) * 255).resize(photo.size, Image.NEAREST)
        picture.paste(photo.convert("RGB").point(_DIMMED), mask=unseen)
    return picture


def map_range(raster: np.ndarray) -> tuple[float, float]:
    """The lowest and highest value of ``raster`` on the pixels a tile saw: the ends of its colour scale as
    ``map_over_photo`` draws it (the low end for both where the map is constant)."""
    values = np.asarray(raster, dtype=np.float32)
    seen = values[~np.isnan(values)]
    if not seen.size:
        raise ValueError("the map covers no pixel of the photo")
    return float(seen.min()), float(seen.max())


def map_picture(
    photo: Image.Image, raster: np.ndarray, colormap: str = "inferno", alpha: float = 0.5, label: str = ""
) -> Image.Image:
    """``map_over_photo`` with its colour scale drawn below the photo (``with_scale``): ``label``, the colours, and
    the values of their two ends. The PNG a map is saved as."""
    low, high = map_range(raster)
    return with_scale(map_over_photo(photo, raster, colormap, alpha), colormap, low, high, label)


def answer_record(answer: Answer, **extra: object) -> dict:
    """What answer.json holds: the question, the answer, each token (id, string, log-probability, and its shares of
    attention per layer on the image, on the text and on the first token, the heads' mean), the model's size and the
    tiles; ``extra`` (the image's path, the model's spec) first."""
    shares = image_shares(answer)
    tokens = [
        {
            "index": index,
            "id": int(token_id),
            "token": token,
            "logprob": float(answer.logprobs[index]),
            "image_share": shares.image[index].round(6).tolist(),
            "text_share": shares.text[index].round(6).tolist(),
            "first_share": shares.first[index].round(6).tolist(),
        }
        for index, (token_id, token) in enumerate(zip(answer.token_ids, answer.tokens, strict=True))
    ]
    _, layers, heads, count = answer.image_attention.shape
    return {
        **extra,
        "question": answer.question,
        "answer": answer.text,
        "generated": answer.generated,
        "layers": layers,
        "heads": heads,
        "image_tokens": count,
        "photo_size": list(answer.photo_size),
        "tiles": [{"name": t.name, "grid": list(t.grid), "box": [float(v) for v in t.box]} for t in answer.tiles],
        "tokens": tokens,
    }


def answer_arrays(answer: Answer, relevance: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """What attention.npz holds: image_attention (n, L, H, N), image_token_grid (N, 3), the tiles' boxes (K, 4),
    grids (K, 2) and names, the shares (n, L, H), the log-probabilities and token ids; with ``relevance`` (n, N),
    the relevance of each answer token over the image tokens too."""
    arrays = {
        "image_attention": answer.image_attention,
        "image_token_grid": answer.image_token_grid,
        "tile_boxes": np.array([t.box for t in answer.tiles], dtype=np.float32).reshape(-1, 4),
        "tile_grids": np.array([t.grid for t in answer.tiles], dtype=np.int64).reshape(-1, 2),
        "tile_names": np.array([t.name for t in answer.tiles]),
        "image_share": answer.image_share,
        "first_share": answer.first_share,
        "logprobs": answer.logprobs,
        "token_ids": np.array(answer.token_ids, dtype=np.int64),
    }
    if relevance is not None:
        arrays["relevance"] = np.asarray(relevance, dtype=np.float32)
    return arrays


def image_share_figure(answer: Answer, token: int | None = None, head: int | None = None) -> go.Figure:
    """Per layer, the share of answer token ``token``'s attention (None: the mean over the answer's tokens) on the
    image tokens, on the text and on the first token (the attention sink), for ``head`` (None: the heads' mean)."""
    shares = image_shares(answer, head)
    pick = (lambda part: part.mean(axis=0)) if token is None else (lambda part: part[token])
    layers = list(range(shares.image.shape[1]))
    figure = go.Figure()
    for name, part, colour in (
        ("image tokens", shares.image, "rgb(214, 96, 39)"),
        ("text tokens", shares.text, "rgb(49, 130, 189)"),
        ("first token (sink)", shares.first, "rgb(120, 120, 120)"),
    ):
        figure.add_trace(
            go.Scatter(x=layers, y=pick(part).tolist(), name=name, mode="lines+markers", line_color=colour)
        )
    figure.update_layout(
        # whole layers only, about ten ticks at most: a 2-layer model showed 0, 0.5, 1
        xaxis=dict(title="layer", tickmode="linear", tick0=0, dtick=max(1, round(len(layers) / 10))),
        yaxis_title="share of the attention",
        yaxis_range=[0, 1],
        height=340,
        margin=dict(l=10, r=10, t=10, b=10),
        legend=LEGEND,
    )
    return figure


def curve_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]], y_title: str) -> go.Figure:
    """Curves by name, each (x, y): the knock-out curves of an answer (fraction of image tokens removed, the answer's
    log-probability)."""
    figure = go.Figure()
    for name, (x, y) in curves.items():
        figure.add_trace(go.Scatter(x=np.asarray(x).tolist(), y=np.asarray(y).tolist(), name=name, mode="lines"))
    figure.update_layout(
        xaxis_title="fraction of the image tokens removed",
        yaxis_title=y_title,
        height=340,
        margin=dict(l=10, r=10, t=10, b=10),
        legend=LEGEND,
    )
    return figure
