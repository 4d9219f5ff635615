"""What every tab shares: the sidebar's settings, the chosen photo, the page (model + photo + analysis),
the keys that let tab controls keep their values, downloads, and the names of tokens and readouts."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st
from PIL import Image
from streamlit.errors import StreamlitAPIException

import vitviz
from vitviz.analysis import ImageAnalysis
from vitviz.preprocessing import ImageFile
from vitviz.render import overlays

KEPT = "kept|"  # prefix of the keys of tab widgets, whose values outlive runs that do not draw them
OVERLAY_PNG, MAPS_NPZ = "Overlay (PNG, full size)", "This tab's maps (.npz)"  # the download buttons under each tab
KNOCKOUT = "#knockout="  # what a knocked-out model's spec adds to its model's (knockout.py)
PROMPTS = "#prompts="  # what a zero-shot model's spec adds to its model's (prompts.py)


@dataclass(frozen=True)
class Settings:
    model_spec: str  # what vitviz.load_model gets; "" until the user has named one
    precision: str
    colormap: str
    alpha: float
    model_choice: str = "default"  # the model picker's option (a spec, or "path or upload...", ...)
    prompt_error: str = ""  # why the typed prompts cannot be the classes ("prompt 2 is empty"); "" when they can


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


@dataclass(frozen=True)
class Page:
    """The model, the chosen photo with its analysis, and the sidebar's settings."""

    model: vitviz.ViT
    settings: Settings
    file: ImageFile
    photo: Photo
    analysis: ImageAnalysis  # its box is on the shown photo (photo.image)
    # with heads or tokens knocked out (knockout.py), the model and settings before: for "what changes" views
    intact_model: vitviz.ViT | None = None
    intact_settings: Settings | None = None

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
        # the name too: two images with the same bytes are still two choices in the compare pickers; a knocked-out
        # model keeps its model's widget values (its spec is the model's plus what was removed)
        spec = self.settings.model_spec.split(KNOCKOUT)[0]
        return spec, f"{spec}|{self.photo.key}|{self.photo.name}"


def keep_tab_widgets() -> None:
    """Write back the values of every tab widget (see Page.key), whatever model and image they belong to, so that
    they survive runs that do not draw them: another tab, another model tried and abandoned, a model that failed
    to load. Page.key resets a value that no longer fits its widget. Called first in every run."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(KEPT)]:
        st.session_state[key] = st.session_state[key]


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
        picture = overlays.overlay(
            page.photo.full, maps[overlay], page.settings.colormap, page.settings.alpha, full_box
        )
        picture.save(buffer, format="PNG")
        return buffer.getvalue()

    def maps_npz() -> bytes:
        return npz_bytes({"probabilities": page.analysis.probabilities, **arrays})

    left, right = st.columns(2)  # short labels, as in Features: at 800 px a half column holds about 25 characters
    if overlay is not None:
        left.download_button(
            OVERLAY_PNG,
            overlay_png,
            f"{stem}.png",
            "image/png",
            icon=":material/download:",
            help="The overlay drawn on the photo at its full resolution",
        )
    right.download_button(
        MAPS_NPZ,
        maps_npz,
        f"{stem}_maps.npz",
        "application/octet-stream",
        icon=":material/download:",
        help="Every map this tab shows, as NumPy arrays",
    )


def chart_download(container, page: Page, what: str, values, rows: str = "", columns: str = "") -> None:
    """A small button under one chart for its numbers, labelled by ``what`` ("mean distances": a few words, to fit
    half a column at 800 px): a 2-D array as a CSV table, with its ``rows`` and ``columns`` named ("layer", "head") in
    the first column and the header; a dict of arrays as one .npz."""
    stem = f"{Path(page.photo.name).stem}_{what}".replace(" ", "_")
    label = what[:1].upper() + what[1:]
    if isinstance(values, dict):
        container.download_button(
            f"{label} (.npz)",
            lambda: npz_bytes(values),
            f"{stem}.npz",
            "application/octet-stream",
            icon=":material/download:",
            help=f"The {what} shown above, as NumPy arrays",
        )
        return
    container.download_button(
        f"{label} (.csv)",
        lambda: csv_table(values, rows, columns).encode(),
        f"{stem}.csv",
        "text/csv",
        icon=":material/download:",
        help=f"The {what} shown above, one row per {rows}, one column per {columns}",
    )


def npz_bytes(arrays: dict) -> bytes:
    """Named arrays as one compressed NumPy .npz file."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def csv_table(values, rows: str, columns: str) -> str:
    """A 2-D array as CSV: a header naming each column ("head 0", ...), then one line per row ("layer 0", ...)."""
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"a CSV table needs a 2-D array; got shape {values.shape}")
    header = ",".join([f"{rows} \\ {columns}"] + [f"{columns} {c}" for c in range(values.shape[1])])
    lines = [header] + [",".join([f"{rows} {r}"] + [f"{v:.6g}" for v in row]) for r, row in enumerate(values)]
    return "\n".join(lines) + "\n"


