"""vitviz dashboard: `streamlit run app.py`.

The page only: widgets, layout and cached calls. All computation lives in vitviz/.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import os
import random
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from PIL import Image
from streamlit.errors import StreamlitAPIException
import torch

import vitviz
from vitviz import explain, plots
from vitviz.analysis import ImageAnalysis, analyse_image, class_maps, head_statistics
from vitviz.convert import TORCHVISION_ARCHS
from vitviz.images import ImageError, ImageFile, load_image

MODEL_CHOICES = ["default", *(f"torchvision:{arch}" for arch in TORCHVISION_ARCHS), "path or upload..."]
UPLOAD_TYPES = ["jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"]
MAX_CHECKPOINT_MB = 50  # .streamlit/config.toml's maxUploadSize; larger checkpoints: give their path
MAX_STORED_CHECKPOINTS = 3  # uploaded checkpoints kept on disk, the oldest removed first
MAX_DISPLAY_SIDE = 1024
PICKER_SIDE = 512  # the click-a-patch picture's long side, in pixels
MAX_SESSION_IMAGES = 20  # images a session keeps for revisiting and comparing
TABS = ["Overview", "Heads & layers", "Click a patch", "Class-specific", "Model anatomy", "Faithfulness"]
KEPT = "kept|"  # prefix of the keys of tab widgets, whose values outlive runs that do not draw them
HERE = Path(__file__).resolve().parent
# Where a local copy of the CIFAR-10 test set may be, for sample images before any upload;
# VITVIZ_SAMPLES (zip paths separated by os.pathsep, or empty for none) overrides the list.
SAMPLE_ZIPS = [HERE / "data" / "cifar10_test.zip", HERE.parent / "shared" / "data" / "cifar10" / "cifar10_test.zip"]
if "VITVIZ_SAMPLES" in os.environ:
    SAMPLE_ZIPS = [Path(p) for p in os.environ["VITVIZ_SAMPLES"].split(os.pathsep) if p]


@dataclass(frozen=True)
class Settings:
    model_spec: str
    precision: str
    colormap: str
    alpha: float


# Cached functions take an ImageFile and are keyed by its digest: Streamlit would otherwise hash
# the whole file again on every call of every cached function in every rerun.
BY_DIGEST = {ImageFile: lambda file: file.key}


@dataclass(frozen=True)
class Photo:
    name: str
    key: str  # the file's digest: the cache key for everything drawn on it
    image: Image.Image  # at most MAX_DISPLAY_SIDE on its long side: what the page draws on
    full: Image.Image  # as decoded: what the PNG downloads draw on

    @property
    def scale(self) -> float:
        """Shown pixels per full-size pixel (1 for photos no larger than MAX_DISPLAY_SIDE)."""
        return self.image.width / self.full.width


# --- cached computations -----------------------------------------------------------------------


@st.cache_resource(max_entries=3, show_spinner="Loading the model...")
def get_model(spec: str) -> vitviz.ViT:
    return vitviz.load_model(spec)


@st.cache_resource(max_entries=64, show_spinner=False, hash_funcs=BY_DIGEST)
def decode(file: ImageFile) -> Image.Image:
    """The decoded photo, shared (not copied) between reruns and sessions: never modify it in place."""
    return load_image(file.data)


@st.cache_resource(max_entries=64, show_spinner=False, hash_funcs=BY_DIGEST)
def display_photo(file: ImageFile) -> Image.Image:
    """The photo at most MAX_DISPLAY_SIDE pixels on its long side: what overlays are drawn on for the
    page (downloads use the full resolution). Shared like decode's result: never modify it."""
    photo = decode(file).copy()
    photo.thumbnail((MAX_DISPLAY_SIDE, MAX_DISPLAY_SIDE))
    return photo


@st.cache_data(max_entries=256, show_spinner=False)
def _overlay_jpeg(key: str, patch_map: np.ndarray, box: tuple, colormap: str, alpha: float, _image) -> bytes:
    buffer = io.BytesIO()
    plots.overlay(_image, patch_map, colormap, alpha, box).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def overlay_picture(photo: Photo, patch_map, box, settings: Settings) -> bytes:
    """The overlay as JPEG bytes, cached: redrawing after an unrelated control change costs nothing."""
    values = np.asarray(patch_map.numpy() if isinstance(patch_map, torch.Tensor) else patch_map, dtype=np.float32)
    return _overlay_jpeg(photo.key, values, tuple(box), settings.colormap, settings.alpha, _image=photo.image)


