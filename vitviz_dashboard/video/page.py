"""The Video page: a video model's prediction on a clip, and where it looks in space and time. The inputs
(inputs.py), the controls (controls.py), the strip of frames with their maps and the large clickable frame
(strip.py), the attention between frames (timeline.py) and the downloads (downloads.py) are drawn from the cached
results of vitviz_dashboard/cache/video.py."""

from __future__ import annotations

import numpy as np
import streamlit as st

import vitviz
from vitviz.loading.errors import ModelNotFoundError
from vitviz.render.video_overlays import DEFAULT_FPS, clip_overlays, display_shape, paint_frames
from vitviz.video import VideoError
from vitviz.video_clips import clip_preprocessing, is_video_model, top_classes
from vitviz_dashboard.cache import video as cached
from vitviz_dashboard.cache.results import get_model_with_progress
from vitviz_dashboard.page import ModelKey
from vitviz_dashboard.state import keep_widgets
from vitviz_dashboard.video.controls import Choice, clicked_token, map_controls, remember_token
from vitviz_dashboard.video.downloads import draw_downloads
from vitviz_dashboard.video.inputs import choose_video, display_controls, model_input
from vitviz_dashboard.video.strip import draw_large, draw_scale, draw_strip
from vitviz_dashboard.video.timeline import draw_timeline, token_spans


def video_page() -> None:
    st.title("vitviz: what does a video transformer look at?")
    keep_widgets()
    spec = model_input()
    colormap, alpha = display_controls()
    chosen = choose_video()
    if chosen is None or spec is None:
        return
    name, data = chosen
    model = loaded(spec)
    if model is None:
        return
    key, video = ModelKey(spec, "fp32"), cached.digest(data)
    slot = st.empty()  # the progress bar, drawn in every run so that nothing below it moves
    try:
        frames = cached.frames(key, video, _model=model, _data=data)
        rollout = cached.clip_map(key, video, "rollout", None, _model=model, _frames=frames, _slot=slot)
    except VideoError as error:
        st.error(f"Could not read {name}: {error}")
        return
    except (ValueError, RuntimeError) as error:  # a clip the model refuses, torch's own errors: one line
        st.error(f"The model failed on {name}: {str(error).splitlines()[0][:300]}")
        return
    classes = top_classes(model, rollout.probabilities) if len(rollout.probabilities) else []
    draw_prediction(classes, len(frames), clip_preprocessing(model).note)
    divided = model.config.attention == "divided"
    choice = map_controls(model.config.num_layers, model.config.num_heads, len(frames), classes, (spec, video), divided)
    layout = rollout.layout
    token = clicked_token(spec, video, layout, choice.frame)
    values, label = shown_map(key, video, model, frames, rollout, choice, token, slot)
    shape = display_shape(frames.shape[1:3])
    pictures, (low, high) = clip_overlays(frames, layout, values, shape, colormap, alpha)
    draw_strip(pictures, choice.frame)
    large, timeline = st.columns([1, 1])
    with large:
        outlined = token if choice.method == "patch" else None
        clicked = draw_large(pictures[choice.frame], layout, choice.frame, outlined, name, key=f"video_frame|{video}")
        st.caption(
            f"Frame {choice.frame}: {label}. Click a patch to see what it attends to over every frame (the map "
            "**Clicked patch**, outlined where it is)."
        )
        draw_scale(colormap, low, high, label)
        if clicked is not None and clicked != token:
            remember_token(spec, video, clicked)
            st.rerun()
    with timeline:
        between, readout = cached.time_attention(key, video, choice.layer, _model=model, _frames=frames)
        draw_timeline(between, readout, token_spans(layout), choice, colormap, layout.num_prefix_tokens > 0)

    def arrays() -> dict[str, np.ndarray]:
        return {
            "frames": frames,
            "map": np.asarray(values, np.float32),
            "map_frames": paint_frames(layout, values),
            "map_name": np.array(label),
            "token_boxes": layout.boxes[layout.patch_indices],
            "token_frames": layout.frames[layout.patch_indices],
            "probabilities": rollout.probabilities,
            "class_names": np.array(model.class_names),
            "frame_attention": between,
            "readout_per_frame": readout,
            "layer": np.array(choice.layer),
        }

    draw_downloads(name, pictures, arrays, DEFAULT_FPS)