# --- names: what the page calls the model's tokens and what its head reads ----------------------


def colour_legend(settings: Settings, low: float, high: float, what: str) -> None:
    """The colour scale of the overlay above: a strip of the colormap, and what its two ends stand for."""
    # at its own 384 px (narrower in a narrower column): stretched across a wide page, a strip grew 60 px tall
    st.image(
        colour_bar_png(settings.colormap),
        width="content",
        caption=f"Colours: {what}, from {low:.3g} (left of the strip) to {high:.3g} (right).",
    )


@st.cache_data(max_entries=16, show_spinner=False)
def colour_bar_png(colormap: str) -> bytes:
    buffer = io.BytesIO()
    overlays.colour_bar(colormap, width=384, height=14).save(buffer, format="PNG")
    return buffer.getvalue()


def prediction_line(page: Page) -> str:
    """One line above every tab: the top prediction, and the input the model actually saw."""
    model, analysis = page.model, page.analysis
    height, width = analysis.pixel_values.shape[-2:]
    rows, cols = analysis.grid_size
    saw = f"the model saw the photo as a {width}x{height} input ({cols}x{rows} patches of {model.config.patch_size} px)"
    if page.settings.prompt_error:
        return f"**No predictions: the prompts cannot be used** ({prompts_to_fix(page.settings)}); {saw}."
    if not has_classifier(model):
        return f"No predictions (the model is a backbone); {saw}."
    top = top_class(analysis.probabilities)
    if is_zero_shot(model):
        return (
            f"**Zero-shot prediction: '{class_name(model, top)}' ({analysis.probabilities[top]:.1%}, "
            f"{probability_kind(model)})**; {saw}."
        )
    return f"**Prediction: {class_name(model, top)} ({analysis.probabilities[top]:.1%})**; {saw}."


def prompts_to_fix(settings: Settings) -> str:
    """What is wrong with the typed prompts, and where to fix them (the sidebar may be collapsed)."""
    return f"{settings.prompt_error}: fix them under Prompts in the sidebar"


def without_classes(settings: Settings) -> str:
    """Why the page's model has no classes, as a sentence without its full stop: its typed prompts cannot be used,
    or it is a backbone. Every tab that needs classes says this, so the cause is in the main area."""
    if settings.prompt_error:
        return f"The prompts cannot be used ({prompts_to_fix(settings)}), so the model has no classes"
    return "This model has no classifier (a backbone)"


def top_class(probabilities: np.ndarray) -> int:
    """The most probable class; among tied classes the first, as np.argmax and classes_by_probability agree."""
    return int(np.argmax(probabilities))


def classes_by_probability(probabilities: np.ndarray) -> list[int]:
    """Every class, most probable first; tied classes in their own order, so the first is always ``top_class``.
    (Reversing an ascending argsort would put the last of tied classes first.)"""
    return [int(i) for i in np.argsort(-np.asarray(probabilities), kind="stable")]