@st.cache_data(max_entries=64, show_spinner=False)
def _photo_data_uri(key: str, _image) -> tuple[str, float]:
    """The photo as a JPEG data URI at most PICKER_SIDE pixels on its long side, and its scale
    (shown pixels per data-URI pixel). The picker sits in half a page: a bigger picture only makes
    every rerun validate and send more bytes."""
    small = _image.copy()
    small.thumbnail((PICKER_SIDE, PICKER_SIDE))
    buffer = io.BytesIO()
    small.save(buffer, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode(), _image.width / small.width


@st.cache_resource(max_entries=8, show_spinner="Running the ViT...", hash_funcs=BY_DIGEST)  # attentions are big
def analyse(_model: vitviz.ViT, model_spec: str, file: ImageFile, precision: str) -> ImageAnalysis:
    """One forward pass per (model, image, precision): controls never re-run the model."""
    return analyse_image(_model, decode(file), precision)


@st.cache_resource(max_entries=64, show_spinner="Computing class-specific maps (forward + backward)...",
                   hash_funcs=BY_DIGEST)  # fmt: skip
def relevance_maps(_model, model_spec: str, file: ImageFile, precision: str, target: int) -> dict:
    return class_maps(_model, analyse(_model, model_spec, file, precision), target, precision)


@st.cache_resource(max_entries=32, show_spinner="Replacing patches and re-running the model...", hash_funcs=BY_DIGEST)
def faithfulness_curves(_model, model_spec: str, file: ImageFile, precision: str, target: int, baseline: str):
    analysis = analyse(_model, model_spec, file, precision)
    maps = {"rollout": explain.attention_rollout(analysis.attentions, **analysis.maps_args,
                                                 pooling=_model.config.pooling)[0]}  # fmt: skip
    if _model.config.class_token:
        maps["[CLS] attention (last layer)"] = explain.cls_attention(analysis.attentions, -1, **analysis.maps_args)[0]
    maps["relevance (Chefer et al.)"] = torch.from_numpy(relevance_maps(_model, model_spec, file, precision, target)["relevance"])
    with vitviz.autocast(precision):
        return {name: explain.faithfulness(_model, analysis.pixel_values, m, target, baseline) for name, m in maps.items()}


@st.cache_resource(max_entries=64, show_spinner=False)
def rollout_map(model_spec: str, image_key: str, precision: str, fusion: str, discard: float, start: int, *,
                _analysis: ImageAnalysis, _pooling: str) -> np.ndarray:
    """The rollout for one choice of settings, computed once: the analysis is fixed by (model, image,
    precision), so those name it in the key instead of the attentions themselves."""
    return explain.attention_rollout(_analysis.attentions, fusion, discard, start, **_analysis.maps_args,
                                     pooling=_pooling)[0].numpy()  # fmt: skip


@st.cache_resource(max_entries=64, show_spinner=False)
def patch_maps(model_spec: str, image_key: str, precision: str, layer: int, row: int, col: int, *,
               _analysis: ImageAnalysis) -> tuple[np.ndarray, np.ndarray]:
    """What patch (row, col) attends to in one layer: fused over heads (rows, cols) and per head (H, rows, cols)."""
    args = dict(layer=layer, query=(row, col), **_analysis.maps_args)
    fused = explain.query_attention(_analysis.attentions, head="mean", **args)[0]
    heads = _analysis.attentions[layer].shape[1]
    per_head = torch.stack([explain.query_attention(_analysis.attentions, head=h, **args)[0] for h in range(heads)])
    return fused.numpy(), per_head.numpy()


@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=BY_DIGEST)
def statistics(_model, model_spec: str, file: ImageFile, precision: str) -> dict[str, np.ndarray]:
    return head_statistics(analyse(_model, model_spec, file, precision), _model.config.patch_size)


def cached_figure(builder: str, *args, **kwargs) -> go.Figure:
    """``plots.<builder>(*args)``, built once per distinct input: a rerun after an unrelated control
    reuses the figure instead of building it again. Shared between sessions, so never modified."""
    args = tuple(a.numpy() if isinstance(a, torch.Tensor) else a for a in args)  # Streamlit hashes numpy
    return _figure(builder, *args, **kwargs)


