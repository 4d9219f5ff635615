"""Attention over time on the Video page: in the chosen block and head, the frames x frames heatmap (what each token
frame's tokens give to each other token frame) and the readout's attention per token frame."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz.layout import TokenLayout
from vitviz.render.video_figures import frame_labels, frames_heatmap_figure, readout_frames_figure
from vitviz_dashboard.video.controls import Choice


def token_spans(layout: TokenLayout) -> np.ndarray:
    """int (F', 2): the (first, last) input frames of each token frame, in time order."""
    return np.unique(layout.frames[layout.patch_indices], axis=0)


def draw_timeline(
    between: np.ndarray, readout: np.ndarray, spans: np.ndarray, choice: Choice, colormap: str, prefix: bool = True
) -> None:
    """``between`` (heads, F', F') and ``readout`` (heads, F') of one block, for the chosen head or their mean;
    ``prefix``: whether the model has a [CLS] token (VideoMAE and V-JEPA 2 have none)."""
    pick = (lambda a: a.mean(axis=0)) if choice.head is None else (lambda a: a[choice.head])
    heads = "mean of heads" if choice.head is None else f"head {choice.head}"
    labels = frame_labels(spans)
    st.markdown(f"**Attention between frames** (layer {choice.layer}, {heads})")
    st.plotly_chart(frames_heatmap_figure(pick(between), labels, colormap=colormap), key="video|frames_heatmap")
    st.markdown(f"**What the head reads, per frame** (layer {choice.layer}, {heads})")
    st.plotly_chart(readout_frames_figure(pick(readout), labels), key="video|readout_frames")
    left_out = " (what goes to [CLS] is left out)" if prefix else ""
    st.caption(
        "Each row: how the tokens of one frame (a tubelet's frames) split their attention among the frames, on "
        f"average{left_out}. The bars: the readout's attention in this block, per frame."
    )
