"""The sidebar's model picker: which model (the shipped default, popular pretrained ViTs, torchvision's, any timm or
Hugging Face spec, a checkpoint by path or upload), what it is, and how maps are drawn. Typed specs and
paths go through sidebar/model_dirs.py: paths only inside the folders the server's owner allows, specs that name
no local path. Precision "auto" is settled once the model is loaded (``resolve``), by timing it."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import streamlit as st

import vitviz
from vitviz.loading.popular import EXAMPLE_SPEC, POPULAR_MODELS, TORCHVISION_SPECS
from vitviz.loading.specs import typed_usage
from vitviz.model import Swin
from vitviz.model.precision import BF16_MARGIN, PRECISION_CHOICES
from vitviz.render import overlays
from vitviz_dashboard.cache.models import measured_precision
from vitviz_dashboard.names import describe_pooling, describe_prefix_tokens, has_classifier
from vitviz_dashboard.page import ModelKey, Settings
from vitviz_dashboard.sidebar.model_dirs import (
    PATHS_OFF_MESSAGE,
    ModelRefused,
    allowed_model_dirs,
    check_hub_spec,
    check_model_path,
)
from vitviz_dashboard.state import (
    HANDED,
    HUB_SPEC,
    MODEL_BOX,
    MODEL_HUB_SPEC,
    MODEL_PATH,
    PATH_OR_UPLOAD,
    PHOTO_ALPHA,
    PHOTO_COLORMAP,
    PHOTO_PRECISION,
)

CURATED_MODELS = POPULAR_MODELS  # label -> spec
# the picker's options: specs, except the two that open a field
MODEL_CHOICES = [
    "default",
    *CURATED_MODELS.values(),
    *TORCHVISION_SPECS,
    HUB_SPEC,
    PATH_OR_UPLOAD,
]
LABELS = {spec: label for label, spec in CURATED_MODELS.items()}
MISSING_SPEC = {
    HUB_SPEC: f"Enter a timm model, a Hugging Face repository or an open_clip model in the sidebar: {typed_usage()}, "
    f"e.g. `{EXAMPLE_SPEC}` (a bare `<org>/<name>` is a Hugging Face repository).",
    PATH_OR_UPLOAD: "Upload a vitviz checkpoint in the sidebar, or enter the path of one (or of a Hugging Face ViT "
    "folder) inside the folders this server allows.",
}
PATH_HELP = (
    "Only inside the folders that the server's owner allows (VITVIZ_MODEL_DIRS; by default the checkpoints "
    "folder and the working directory)."
)
MAX_CHECKPOINT_MB = 50  # .streamlit/config.toml's maxUploadSize; larger checkpoints: their path in an allowed folder
MAX_STORED_CHECKPOINTS = 3  # uploaded checkpoints kept on disk, the oldest removed first
PRECISION_HELP = (
    "bf16 autocast runs the matrix products in bfloat16; maps differ by < 1e-3. Whether it is faster "
    "depends on the CPU: about 2x faster on some with bf16 units, 1.7x slower on others. auto times this "
    f"model in both once (a few seconds for a large model) and takes bf16 only if it needs under "
    f"{BF16_MARGIN:.0%} of the fp32 time."
)


def sidebar() -> Settings:
    st.sidebar.header("Model")
    choice = st.sidebar.selectbox(
        "Model",
        MODEL_CHOICES,
        label_visibility="collapsed",
        format_func=lambda option: LABELS.get(option, option),
        accept_new_options=True,
        key=str(MODEL_BOX),  # a spec typed straight into the box loads like one in the field
        help="Pick a model, or type a timm, Hugging Face or open_clip spec here. The pretrained models download "
        "once when online, into the Hugging Face or torch cache, and load offline afterwards.",
    )
    spec = choice
    if choice not in MODEL_CHOICES:  # typed into the box: a spec, never a path
        if looks_like_path(choice):
            st.sidebar.info(PATH_IN_MODEL_BOX)
            spec = ""
        else:
            spec = unless_refused(lambda: check_hub_spec(choice))
    elif choice == HUB_SPEC:
        text = st.sidebar.text_input(
            "Model spec",
            "",
            key=str(MODEL_HUB_SPEC),  # kept through a visit to another page
            placeholder=EXAMPLE_SPEC,
            help=f"{typed_usage()}; a bare <org>/<name> is a Hugging Face repository, a bare name a timm model.",
        )
        spec = unless_refused(lambda: check_hub_spec(text))
    elif choice == PATH_OR_UPLOAD:
        roots = allowed_model_dirs()  # read in every run, as VITVIZ_SAMPLES is
        text = st.sidebar.text_input(
            "vitviz checkpoint file or Hugging Face folder",
            "",
            key=str(MODEL_PATH),  # the Dataset page opens an image here with its index's model
            disabled=not roots,
            help=PATH_HELP,
            placeholder=None if roots else "opening paths is off",
        )
        if not roots:
            st.sidebar.caption(PATHS_OFF_MESSAGE)
        uploaded = st.sidebar.file_uploader(
            f"...or upload a vitviz checkpoint (.pt, up to {MAX_CHECKPOINT_MB} MB)", type=["pt", "pth"]
        )
        spec = ""
        handed = HANDED.get()
        if uploaded is not None:  # uploads are not typed paths: no folder limits them
            spec = save_uploaded_checkpoint(uploaded)
        elif text.strip():
            spec = unless_refused(lambda: str(check_model_path(text, roots)))  # the real path: what was checked
        elif handed is not None and Path(handed.path).is_file():  # written by the page itself, as uploads are
            spec = handed.path
            st.sidebar.caption(handed.caption)
    if choice != PATH_OR_UPLOAD or (spec and spec != getattr(HANDED.get(), "path", None)):
        HANDED.pop()  # another model chosen: the hand-over is over
    st.sidebar.header("Display")
    # "auto" stays in the settings until the model is loaded: resolve() then puts the measured precision there
    # keyed by state.py's keys, so that they are kept through a visit to another page
    precision = st.sidebar.radio(
        "Precision", PRECISION_CHOICES, horizontal=True, help=PRECISION_HELP, key=str(PHOTO_PRECISION)
    )
    colormap = st.sidebar.selectbox("Colormap", overlays.COLORMAPS, key=str(PHOTO_COLORMAP))
    PHOTO_ALPHA.setdefault(0.55)  # the default in the state, not the widget (Streamlit warns of both)
    alpha = st.sidebar.slider("Overlay opacity", 0.0, 1.0, step=0.05, key=str(PHOTO_ALPHA))
    return Settings(spec, precision, colormap, alpha, choice)


def resolve(settings: Settings, model: vitviz.ViT) -> Settings:
    """The settings with precision "auto" replaced by what timing ``model`` chose ("fp32" or "bf16"), told in
    a sidebar caption; other settings as they are. The model's key (page.ModelKey) takes the resolved precision, so
    call this right after the model is loaded, before anything runs it."""
    if settings.precision != "auto":
        return settings
    if isinstance(model, Swin):  # the timing runs a ViT's blocks one by one: a Swin runs in fp32, exact
        st.sidebar.caption("Precision: fp32 (auto is timed for ViTs only; choose bf16 to try it on this Swin).")
        return dataclasses.replace(settings, precision="fp32")
    choice = measured_precision(ModelKey(settings.model_spec, "auto"), _model=model)
    st.sidebar.caption(choice.summary(), help=choice.reason)
    return dataclasses.replace(settings, precision=choice.precision)


PATH_IN_MODEL_BOX = (
    'Paths go in the field below this box: choose "path or upload..." in it, then enter the path of a '
    f"vitviz checkpoint or Hugging Face folder (or upload a checkpoint). This box takes specs: {typed_usage()}."
)


def looks_like_path(text: str) -> bool:
    """A local path rather than a spec: it starts like one (/, ~, ., a Windows drive), ends in a checkpoint's suffix,
    or names something that exists here."""
    text = text.strip()
    if re.match(r"^(?:[/~.\\]|[A-Za-z]:[\\/])", text) or text.endswith((".pt", ".pth", ".safetensors", ".bin")):
        return True
    try:
        return Path(text).expanduser().exists()
    except OSError:
        return False


def unless_refused(check: Callable[[], str]) -> str:
    """What ``check()`` returns, the spec to load; or "" when it refuses the model, with the refusal shown."""
    try:
        return check()
    except ModelRefused as refusal:
        st.sidebar.error(str(refusal))
        return ""


def save_uploaded_checkpoint(uploaded) -> str:
    """Store an uploaded checkpoint under its content hash; it is opened with weights_only=True."""
    data = uploaded.getvalue()
    if len(data) > MAX_CHECKPOINT_MB * 2**20:
        st.sidebar.error(f"{uploaded.name} is {len(data) / 2**20:.0f} MB; the limit is {MAX_CHECKPOINT_MB} MB")
        return ""
    return store_checkpoint(data)


def store_checkpoint(data: bytes) -> str:
    """Keep a checkpoint's bytes that the page itself was given or wrote (an upload, a VLM's vision tower) in
    ``<tmp>/vitviz-uploads/`` under their content hash, and return its path. The disk stays bounded: only the
    MAX_STORED_CHECKPOINTS most recently used stay (as many as models are cached)."""
    folder = Path(tempfile.gettempdir()) / "vitviz-uploads"
    folder.mkdir(exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.pt"
    if not path.exists():
        path.write_bytes(data)
    path.touch()  # newest last
    for old in sorted(folder.glob("*.pt"), key=lambda f: f.stat().st_mtime)[:-MAX_STORED_CHECKPOINTS]:
        old.unlink(missing_ok=True)
    return str(path)


def describe_model(model: vitviz.ViT, spec: str) -> None:
    c = model.config
    if isinstance(model, Swin):
        describe_swin(model, spec)
        return
    classes = f"{len(model.class_names)} classes" if has_classifier(model) else "no classifier (a backbone)"
    if model.text_tower is not None:
        kind = {"clip": "CLIP", "siglip": "SigLIP"}[model.text_tower.kind]
        classes = f"a {kind} text tower: prompts are its classes (below)"
    st.sidebar.caption(
        f"**{spec}**: {c.num_layers} layers x {c.num_heads} heads, patch {c.patch_size}, {describe_input(model)}, "
        f"{classes}. Tokens: {describe_prefix_tokens(c)}, then the patches; pooling: {describe_pooling(c)}."
    )
    if has_classifier(model):
        with st.sidebar.expander("Classes"):
            st.write(", ".join(model.class_names) if model.class_names else "unnamed")


def describe_swin(model: Swin, spec: str) -> None:
    """A Swin's caption: its stages (blocks, heads, window), input, classes and pooling."""
    c = model.config
    stages = "; ".join(
        f"{depth} blocks x {heads} heads, window {w[0]}x{w[1]}"
        for depth, heads, w in zip(c.depths, c.num_heads, c.windows)
    )
    height, width = model.transform.output_size or c.image_hw
    classes = f"{len(model.class_names)} classes" if has_classifier(model) else "no classifier (a backbone)"
    st.sidebar.caption(
        f"**{spec}**: Swin{' v2' if c.version == 2 else ''}, {len(c.depths)} stages ({stages}), patch "
        f"{c.patch_size}, input {height}x{width}, {classes}. Attention inside windows, shifted every other block; "
        f"each stage after the first merges 2x2 tokens; no [CLS]: the head reads the mean of the last stage's tokens."
    )
    if has_classifier(model):
        with st.sidebar.expander("Classes"):
            st.write(", ".join(model.class_names) if model.class_names else "unnamed")


def describe_input(model: vitviz.ViT) -> str:
    """The input the model is fed, as its preprocessing makes it (the size the prediction line reports for each photo),
    and the size it was built for where they differ: a Hugging Face folder without preprocessor_config.json gets
    ViTImageProcessor's 224x224 whatever its config says, and the model resizes its positions to the new grid."""
    c, transform = model.config, model.transform
    built = f"{c.image_hw[0]}x{c.image_hw[1]}"
    if transform.output_size is None:  # the shape follows the photo's
        fed = "each photo at its own size"
        if isinstance(transform.resize, int):
            fed = f"shorter side {transform.resize} px"
        return f"input: {fed}, the patch grid following the photo's shape (built for {built})"
    height, width = transform.output_size
    grid = f"{height // c.patch_size}x{width // c.patch_size} patches"
    if (height, width) == tuple(c.image_hw):
        return f"input {built} ({grid})"
    return f"input {height}x{width} ({grid}; built for {built}, its positions resized to this grid)"