@st.cache_resource(max_entries=256, show_spinner=False)
def _figure(builder: str, *args, **kwargs) -> go.Figure:
    return getattr(plots, builder)(*args, **kwargs)


@st.cache_resource(max_entries=3, show_spinner=False)
def model_anatomy(_model, model_spec: str) -> dict:
    """Weights-only views, computed once per model."""
    c = _model.config
    similarity = explain.position_embedding_similarity(_model.pos_embed.detach(), c.grid_size, c.num_prefix_tokens)
    components, explained = explain.patch_embedding_components(_model.patch_embed.proj.weight, count=16)
    return {"similarity": similarity, "components": components, "explained": explained}


@st.cache_data(max_entries=4, show_spinner=False)
def sample_images(zips: tuple[Path, ...], count: int = 10) -> list[tuple[str, ImageFile]]:
    """One random image per class from a local CIFAR-10 test zip, if there is one."""
    for path in zips:
        if path.is_file():
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.lower().endswith((".jpg", ".png"))]
                by_class: dict[str, list[str]] = {}
                for name in names:
                    parts = name.split("/")
                    by_class.setdefault(parts[-2] if len(parts) > 1 else "", []).append(name)
                rng = random.Random(0)
                picks = [rng.choice(files) for _, files in sorted(by_class.items())][:count]
                return [(" ".join(name.split("/")[-2:]), ImageFile.of(archive.read(name))) for name in picks]
    return []


# --- sidebar -----------------------------------------------------------------------------------


def sidebar() -> Settings:
    st.sidebar.header("Model")
    choice = st.sidebar.selectbox("Model", MODEL_CHOICES, label_visibility="collapsed",
                                  help="torchvision weights are downloaded once, when online")  # fmt: skip
    spec = choice
    if choice == "path or upload...":
        spec = st.sidebar.text_input("vitviz checkpoint file or Hugging Face folder", "")
        uploaded = st.sidebar.file_uploader(f"...or upload a vitviz checkpoint (.pt, up to {MAX_CHECKPOINT_MB} MB)",
                                            type=["pt", "pth"])  # fmt: skip
        if uploaded is not None:
            spec = save_uploaded_checkpoint(uploaded)
    st.sidebar.header("Display")
    precision = st.sidebar.radio("Precision", ["fp32", "bf16"], horizontal=True,
                                 help="bf16 runs about 2x faster on CPUs with bf16 units; maps differ by < 1e-3")  # fmt: skip
    colormap = st.sidebar.selectbox("Colormap", plots.COLORMAPS)
    alpha = st.sidebar.slider("Overlay opacity", 0.0, 1.0, 0.55, 0.05)
    return Settings(spec, precision, colormap, alpha)


