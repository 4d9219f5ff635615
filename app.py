"""vitviz dashboard: `streamlit run app.py`.

The page only: widgets, layout and cached calls. All computation lives in vitviz/.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

import vitviz
from vitviz.convert import TORCHVISION_ARCHS
from vitviz.images import ImageError, load_image

MODEL_CHOICES = ["default", *(f"torchvision:{arch}" for arch in TORCHVISION_ARCHS), "path..."]
UPLOAD_TYPES = ["jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"]


@dataclass(frozen=True)
class Analysis:
    probabilities: np.ndarray  # (num_classes,)
    cls_attention: np.ndarray  # (layers, heads, rows, cols): what [CLS] attends to, per patch
    grid_size: tuple[int, int]


@st.cache_resource(max_entries=3, show_spinner="Loading model...")
def get_model(spec: str) -> vitviz.ViT:
    return vitviz.load_model(spec)


@st.cache_data(max_entries=64, show_spinner=False)
def decode(image_bytes: bytes):
    return load_image(image_bytes)


@st.cache_data(max_entries=64, show_spinner="Running the ViT...")
def analyse(_model: vitviz.ViT, model_spec: str, image_bytes: bytes, precision: str) -> Analysis:
    """One forward pass per (model, image, precision); moving a control never re-runs it."""
    pixels = _model.transform(decode(image_bytes))[None]  # (1, 3, H, W)
    with torch.inference_mode(), vitviz.autocast(precision):
        output = _model(pixels, output_attentions=True)
    rows, cols = output.grid_size
    prefix = output.num_prefix_tokens
    # row 0 is [CLS]'s query; columns after the prefix are the patches, in row-major order
    cls_rows = torch.stack([a[0, :, 0, prefix:] for a in output.attentions])  # (L, heads, N)
    return Analysis(
        probabilities=output.logits[0].float().softmax(-1).numpy(),
        cls_attention=cls_rows.reshape(len(output.attentions), -1, rows, cols).numpy(),
        grid_size=(rows, cols),
    )


def choose_model() -> str:
    choice = st.sidebar.selectbox("Model", MODEL_CHOICES, help="torchvision weights download once when online")
    if choice == "path...":
        return st.sidebar.text_input("vitviz checkpoint file or Hugging Face folder", "")
    return choice


def describe_model(model: vitviz.ViT, spec: str) -> None:
    c = model.config
    rows, cols = c.grid_size
    st.sidebar.caption(
        f"**{spec}**: {c.num_layers} layers x {c.num_heads} heads, patch {c.patch_size}, "
        f"trained at {c.image_hw[0]}x{c.image_hw[1]} ({rows}x{cols} patches), {len(model.class_names)} classes"
    )


def show_predictions(analysis: Analysis, class_names: list[str], top_k: int) -> None:
    order = np.argsort(analysis.probabilities)[::-1][:top_k]
    figure = go.Figure(
        go.Bar(
            x=analysis.probabilities[order][::-1],
            y=[class_names[i] for i in order][::-1],
            orientation="h",
            text=[f"{p:.1%}" for p in analysis.probabilities[order][::-1]],
        )
    )
    figure.update_layout(height=60 + 28 * len(order), margin=dict(l=0, r=0, t=10, b=0), xaxis_range=[0, 1])
    st.plotly_chart(figure)


def show_cls_attention(analysis: Analysis, layer: int, head: int | None) -> None:
    maps = analysis.cls_attention[layer]  # (heads, rows, cols)
    patch_map = maps.mean(0) if head is None else maps[head]
    label = "mean over heads" if head is None else f"head {head}"
    figure = go.Figure(go.Heatmap(z=patch_map, colorscale="Viridis", hovertemplate="row %{y}, col %{x}: %{z:.4f}"))
    figure.update_layout(
        title=f"[CLS] attention, layer {layer}, {label}", yaxis_autorange="reversed", yaxis_scaleanchor="x",
        margin=dict(l=0, r=0, t=40, b=0),
    )  # fmt: skip
    st.plotly_chart(figure)


def main() -> None:
    st.set_page_config(page_title="vitviz", layout="wide")
    st.title("vitviz: what does the Vision Transformer look at?")
    spec = choose_model()
    if not spec:
        st.info("Enter the path of a vitviz checkpoint or a Hugging Face ViT folder in the sidebar.")
        return
    try:
        model = get_model(spec)
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load model `{spec}`: {error}")
        return
    describe_model(model, spec)
    precision = st.sidebar.radio("Precision", ["fp32", "bf16"], horizontal=True, help="bf16 is faster on most CPUs")
    layer = st.sidebar.slider("Layer", 0, model.config.num_layers - 1, model.config.num_layers - 1)
    head_choice = st.sidebar.selectbox("Head", ["mean", *range(model.config.num_heads)])
    top_k = st.sidebar.slider("Top-k predictions", 1, min(10, len(model.class_names)), min(5, len(model.class_names)))

    upload = st.file_uploader("Upload a photo", type=UPLOAD_TYPES)
    if upload is None:
        st.info("Upload a photo to see the model's predictions and where its [CLS] token attends, layer by layer.")
        return
    try:
        analysis = analyse(model, spec, upload.getvalue(), precision)
    except ImageError as error:
        st.error(f"Could not read {upload.name}: {error}")
        return
    left, middle, right = st.columns(3)
    with left:
        st.image(decode(upload.getvalue()), caption=upload.name, width="stretch")
    with middle:
        show_predictions(analysis, model.class_names, top_k)
    with right:
        show_cls_attention(analysis, layer, None if head_choice == "mean" else int(head_choice))


main()
