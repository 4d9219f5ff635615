"""The page's state: the sidebar's settings, the model's identity (ModelKey), the chosen photo, the page every tab
draws from (model + photo + analysis), and the session-state keys that let tab widgets keep their values."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, replace

import streamlit as st
from PIL import Image

import vitviz
from vitviz.analysis import ImageAnalysis
from vitviz.preprocessing import ImageFile
from vitviz_dashboard.state import tab_widget

# the app's pages (st.Page) by name, set by app.main in every run: st.switch_page reaches a page of callables only
# through its object, so a tab that sends the visitor to another page finds it here
PAGES: dict[str, object] = {}


@dataclass(frozen=True)
class Settings:
    model_spec: str  # what vitviz.load_model gets; "" until the user has named one
    precision: str  # "auto" until resolved (model_picker.resolve), then "fp32" or "bf16"
    colormap: str
    alpha: float
    model_choice: str = "default"  # the model picker's option (a spec, or "path or upload...", ...)
    prompt_error: str = ""  # why the typed prompts cannot be the classes ("prompt 2 is empty"); "" when they can


@dataclass(frozen=True)
class ModelKey:
    """Everything that fixes what the page's model computes: the first argument of every cached function that runs
    a model (which itself is passed unhashed, as ``_model``). Two models with equal keys give the same outputs."""

    spec: str  # what vitviz.load_model got: the image tower
    precision: str  # "fp32" or "bf16", as resolved: every pass runs in it
    prompts: tuple[str, ...] | None = None  # a zero-shot model's classes (vitviz.zero_shot); None: the model's head
    templates: tuple[str, ...] | None = None  # the templates each prompt is put through; None: read as typed
    knocked_heads: tuple[tuple[int, int], ...] = ()  # (layer, head) pairs removed from every pass (knockout.py)
    knocked_tokens: tuple[int, ...] = ()  # prefix tokens taken out of every block's attention
    # SAE latents edited in a block's output (sae_editing.py): (folder, its stamp, block, ((kind, latent, value), ...))
    sae_edit: tuple = ()

    @property
    def knocked_out(self) -> bool:
        """Whether heads or tokens are removed or SAE latents edited: the model is an intervened copy of another."""
        return bool(self.knocked_heads or self.knocked_tokens or self.sae_edit)

    def intact(self) -> ModelKey:
        """The key of the model before its knock-outs and SAE edits (the same prompts): what the "what changes" views
        compare."""
        return replace(self, knocked_heads=(), knocked_tokens=(), sae_edit=())

    @functools.cached_property
    def widget_scope(self) -> str:
        """What tab widgets' values are kept under (Page.widget_key): the spec, and a digest of the prompts, so that a
        value never meets a widget it does not fit (another model's layer count, another prompt set's classes). Not
        the precision or the knock-outs: a knocked-out model keeps its model's widget values."""
        if self.prompts is None:
            return self.spec
        digest = hashlib.sha256(json.dumps([self.prompts, self.templates]).encode()).hexdigest()[:16]
        return f"{self.spec}#prompts={digest}"


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
    """The model and its key, the sidebar's settings, the session's images and the chosen photo with its analysis."""

    model: vitviz.ViT
    model_key: ModelKey
    settings: Settings
    images: dict[str, ImageFile]  # every image of the session by name, for the tabs that compare photos
    file: ImageFile  # the chosen image's, images[photo.name]
    photo: Photo
    analysis: ImageAnalysis  # its box is on the shown photo (photo.image)
    # with heads or tokens knocked out (knockout.py), the model before (its key is model_key.intact()): for "what
    # changes" views; None when nothing is knocked out
    intact_model: vitviz.ViT | None = None

    def widget_key(self, name: str, default, per_image: bool = False, options=None) -> str:
        """The session-state key of a tab widget, holding its value (the default at first).

        Only the open tab is drawn, and Streamlit forgets the value of a widget that a run does not
        draw, so state.keep_widgets() writes these values back in every run: a control keeps its value
        while another tab is open. The default is set here rather than given to the widget (Streamlit
        warns about a widget given both). The model (ModelKey.widget_scope), and the image for per_image widgets,
        are part of the key, so a value never meets a widget it does not fit (another model's layer count); a
        stored value outside ``options`` (the choices or the range it must be in) goes back to the
        default, since one path may load a different model after its file changed."""
        # the name too: two images with the same bytes are still two choices in the compare pickers
        scope = self.model_key.widget_scope
        if per_image:
            scope = f"{scope}|{self.photo.key}|{self.photo.name}"
        key = tab_widget(scope, name)
        if key not in st.session_state or (options is not None and st.session_state[key] not in options):
            st.session_state[key] = default
        return key