def save_uploaded_checkpoint(uploaded) -> str:
    """Store an uploaded checkpoint under its content hash; it is opened with weights_only=True."""
    data = uploaded.getvalue()
    if len(data) > MAX_CHECKPOINT_MB * 2**20:
        st.sidebar.error(f"{uploaded.name} is {len(data) / 2**20:.0f} MB; the limit is {MAX_CHECKPOINT_MB} MB")
        return ""
    folder = Path(tempfile.gettempdir()) / "vitviz-uploads"
    folder.mkdir(exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.pt"
    if not path.exists():
        path.write_bytes(data)
    path.touch()  # newest last
    # keep the disk bounded: only the most recently used uploads stay (as many as models are cached)
    for old in sorted(folder.glob("*.pt"), key=lambda f: f.stat().st_mtime)[:-MAX_STORED_CHECKPOINTS]:
        old.unlink(missing_ok=True)
    return str(path)


def describe_model(model: vitviz.ViT, spec: str) -> None:
    c = model.config
    rows, cols = c.grid_size
    st.sidebar.caption(
        f"**{spec}**: {c.num_layers} layers x {c.num_heads} heads, patch {c.patch_size}, "
        f"input {c.image_hw[0]}x{c.image_hw[1]} ({rows}x{cols} patches), {len(model.class_names)} classes"
    )
    with st.sidebar.expander("Classes"):
        st.write(", ".join(model.class_names) if model.class_names else "none (a backbone)")


# --- images ------------------------------------------------------------------------------------


def choose_image() -> tuple[str, dict[str, ImageFile]] | None:
    """Uploads, camera, earlier images of this session, or samples: (chosen name, every image by name)."""
    if "history" not in st.session_state:
        st.session_state.history = {}  # name -> ImageFile, oldest first
    uploads = st.file_uploader("Upload photos", type=UPLOAD_TYPES, accept_multiple_files=True)
    with st.expander("Take a photo with the camera"):
        camera = st.camera_input("Camera", label_visibility="collapsed")
    # each camera shot gets a name of its own (the browser calls every shot image.jpg)
    shots = st.session_state.setdefault("camera_shots", {})  # file id -> name
    if camera is not None and camera.file_id not in shots:
        shots[camera.file_id] = f"camera photo {len(shots) + 1}.jpg"
    items = [(upload.name, upload) for upload in uploads or []]
    items += [(shots[camera.file_id], camera)] if camera is not None else []
    # each upload is read, hashed and decoded once, in the run it arrives; later runs reuse the outcome:
    # (its name among the session's images, "") or ("", why it was refused)
    earlier = st.session_state.get("intake", {})
    intake = {item.file_id: earlier.get(item.file_id) or take_in(name, item) for name, item in items}
    st.session_state.intake = intake  # only the files still in the widgets
    for name, item in items:
        if intake[item.file_id][1]:
            st.error(f"Could not read {name}: {intake[item.file_id][1]}")
    arrived = [intake[item.file_id][0] for _, item in items if item.file_id not in earlier]
    if any(arrived):  # the newest readable arrival is shown, wherever its widget lists it
        st.session_state.newest = [name for name in arrived if name][-1]
    samples = dict(sample_images(tuple(SAMPLE_ZIPS)))
    options = list(st.session_state.history) + [f"sample: {name}" for name in samples]
    if not options:
        st.info(
            "Upload one or more photos (JPEG, PNG, WebP, BMP, GIF, TIFF) to see what the model predicts and "
            "where it looks: attention rollout, [CLS] attention per layer and head, what any patch attends to, "
            "class-specific relevance, head statistics and faithfulness curves."
        )
        return None
    newest = st.session_state.get("newest")
    index = options.index(newest) if newest in options else 0
    name = st.selectbox("Image", options, index=index, help="every image of this session stays here")
    images = st.session_state.history | {f"sample: {n}": file for n, file in samples.items()}
    return name, images


def take_in(name: str, upload) -> tuple[str, str]:
    """Read a new upload: add it to the session's images and return (its name there, ""), or return
    ("", why it was refused). Unreadable files are refused here, so they never reach an image picker
    and the others stay usable. A different file with a name already taken (phones call every photo
    image.jpg) gets a number: "image (2).jpg"."""
    file = ImageFile.of(upload.getvalue())
    try:
        decode(file)
    except ImageError as error:
        return "", str(error)
    history = st.session_state.history
    stem, suffix = os.path.splitext(name)
    number = 2
    while name in history and history[name].key != file.key:
        name, number = f"{stem} ({number}){suffix}", number + 1
    history.pop(name, None)  # re-insert: newest last
    history[name] = file
    while len(history) > MAX_SESSION_IMAGES:  # bound each session's memory: drop the oldest
        history.pop(next(iter(history)))
    return name, ""


# --- what every tab draws from -----------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """The model, the chosen photo with its analysis, and the sidebar's settings."""

    model: vitviz.ViT
    settings: Settings
    file: ImageFile
    photo: Photo
    analysis: ImageAnalysis  # its box is on the shown photo (photo.image)

    def key(self, name: str, default, per_image: bool = False, options=None) -> str:
        """The session-state key of a tab widget, holding its value (the default at first).

        Only the open tab is drawn, and Streamlit forgets the value of a widget that a run does not
        draw, so keep_tab_widgets() writes these values back in every run: a control keeps its value
        while another tab is open. The default is set here rather than given to the widget (Streamlit
        warns about a widget given both). The model, and the image for per_image widgets, are part
        of the key, so a value never meets a widget it does not fit (another model's layer count); a
        stored value outside ``options`` (the choices or the range it must be in) goes back to the
        default, since one path may load a different model after its file changed."""
        key = f"{KEPT}{self.scopes()[1 if per_image else 0]}|{name}"
        if key not in st.session_state or (options is not None and st.session_state[key] not in options):
            st.session_state[key] = default
        return key

    def scopes(self) -> tuple[str, str]:
        # the name too: two images with the same bytes are still two choices in the compare pickers
        return self.settings.model_spec, f"{self.settings.model_spec}|{self.photo.key}|{self.photo.name}"


def keep_tab_widgets(scopes: tuple[str, ...]) -> None:
    """Write back the values of the current model's and image's tab widgets (see Page.key); forget the rest."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(KEPT)]:
        if key[len(KEPT) :].rsplit("|", 1)[0] in scopes:
            st.session_state[key] = st.session_state[key]
        else:
            del st.session_state[key]


def rerun_tab() -> None:
    """Re-run only the current tab during the tab's own (fragment) rerun; during a full run, the page."""
    try:
        st.rerun(scope="fragment")
    except StreamlitAPIException:  # Streamlit allows the fragment scope only in fragment reruns
        st.rerun()


def index_slider(label: str, count: int, key: str) -> int:
    """A slider over 0..count-1; with a single choice there is nothing to slide (Streamlit refuses min == max)."""
    if count <= 1:
        return 0
    return st.slider(label, 0, count - 1, key=key)


def downloads(page: Page, tab: str, maps: dict[str, np.ndarray], overlay: str | None = None) -> None:
    """Buttons for what this tab shows: the overlay of maps[overlay] as a PNG at the photo's full
    resolution, and the maps as .npz. Files are built only when a button is clicked (deferred data)."""
    stem = f"{Path(page.photo.name).stem}_{tab}".replace(" ", "_")
    arrays = {"".join(ch if ch.isalnum() else "_" for ch in name): value for name, value in maps.items()}

    def overlay_png() -> bytes:
        buffer = io.BytesIO()
        full_box = tuple(v / page.photo.scale for v in page.analysis.box)
        picture = plots.overlay(page.photo.full, maps[overlay], page.settings.colormap, page.settings.alpha, full_box)
        picture.save(buffer, format="PNG")
        return buffer.getvalue()

    def maps_npz() -> bytes:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, probabilities=page.analysis.probabilities, **arrays)
        return buffer.getvalue()

    left, right = st.columns(2)
    if overlay is not None:
        left.download_button("Download the overlay (PNG, full resolution)", overlay_png, f"{stem}.png", "image/png")
    right.download_button("Download this tab's maps (.npz)", maps_npz, f"{stem}_maps.npz", "application/octet-stream")