VIDEO_SPECS = (
    "no such model. This page reads video models: a Hugging Face folder or hf: id of a VideoMAE, ViViT, "
    "TimeSformer or V-JEPA 2 model (e.g. hf:MCG-NJU/videomae-base-finetuned-kinetics), or a vitviz checkpoint of one."
)


def loaded(spec: str) -> vitviz.ViT | None:
    """The model ``spec`` names, loaded once per server; None when it cannot be loaded or reads no videos (said in
    one line)."""
    try:
        model = get_model_with_progress(spec)
    except ModelNotFoundError:  # the loader's list names image specs too, which this page refuses
        st.error(f"Could not load model `{spec}`: {VIDEO_SPECS}")
        return None
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load model `{spec}`: {error}")
        return None
    if not is_video_model(model):
        st.error(
            f"`{spec}` is an image model: it reads photos, not videos. Open it on the Photo page, or name a video "
            "model (VideoMAE, ViViT, TimeSformer, V-JEPA 2) here."
        )
        return None
    return model


def draw_prediction(classes: list[tuple[int, str, float]], frames: int, preprocessing: str = "") -> None:
    """The top five classes in one line, the first in bold (a backbone: that it has none); under it, how the frames
    were sampled and where their preprocessing comes from (the model's processor file, or its family's defaults)."""
    how = f"From {frames} frames sampled evenly over the whole clip, as the model's video processor samples"
    caption = how + (f". Scaled, cropped and normalised by {preprocessing}." if preprocessing else ".")
    if not classes:
        st.markdown("**No prediction**: this model is a backbone (no classifier); its maps read what it pools.")
        st.caption(caption)
        return
    (_, first, chance), *others = classes
    rest = " · ".join(f"{name} {p:.1%}" for _, name, p in others)
    st.markdown(f"**Prediction: {first}** ({chance:.1%})" + (f" · {rest}" if rest else ""))
    st.caption(caption)


def shown_map(key, video, model, frames, rollout, choice: Choice, token: int, slot) -> tuple[np.ndarray, str]:
    """The values (one per patch token) of the map the controls choose, and what it is, in words."""
    if choice.method == "rollout":
        return rollout.values, "attention rollout"
    if choice.method == "relevance":
        result = cached.clip_map(key, video, "relevance", choice.target, _model=model, _frames=frames, _slot=slot)
        return result.values, f"relevance of {model.class_names[result.target]}"
    layout = rollout.layout
    part = "temporal" if choice.method == "patch_time" else "spatial"
    if part == "temporal" and layout.kinds[token] != "patch":
        token = int(layout.patch_indices[0])  # [CLS] takes no part in the temporal half: the first patch instead
    per_head = cached.token_attention(key, video, choice.layer, token, part, _model=model, _frames=frames)
    values = per_head.mean(axis=0) if choice.head is None else per_head[choice.head]
    first, last = layout.frames[token]
    x0, y0 = layout.boxes[token, :2]
    size = layout.boxes[token, 2] - x0
    span = f"frame {first}" if first == last else f"frames {first}-{last}"
    where = f"patch at row {int(y0 // size)}, column {int(x0 // size)}, {span}"
    heads = "mean of heads" if choice.head is None else f"head {choice.head}"
    if model.config.attention != "divided":
        return values, f"attention of the {where}, layer {choice.layer}, {heads}"
    if part == "temporal":
        return values, f"temporal attention of the {where} (its position in every frame), layer {choice.layer}, {heads}"
    return values, (
        f"spatial attention of the {where} (its own frame: the divided block's other half, over time, is Clicked "
        f"patch over time), layer {choice.layer}, {heads}"
    )
