"""The Video page's inputs: the video model (a Hugging Face id or an allowed folder, as the Ask page takes them), the
display settings, and the video: an upload, bounded as the Photo page's are, or the sample clip made in code."""

from __future__ import annotations

import streamlit as st

from vitviz.render.overlays import COLORMAPS
from vitviz_dashboard.ask.inputs import model_spec
from vitviz_dashboard.cache.video import sample_video
from vitviz_dashboard.sidebar.model_dirs import MODEL_DIRS, ModelRefused
from vitviz_dashboard.state import kept
from vitviz_dashboard.video.sample import NAME as SAMPLE_NAME

UPLOAD_TYPES = ["mp4", "webm", "mov", "mkv", "gif"]
EXAMPLE_MODELS = (  # video classifiers on the Hugging Face Hub, each loaded by vitviz
    "MCG-NJU/videomae-base-finetuned-kinetics",
    "google/vivit-b-16x2-kinetics400",
    "facebook/timesformer-base-finetuned-k400",
    "facebook/vjepa2-vitl-fpc16-256-ssv2",
)
MODEL, COLORMAP, ALPHA = (kept(f"video|{name}") for name in ("model", "colormap", "alpha"))
MODEL_HELP = (
    "A video classifier: a Hugging Face repository id (org/name; downloaded once when online, then read from the "
    f"cache), or the full path of a folder saved with save_pretrained inside the folders the server allows "
    f"({MODEL_DIRS}). VideoMAE, ViViT, TimeSformer and V-JEPA 2, e.g. " + ", ".join(EXAMPLE_MODELS) + "."
)
NO_MODEL = (
    f"Name a video model in the sidebar: a Hugging Face repository such as `{EXAMPLE_MODELS[0]}` (downloaded "
    "once, when this machine is online), or the path of a VideoMAE, ViViT, TimeSformer or V-JEPA 2 folder saved with "
    "save_pretrained."
)


def model_input() -> str | None:
    """The sidebar's model field: the spec to load, or None (nothing typed: said how to name one; refused: why)."""
    st.sidebar.header("Video model")
    st.session_state.setdefault(MODEL, "")
    text = st.sidebar.text_input("Model", key=MODEL, help=MODEL_HELP, placeholder=EXAMPLE_MODELS[0])
    try:
        spec = model_spec(text)
    except ModelRefused as refusal:
        st.sidebar.error(str(refusal))
        return None
    if not spec:
        st.info(NO_MODEL)
        return None
    return spec


def display_controls() -> tuple[str, float]:
    """The sidebar's colormap and overlay opacity."""
    st.sidebar.header("Display")
    colormap = st.sidebar.selectbox("Colormap", COLORMAPS, key=COLORMAP)
    st.session_state.setdefault(ALPHA, 0.5)
    alpha = st.sidebar.slider("Overlay opacity", 0.0, 1.0, step=0.05, key=ALPHA)
    return colormap, alpha


def choose_video() -> tuple[str, bytes] | None:
    """The uploaded video, or the sample clip while there is none: (its name, its bytes); None for an upload that
    is refused before it is read (too large: said in one line)."""
    upload = st.file_uploader(
        "Upload a video", type=UPLOAD_TYPES, help="MP4, WebM, MOV, MKV or an animated GIF; the model's frames are "
        "sampled evenly over the whole clip"
    )  # fmt: skip
    if upload is None:
        st.caption("Showing the sample clip (moving shapes, made in code). Upload your own video above.")
        return SAMPLE_NAME, sample_video()
    data = upload.getvalue()
    problem = upload_problem(len(data))
    if problem:
        st.error(f"Could not read {upload.name}: {problem}")
        return None
    return upload.name, data


def upload_problem(size: int) -> str:
    """Why a file of ``size`` bytes is refused ("" when it is not): above the server's upload limit, which
    Streamlit's own uploader enforces too, or empty."""
    limit_mb = st.get_option("server.maxUploadSize")
    if size > limit_mb * 2**20:
        return f"the file is {size / 2**20:.0f} MB; the largest video this page takes is {limit_mb} MB"
    if size == 0:
        return "the file is empty"
    return ""