# --- tabs: only the open one runs; each is a fragment, so its own controls re-run only that tab --


@st.fragment
def overview_tab(page: Page) -> None:
    model, analysis, settings = page.model, page.analysis, page.settings
    left, right = st.columns([3, 2])
    with right:
        st.subheader("Predictions")
        most = min(10, len(model.class_names))
        top_k = st.slider("Top-k", 1, most, key=page.key("top_k", min(5, most), options=range(1, most + 1))) if most > 1 else 1
        top = np.argsort(analysis.probabilities)[::-1][:top_k]  # only these reach the cache key, not 1000 names
        st.plotly_chart(cached_figure("predictions_figure", analysis.probabilities[top],
                                      [model.class_names[i] for i in top], top_k), theme=None)  # fmt: skip
        st.subheader("Rollout settings")
        fusion = st.selectbox("Head fusion", explain.HEAD_FUSIONS, key=page.key("fusion", explain.HEAD_FUSIONS[0]))
        discard = st.slider("Discard ratio", 0.0, 0.95, step=0.05, key=page.key("discard", 0.0),
                            help="weakest patch-to-patch weights dropped")  # fmt: skip
        layers = range(model.config.num_layers)
        start = index_slider("Start layer", len(layers), page.key("start_layer", 0, options=layers))
    rollout = rollout_map(settings.model_spec, page.photo.key, settings.precision, fusion, discard, start,
                          _analysis=analysis, _pooling=model.config.pooling)  # fmt: skip
    with left:
        st.subheader("Attention rollout")
        a, b = st.columns(2)
        width, height = page.photo.full.size
        a.image(overlay_picture(page.photo, rollout, analysis.box, settings), width="stretch",
                caption=f"{page.photo.name}, {width}x{height} (full resolution in the PNG download)")  # fmt: skip
        b.plotly_chart(cached_figure("heatmap_figure", rollout, "patch grid (hover for values)", settings.colormap), theme=None)
    downloads(page, "rollout", {"rollout": rollout}, overlay="rollout")