def class_picker(page: Page, label: str = "Explain the class", name: str = "class", default: int | None = None) -> int:
    """The class a tab explains, chosen once for the Class-specific and Faithfulness tabs (one widget key for both;
    only the open tab draws it): by default the top prediction, the classes ordered by probability."""
    probabilities = page.analysis.probabilities
    order = classes_by_probability(probabilities)
    default = order[0] if default is None else default
    what = "prompt" if is_zero_shot(page.model) else "class"
    return st.selectbox(
        label.replace("class", what),
        order,
        key=page.key(name, default, per_image=True, options=order),
        format_func=lambda i: f"{class_name(page.model, i)} ({probabilities[i]:.1%})",
        help="Shared by the Class-specific and Faithfulness tabs.",
    )


def is_zero_shot(model: vitviz.ViT) -> bool:
    """A model whose classes are prompts read by its text tower (vitviz.zero_shot)."""
    return getattr(model, "text_tower", None) is not None and has_classifier(model)


def probability_kind(model: vitviz.ViT) -> str:
    """How the page's probabilities were made, in a few words."""
    if model.config.probabilities == "sigmoid":
        return "sigmoid: each prompt scored on its own"
    return "softmax over the prompts" if is_zero_shot(model) else "softmax over the classes"


def has_classifier(model: vitviz.ViT) -> bool:
    return model.config.num_classes > 0


def class_name(model: vitviz.ViT, index: int) -> str:
    return model.class_names[index] if index < len(model.class_names) else f"class {index}"


def prefix_token_names(config: vitviz.ViTConfig) -> list[str]:
    """The prefix tokens in the model's order: "[CLS]", "distillation", "register 1".."register R"."""
    names = ["[CLS]"] if config.class_token else []
    names += ["distillation"] if config.distillation_token else []
    return names + [f"register {i + 1}" for i in range(config.num_register_tokens)]


def describe_prefix_tokens(config: vitviz.ViTConfig) -> str:
    """E.g. "[CLS] + 4 registers", "[CLS] + distillation", "no prefix tokens"."""
    parts = ["[CLS]"] if config.class_token else []
    parts += ["distillation"] if config.distillation_token else []
    registers = config.num_register_tokens
    parts += [f"{registers} register{'s' if registers > 1 else ''}"] if registers else []
    return " + ".join(parts) or "no prefix tokens"


# What the head reads, by kind: (a few words for the sidebar, the title of its attention rows)
_READS = {
    "map": ("an attention-pooling head over the patches", "rows weighted by the pooling head"),
    "mean": ("the mean of the patch tokens", "mean of the patch rows"),
    "cls+mean": ("[CLS] and the mean patch token, side by side", "[CLS] row and mean patch row, half each"),
    "distilled": ("[CLS] and distillation tokens (two heads, averaged)", "[CLS] and distillation rows, half each"),
    "cls": ("the [CLS] token", "[CLS] attention"),
}


def _reads(config: vitviz.ViTConfig) -> tuple[str, str]:
    kind = "distilled" if config.pooling == "cls" and config.distillation_head else config.pooling
    return _READS[kind]


def describe_pooling(config: vitviz.ViTConfig) -> str:
    """What the head (or, for a backbone, the pooled output) reads, in a few words."""
    return _reads(config)[0]


def readout_title(config: vitviz.ViTConfig) -> str:
    """The name of the attention row a readout map shows: the rows of the tokens the head reads,
    weighted as it weighs them (explain.readout_attention_all with analysis.readout)."""
    return _reads(config)[1]


def readout_file_name(config: vitviz.ViTConfig) -> str:
    """The stem of readout maps in downloads: "cls" where the head reads [CLS] alone, else "readout"."""
    return "cls" if readout_title(config) == "[CLS] attention" else "readout"
