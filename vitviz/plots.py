"""Rendering: patch maps in, PIL overlays and plotly figures out. No streamlit here.

Maps arrive as (rows, cols) arrays at patch resolution. They are upsampled bilinearly onto
the original photo at its own resolution (not onto the model's small input), inside the box
of the photo the model actually saw (``Preprocessing.crop_box``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import plotly.colors
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from PIL import Image

# Every figure names its template, so it looks the same whether or not streamlit (which swaps plotly's
# default template for one of placeholder colours) has been imported. It is the part of plotly's
# "plotly_white" these figures use: building a figure with the whole of it costs about 8 ms
# (copying every trace type's defaults), with this part about 1 ms.
_GRID = dict(automargin=True, gridcolor="#EBF0F8", linecolor="#EBF0F8", ticks="", zerolinecolor="#EBF0F8",
             zerolinewidth=2, title=dict(standoff=15))  # fmt: skip
TEMPLATE = go.layout.Template(
    layout=dict(paper_bgcolor="white", plot_bgcolor="white", font=dict(color="#2a3f5f"), hovermode="closest",
                hoverlabel=dict(align="left"), title=dict(x=0.05), xaxis=_GRID, yaxis=_GRID,
                colorway=["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880"]),
    data=dict(heatmap=[dict(colorbar=dict(outlinewidth=0, ticks=""))]),
)  # fmt: skip
COLORMAPS = ("inferno", "viridis", "magma", "plasma", "turbo", "jet", "hot", "greys")


def _as_array(values) -> np.ndarray:
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


def rescale(patch_map) -> np.ndarray:
    """Min-max scale to [0, 1] for display (a constant map becomes all zeros)."""
    values = _as_array(patch_map)
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


def upsample(patch_map, height: int, width: int) -> np.ndarray:
    """(rows, cols) -> (height, width) by bilinear interpolation (align_corners=False)."""
    values = torch.as_tensor(_as_array(patch_map))[None, None]
    return F.interpolate(values, size=(height, width), mode="bilinear", align_corners=False)[0, 0].numpy()


def colorize(values: np.ndarray, colormap: str = "inferno") -> np.ndarray:
    """[0, 1] values (H, W) -> (H, W, 3) uint8 colours."""
    indices = np.clip(np.rint(values * 255), 0, 255).astype(np.uint8)
    return colormap_table(colormap)[indices]


def overlay(
    image: Image.Image,
    patch_map,
    colormap: str = "inferno",
    alpha: float = 0.5,
    box: tuple[float, float, float, float] | None = None,
) -> Image.Image:
    """Blend a coloured patch map onto the photo at the photo's own resolution.

    ``box`` (left, top, right, bottom) is where the model's input came from; outside it the photo
    is shown dimmed, since the model never saw those pixels. Default: the whole photo.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    photo = np.asarray(image.convert("RGB"), dtype=np.float32)
    height, width = photo.shape[:2]
    left, top, right, bottom = box or (0, 0, width, height)
    x0, y0 = max(0, int(round(left))), max(0, int(round(top)))
    x1, y1 = min(width, int(round(right))), min(height, int(round(bottom)))
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"box {box} does not overlap the {width}x{height} image")
    out = photo * 0.35  # dim everything, then blend inside the box
    colours = colorize(upsample(rescale(patch_map), y1 - y0, x1 - x0), colormap).astype(np.float32)
    out[y0:y1, x0:x1] = (1 - alpha) * photo[y0:y1, x0:x1] + alpha * colours
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8))


def top_mass_mask(patch_map, mass: float = 0.6) -> np.ndarray:
    """DINO-style mask: the fewest patches holding at least ``mass`` of the (non-negative) total."""
    if not 0.0 < mass <= 1.0:
        raise ValueError(f"mass must be in (0, 1]; got {mass}")
    values = np.clip(_as_array(patch_map), 0, None)
    flat = values.flatten()
    order = np.argsort(-flat, kind="stable")
    cumulative = np.cumsum(flat[order]) / max(flat.sum(), np.finfo(np.float32).tiny)
    keep = np.zeros(flat.size, dtype=bool)
    keep[order[: int(np.searchsorted(cumulative, mass - 1e-9)) + 1]] = True
    return keep.reshape(values.shape)


def masked_image(
    image: Image.Image, mask: np.ndarray, box: tuple[float, float, float, float] | None = None
) -> Image.Image:
    """The photo with patches outside ``mask`` (rows, cols) darkened."""
    photo = np.asarray(image.convert("RGB"), dtype=np.float32)
    height, width = photo.shape[:2]
    left, top, right, bottom = box or (0, 0, width, height)
    keep = np.zeros((height, width), dtype=bool)
    x0, y0, x1, y1 = (int(round(v)) for v in (left, top, right, bottom))
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(width, x1), min(height, y1)
    resized = Image.fromarray(mask.astype(np.uint8) * 255).resize((x1 - x0, y1 - y0), Image.NEAREST)
    keep[y0:y1, x0:x1] = np.asarray(resized) > 0
    return Image.fromarray(np.where(keep[..., None], photo, photo * 0.2).astype(np.uint8))


# --- plotly figures ----------------------------------------------------------------------------


def heatmap_figure(patch_map, title: str = "", colormap: str = "inferno") -> go.Figure:
    """The raw patch grid with its exact values on hover (row 0 at the top, square cells)."""
    values = _as_array(patch_map)
    figure = go.Figure(layout_template=TEMPLATE, data=
        go.Heatmap(z=values, colorscale=plotly_colorscale(colormap), hovertemplate="row %{y}, col %{x}<br>%{z:.5f}<extra></extra>")
    )
    figure.update_layout(title=title, margin=dict(l=0, r=0, t=40 if title else 0, b=0))
    figure.update_yaxes(autorange="reversed", scaleanchor="x", showticklabels=False, showgrid=False, zeroline=False)
    figure.update_xaxes(showticklabels=False, constrain="domain", showgrid=False, zeroline=False)
    return figure