@st.fragment
def heads_tab(page: Page, images: dict[str, ImageFile], prepare) -> None:
    c, settings = page.model.config, page.settings
    if not c.class_token:
        st.info("This model has no [CLS] token, so there is no [CLS] attention to show; "
                "see 'Click a patch' for what each patch attends to.")  # fmt: skip
        return
    layers = range(c.num_layers)
    layer = index_slider("Layer", c.num_layers, page.key("heads_layer", c.num_layers - 1, options=layers))
    maps = explain.cls_attention_all(page.analysis.attentions, **page.analysis.maps_args)[0]  # (L, H, rows, cols)
    st.subheader(f"[CLS] attention of every head in layer {layer}")
    st.plotly_chart(cached_figure("grid_figure", maps[layer], [f"head {h}" for h in range(c.num_heads)], min(c.num_heads, 6),
                                  settings.colormap), theme=None)  # fmt: skip
    st.subheader("Compare two (image, layer, head) choices")
    chosen = {}
    names = list(images)
    for side, column in zip("AB", st.columns(2)):
        with column:
            # per image: choosing another main image resets both sides to it
            image_name = st.selectbox(f"{side}: image", names,
                                      key=page.key(f"image_{side}", page.photo.name, per_image=True, options=names))  # fmt: skip
            try:  # another image of the session is decoded only when chosen here
                side_photo, side_analysis = (page.photo, page.analysis) if image_name == page.photo.name else prepare(image_name)
            except ImageError as error:
                st.error(f"Could not read {image_name}: {error}")
                continue
            pick_layer = st.number_input(f"{side}: layer", 0, c.num_layers - 1,
                                         key=page.key(f"layer_{side}", layers[-1] if side == "A" else 0, options=layers))  # fmt: skip
            heads = ["mean", "max", "min", *range(c.num_heads)]
            pick_head = st.selectbox(f"{side}: head", heads, key=page.key(f"head_{side}", "mean", options=heads))
            patch_map = explain.cls_attention(side_analysis.attentions, int(pick_layer), pick_head,
                                              **side_analysis.maps_args)[0]  # fmt: skip
            if image_name == page.photo.name:
                chosen[f"cls_layer{pick_layer}_head{pick_head}"] = patch_map.numpy()
            st.image(overlay_picture(side_photo, patch_map, side_analysis.box, settings), width="stretch",
                     caption=f"{image_name}: layer {pick_layer}, head {pick_head}")  # fmt: skip
    # a figure of layers x heads heatmaps is slow to build for big models, so only on request
    if st.toggle("Show every layer x head", key=page.key("all_layers_heads", c.num_layers * c.num_heads <= 64)):
        flat = maps.reshape(-1, *maps.shape[-2:])
        titles = [f"L{l} H{h}" for l in range(c.num_layers) for h in range(c.num_heads)]
        st.plotly_chart(cached_figure("grid_figure", flat, titles, c.num_heads, settings.colormap), theme=None)
    downloads(page, "cls_attention", chosen | {"cls_all_layers_heads": maps.numpy()}, overlay=next(iter(chosen), None))


