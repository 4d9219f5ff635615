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

import html
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


HIGHLIGHT = (214, 96, 39)  # the tokens' highlight: the image share's colour, its opacity the weight


def highlighted_tokens(words: list[str], weights: np.ndarray, high: float | None = None) -> str:
    """Tokens as a line of HTML spans, each shaded by its weight (its opacity weight / ``high``, the highest weight
    by default), the weight in its tooltip (``title``) and in ``data-weight``: a text heatmap. The words are shown
    through ``readable_text`` and escaped."""
    weights = np.asarray(weights, dtype=np.float64)
    top = float(high if high is not None else (weights.max() if weights.size else 0.0))
    spans = []
    for word, weight in zip(words, weights, strict=True):
        share = 0.0 if top <= 0 else float(np.clip(weight / top, 0.0, 1.0))
        colour = "rgba({}, {}, {}, {:.3f})".format(*HIGHLIGHT, share)
        text = html.escape(readable_text(word)) or "&nbsp;"
        spans.append(
            f'<span class="vitviz-token" title="{weight:.4g}" data-weight="{weight:.6g}" style="background:{colour};'
            f'border-radius:3px;padding:1px 2px;margin:1px;display:inline-block;white-space:pre">{text}</span>'
        )
    return '<div style="line-height:1.9">' + "".join(spans) + "</div>"


def token_centres(answer: Answer, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(indices (M,), centres float64 (M, 2) as (x, y) on a picture of ``size`` = (width, height)): the centre of
    each image token's cell in the photo, scaled to that picture; tokens outside every grid (a kept [CLS]) are
    left out."""
    grid = answer.image_token_grid
    scale = np.array(size, dtype=np.float64) / np.array(answer.photo_size, dtype=np.float64)
    indices, centres = [], []
    for index, (tile, row, col) in enumerate(grid):
        if row < 0:
            continue
        left, top, right, bottom = answer.tiles[tile].cell(int(row), int(col))
        indices.append(index)
        centres.append(((left + right) / 2, (top + bottom) / 2))
    return np.array(indices, dtype=np.int64), np.array(centres, dtype=np.float64).reshape(-1, 2) * scale


def patch_figure(photo: Image.Image, answer: Answer, selected: list[int] | np.ndarray = ()) -> go.Figure:
    """The photo (at most MAP_SIDE pixels on its long side) with one marker at each image token's cell: a click
    selects one, a box or a lasso several (``customdata``: the image token's index). ``selected`` tokens are filled;
    where tiles overlap (a global image and its splits), their markers lie close together."""
    scale = min(1.0, MAP_SIDE / max(photo.size))
    size = (max(1, round(photo.width * scale)), max(1, round(photo.height * scale)))
    picture = photo.convert("RGB").resize(size, Image.BILINEAR)
    indices, centres = token_centres(answer, size)
    chosen = np.isin(indices, np.asarray(selected, dtype=np.int64))
    names = [
        f"image token {i}"
        + (f", {answer.tiles[answer.image_token_grid[i, 0]].name}" if len(answer.tiles) > 1 else "")
        + f", row {answer.image_token_grid[i, 1]}, column {answer.image_token_grid[i, 2]}"
        for i in indices
    ]
    figure = go.Figure(go.Image(z=np.asarray(picture), hoverinfo="skip"))
    figure.add_trace(
        go.Scatter(
            x=centres[:, 0].tolist(),
            y=centres[:, 1].tolist(),
            mode="markers",
            customdata=indices[:, None].tolist(),
            text=names,
            hovertemplate="%{text}<extra></extra>",
            marker=dict(
                size=9,
                color=["rgba(231, 111, 81, 0.95)" if c else "rgba(255, 255, 255, 0.6)" for c in chosen],
                line=dict(width=1.5, color="rgba(0, 0, 0, 0.8)"),
            ),
            selectedpoints=np.flatnonzero(chosen).tolist() or None,
            selected=dict(marker=dict(color="rgba(231, 111, 81, 0.95)")),
            unselected=dict(marker=dict(opacity=0.8)),
            showlegend=False,
        )
    )
    # no dragmode: Streamlit then pans on a drag and selects on a click; its box or lasso tool selects several (in
    # those tools a click only reports itself)
    figure.update_layout(
        height=max(260, min(520, round(480 * size[1] / size[0]))),
        margin=dict(l=0, r=0, t=0, b=0),
        # hidden axes, titled all the same: readers of the page's figures find every figure's axes by their titles
        xaxis=dict(visible=False, range=[0, size[0]], constrain="domain", title=dict(text="x (pixels)")),
        yaxis=dict(visible=False, range=[size[1], 0], scaleanchor="x", title=dict(text="y (pixels)")),
    )
    return figure


def layer_head_figure(values: np.ndarray, title: str, chosen: tuple[int, int] | None = None) -> go.Figure:
    """A (layers, heads) statistic as a heatmap, layer 0 at the bottom, and over each cell an invisible marker (the
    only kind of trace a click selects in Plotly) whose ``customdata`` is (layer, head); ``chosen`` outlined."""
    values = np.asarray(values, dtype=np.float64)
    layers, heads = values.shape
    layer, head = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    figure = go.Figure(
        go.Heatmap(
            z=values.tolist(),
            x=list(range(heads)),
            y=list(range(layers)),
            colorscale="Oranges",
            colorbar=dict(title=dict(text=title, side="right"), thickness=12),
            hoverinfo="skip",
            xgap=1,
            ygap=1,
        )
    )
    figure.add_trace(
        go.Scatter(
            x=head.ravel().tolist(),
            y=layer.ravel().tolist(),
            mode="markers",
            marker=dict(symbol="square", size=14, color="rgba(0, 0, 0, 0)"),
            customdata=np.stack([layer.ravel(), head.ravel(), values.ravel()], axis=1).tolist(),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: %{customdata[2]:.3g}<extra></extra>",
            unselected=dict(marker=dict(opacity=0)),
            showlegend=False,
        )
    )
    if chosen is not None:
        figure.add_shape(
            type="rect",
            x0=chosen[1] - 0.5,
            x1=chosen[1] + 0.5,
            y0=chosen[0] - 0.5,
            y1=chosen[0] + 0.5,
            line=dict(color="rgb(30, 30, 30)", width=2),
        )
    figure.update_layout(
        xaxis=dict(title="head", tickmode="linear", dtick=max(1, round(heads / 16)), range=[-0.5, heads - 0.5]),
        yaxis=dict(title="layer", tickmode="linear", dtick=max(1, round(layers / 12)), range=[-0.5, layers - 0.5]),
        height=max(220, min(520, 40 + 16 * layers)),
        margin=dict(l=10, r=10, t=10, b=10),
        clickmode="event+select",
    )
    return figure