def grid_figure(maps, titles: list[str], columns: int, colormap: str = "inferno", rescale_each: bool = True) -> go.Figure:
    """Small multiples: the maps (n, rows, cols) tiled ``columns`` to a row in one heatmap.

    One trace with gaps (not one subplot per map) keeps big grids, such as 12 x 12 heads,
    fast to build and to draw. With ``rescale_each`` every map uses its own colour range
    (patterns comparable); otherwise all share one range (magnitudes comparable). Hover shows
    each cell's map, row, column and raw value.
    """
    values = _as_array(maps)
    count, rows, cols = values.shape
    if len(titles) != count:
        raise ValueError(f"{len(titles)} titles for {count} maps")
    columns = max(1, min(columns, count))
    tile_rows = -(-count // columns)
    height, width = tile_rows * (rows + 1) - 1, columns * (cols + 1) - 1
    shown = np.full((height, width), np.nan, dtype=np.float32)  # gaps stay NaN, drawn as background
    raw = np.full((height, width), np.nan, dtype=np.float32)
    labels = np.full((height, width), "", dtype=object)
    annotations = []
    for index in range(count):
        top, left = (index // columns) * (rows + 1), (index % columns) * (cols + 1)
        shown[top : top + rows, left : left + cols] = rescale(values[index]) if rescale_each else values[index]
        raw[top : top + rows, left : left + cols] = values[index]
        labels[top : top + rows, left : left + cols] = [
            [f"{titles[index]}, row {r}, col {c}" for c in range(cols)] for r in range(rows)
        ]
        annotations.append(dict(x=left + (cols - 1) / 2, y=top - 0.5, text=titles[index], showarrow=False,
                                yanchor="bottom", font=dict(size=11)))  # fmt: skip
    figure = go.Figure(layout_template=TEMPLATE, data=
        go.Heatmap(z=shown, customdata=raw, text=labels, colorscale=plotly_colorscale(colormap), showscale=False,
                   hovertemplate="%{text}: %{customdata:.5f}<extra></extra>", hoverongaps=False)  # fmt: skip
    )
    figure.update_layout(annotations=annotations, margin=dict(l=0, r=0, t=22, b=0),
                         height=max(160, int(tile_rows * 130 * max(1.0, 6 / columns) * rows / max(rows, cols)) + 30),
                         plot_bgcolor="rgba(0,0,0,0)")  # fmt: skip
    figure.update_yaxes(autorange="reversed", scaleanchor="x", visible=False)
    figure.update_xaxes(visible=False, constrain="domain")
    return figure


def predictions_figure(probabilities, class_names: list[str], top_k: int = 5) -> go.Figure:
    """Horizontal bars of the top-k classes, highest on top."""
    values = _as_array(probabilities)
    order = np.argsort(values)[::-1][:top_k][::-1]
    figure = go.Figure(layout_template=TEMPLATE, data=go.Bar(x=values[order], y=[class_names[i] for i in order], orientation="h",
                              text=[f"{values[i]:.1%}" for i in order], textposition="auto"))  # fmt: skip
    figure.update_yaxes(automargin=True)
    figure.update_layout(height=60 + 32 * len(order), margin=dict(l=0, r=0, t=10, b=0), xaxis_range=[0, 1],
                         xaxis_tickformat=".0%")  # fmt: skip
    return figure


def attention_distance_figure(mean_distance) -> go.Figure:
    """Mean attention distance against depth, one dot per head (ViT paper, Fig. 7 right)."""
    values = _as_array(mean_distance)  # (layers, heads)
    layers, heads = values.shape
    figure = go.Figure(layout_template=TEMPLATE)
    for head in range(heads):
        figure.add_trace(go.Scatter(x=np.arange(layers), y=values[:, head], mode="markers", name=f"head {head}",
                                    hovertemplate="layer %{x}: %{y:.1f} px<extra>head " + str(head) + "</extra>"))  # fmt: skip
    figure.update_layout(xaxis_title="layer (depth)", yaxis_title="mean attention distance (pixels)",
                         margin=dict(l=0, r=0, t=10, b=0), showlegend=heads <= 16)  # fmt: skip
    return figure


def layer_head_figure(values, title: str, colorbar: str) -> go.Figure:
    """A (layers, heads) table as a heatmap, e.g. attention entropy."""
    table = _as_array(values)
    figure = go.Figure(layout_template=TEMPLATE, data=go.Heatmap(z=table, colorscale=plotly_colorscale("viridis"), colorbar_title=colorbar,
                                  hovertemplate="layer %{y}, head %{x}: %{z:.3f}<extra></extra>"))  # fmt: skip
    figure.update_layout(title=title, xaxis_title="head", yaxis_title="layer", margin=dict(l=0, r=0, t=40, b=0))
    figure.update_yaxes(autorange="reversed")
    return figure


def perturbation_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> go.Figure:
    """Probability against fraction of patches replaced; ``curves`` maps a label to (x, y)."""
    figure = go.Figure(layout_template=TEMPLATE)
    for label, (x, y) in curves.items():
        figure.add_trace(go.Scatter(x=_as_array(x), y=_as_array(y), mode="lines+markers", name=label))
    figure.update_layout(xaxis_title="fraction of patches replaced", yaxis_title="target probability",
                         xaxis_tickformat=".0%", yaxis_range=[0, 1], margin=dict(l=0, r=0, t=10, b=0))  # fmt: skip
    return figure