@st.fragment
def patch_tab(page: Page) -> None:
    analysis, settings = page.analysis, page.settings
    rows, cols = analysis.grid_size
    if "patch" not in st.session_state:
        st.session_state.patch = (rows // 2, cols // 2)
    row, col = st.session_state.patch
    row, col = min(row, rows - 1), min(col, cols - 1)
    layers = range(page.model.config.num_layers)
    layer = index_slider("Layer", len(layers), page.key("patch_layer", layers[-1], options=layers))
    left, right = st.columns(2)
    with left:
        st.caption("Click a patch on the picture (or set its row and column) to see what it attends to.")
        # the inputs come first, so a typed row or column is drawn in this same run
        a, b = st.columns(2)
        new_row = a.number_input("Row", 0, rows - 1, row)
        new_col = b.number_input("Column", 0, cols - 1, col)
        if (new_row, new_col) != (row, col):
            row, col = int(new_row), int(new_col)
            st.session_state.patch = (row, col)
        # the photo as a small JPEG data URI: a pixel array would be millions of numbers in the page's JSON
        picture, scale = _photo_data_uri(page.photo.key, page.photo.image)
        picker = cached_figure("patch_picker_figure", picture, scale, tuple(analysis.box), analysis.grid_size, (row, col))
        # the chart's key names the image and the patch, so after any change of patch a fresh chart
        # (with no stale selection) is drawn, and clicking a previously clicked patch works again
        event = st.plotly_chart(picker, on_select="rerun",
                                selection_mode="points", key=f"patch_picker_{page.photo.key[:12]}_{row}_{col}",
                                theme=None)  # fmt: skip
        points = [p for p in (event.selection.points if event else []) if p.get("curve_number") == 1]
        clicked = divmod(int(points[0]["point_index"]), cols) if points else (row, col)
        if clicked != (row, col):  # a click: known only once the chart is drawn, so draw again with the new patch
            st.session_state.patch = clicked  # (clicking the current patch changes nothing, and must not rerun)
            rerun_tab()
    fused, per_head = patch_maps(settings.model_spec, page.photo.key, settings.precision, layer, row, col,
                                 _analysis=analysis)  # fmt: skip
    with right:
        st.image(overlay_picture(page.photo, fused, analysis.box, settings), width="stretch",
                 caption=f"patch ({row}, {col}), layer {layer}, mean over heads")  # fmt: skip
    st.plotly_chart(cached_figure("grid_figure", per_head, [f"head {h}" for h in range(len(per_head))],
                                  min(len(per_head), 6), settings.colormap), theme=None)  # fmt: skip
    name = f"patch_{row}_{col}_layer{layer}"
    downloads(page, name, {name: fused, f"{name}_per_head": per_head}, overlay=name)



@st.fragment
def class_tab(page: Page) -> None:
    model, analysis, settings = page.model, page.analysis, page.settings
    order = [int(i) for i in np.argsort(analysis.probabilities)[::-1]]
    target = st.selectbox("Explain the class", order, key=page.key("class", order[0], per_image=True, options=order),
                          format_func=lambda i: f"{model.class_names[i]} ({analysis.probabilities[i]:.1%})")  # fmt: skip
    maps = relevance_maps(model, settings.model_spec, page.file, settings.precision, target)
    for column, (name, patch_map) in zip(st.columns(len(maps)), maps.items()):
        column.image(overlay_picture(page.photo, patch_map, analysis.box, settings), width="stretch",
                     caption=f"{name} for '{model.class_names[target]}'")  # fmt: skip
        column.plotly_chart(cached_figure("heatmap_figure", patch_map, "", settings.colormap), key=f"class_{name}", theme=None)
    downloads(page, f"class{target}", {f"{name}_class{target}": m for name, m in maps.items()},
              overlay=f"relevance_class{target}")  # fmt: skip


def anatomy_tab(page: Page) -> None:
    model, settings = page.model, page.settings
    stats = statistics(model, settings.model_spec, page.file, settings.precision)
    anatomy = model_anatomy(model, settings.model_spec)
    left, right = st.columns(2)
    left.subheader("Mean attention distance")
    left.plotly_chart(cached_figure("attention_distance_figure", stats["mean_distance"]), theme=None)
    right.subheader("Attention entropy")
    right.plotly_chart(cached_figure("layer_head_figure", stats["entropy"], "", "nats"), theme=None)
    rows, cols = model.config.grid_size
    similarity = anatomy["similarity"]
    left.subheader("Position-embedding similarity")
    step = max(1, max(rows, cols) // 7)  # at most about 7 x 7 small maps
    picks = [(r, c) for r in range(0, rows, step) for c in range(0, cols, step)]
    left.plotly_chart(cached_figure("grid_figure", torch.stack([similarity[r, c] for r, c in picks]),
                                    [f"({r},{c})" for r, c in picks], len(range(0, cols, step)), "viridis",
                                    rescale_each=False), theme=None)  # fmt: skip
    right.subheader("Patch-embedding filters: principal components")
    components, explained = anatomy["components"], anatomy["explained"]
    pictures = components[:, :3].permute(0, 2, 3, 1) if components.shape[1] >= 3 else components[:, :1].permute(0, 2, 3, 1)
    pictures = [(plots.rescale(p) * 255).astype(np.uint8) for p in pictures.numpy()]
    right.image([p if p.shape[-1] == 3 else p[..., 0] for p in pictures], width=64,
                caption=[f"{100 * v:.1f}%" for v in explained.tolist()])  # fmt: skip
    downloads(page, "anatomy", {"mean_attention_distance": stats["mean_distance"], "attention_entropy": stats["entropy"],
                                "position_embedding_similarity": similarity.numpy(),
                                "patch_embedding_components": components.numpy(),
                                "explained_variance": explained.numpy()})  # fmt: skip


@st.fragment
def faithfulness_tab(page: Page) -> None:
    model, analysis, settings = page.model, page.analysis, page.settings
    target = int(np.argmax(analysis.probabilities))
    st.caption(f"Patches are replaced 10 % at a time, most- or least-relevant first, and the probability of "
               f"'{model.class_names[target]}' is recorded. A faithful map drops fast when its top patches go "
               "(small area, most-relevant first) and slowly when its bottom patches go (large area).")  # fmt: skip
    baseline = st.radio("Replace patches by", ["mean", "blur"], horizontal=True, key=page.key("baseline", "mean"),
                        format_func=lambda b: {"mean": "the mean colour", "blur": "a blur"}[b])  # fmt: skip
    if not st.toggle("Run the perturbation test (7 batched forward passes)", key=page.key("run", False, per_image=True)):
        return
    results = faithfulness_curves(model, settings.model_spec, page.file, settings.precision, target, baseline)
    x = explain.fraction_replaced()
    curves = {}
    for name, result in results.items():
        curves[f"{name}, most first"] = (x, result["most_first"])
        curves[f"{name}, least first"] = (x, result["least_first"])
    st.plotly_chart(plots.perturbation_figure(curves), theme=None)
    st.table({"map": list(results), "area, most-relevant first (lower is better)":
              [f"{r['auc_most_first']:.3f}" for r in results.values()],
              "area, least-relevant first (higher is better)": [f"{r['auc_least_first']:.3f}" for r in results.values()]})  # fmt: skip
    downloads(page, f"faithfulness_{baseline}",
              {"fraction_replaced": np.asarray(x)} | {name: np.asarray(y) for name, (_, y) in curves.items()})  # fmt: skip


# --- page --------------------------------------------------------------------------------------


def main() -> None:
    st.set_page_config(page_title="vitviz", page_icon="🔍", layout="wide")
    st.title("vitviz: what does the Vision Transformer look at?")
    settings = sidebar()
    # the images come first, so a model that is missing or fails to load does not clear the uploads
    chosen = choose_image()
    if "tab" in st.session_state:  # and the open tab survives runs that stop before the tabs
        st.session_state.tab = st.session_state.tab
    if not settings.model_spec:
        st.info("Enter the path of a vitviz checkpoint or a Hugging Face ViT folder, or upload a checkpoint.")
        return
    try:
        model = get_model(settings.model_spec)
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load model `{settings.model_spec}`: {error}")
        return
    describe_model(model, settings.model_spec)
    if model.config.num_classes == 0:
        st.error("This model has no classification head (a backbone); vitviz needs a classifier to explain.")
        return
    if chosen is None:
        return
    name, images = chosen

    def prepare(image_name: str) -> tuple[Photo, ImageAnalysis]:
        """The photo and its analysis, with the model's box scaled onto the shown photo."""
        file = images[image_name]
        analysis = analyse(model, settings.model_spec, file, settings.precision)
        photo = Photo(image_name, file.key, display_photo(file), decode(file))
        return photo, dataclasses.replace(analysis, box=tuple(v * photo.scale for v in analysis.box))

    try:
        photo, shown = prepare(name)
    except ImageError as error:
        st.error(f"Could not read {name}: {error}")
        return
    page = Page(model, settings, images[name], photo, shown)
    keep_tab_widgets(page.scopes())
    # Only the open tab runs (Streamlit's lazy tabs): a sidebar change redraws one tab, not six, and
    # the class-specific maps (a backward pass) are computed when their tab is first opened.
    tabs = st.tabs(TABS, key="tab", on_change="rerun")
    for tab, draw in zip(tabs, [overview_tab, lambda p: heads_tab(p, images, prepare), patch_tab, class_tab,
                                anatomy_tab, faithfulness_tab]):  # fmt: skip
        if tab.open:
            with tab:
                draw(page)


main()
