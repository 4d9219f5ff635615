"""PhotoView: the view a notebook shows for a model and its photos (``vitviz.show(model, images)``).

Every setting is a synced traitlet that code and clicks both set: ``method``, ``layer``, ``head`` (an index or
"mean"), ``patch`` ((row, col) or None), ``image`` (the photo ``values`` is read of: a click sets it) and ``target``
(a class index or name, a prompt). A change redraws from the analysis the view holds (notebook.photos): the model
runs again only for a method or target not yet seen, or a patch whose block's attentions were too large to keep.
Python sends the browser ``frame``: the drawn maps as uint8 on their one colour scale (notebook.packing), a few kB.

``values`` is the map now drawn over photo ``image``, one float per patch token in the layout's order (prefix tokens
are not drawn): the library's own numbers for that method, layer, head and patch. ``to_html``, the PNG fallback and
the frame's packing are MapView's (notebook.base).
"""

from __future__ import annotations

import numpy as np
import traitlets as t
from PIL import Image

from vitviz.explain.registry import get_method
from vitviz.notebook import export
from vitviz.notebook.base import MapView, check_colormap, check_index
from vitviz.notebook.packing import fit_photos
from vitviz.notebook.photos import ATTENTION, METHOD_NAMES, PhotoAnalyses

SETTINGS = ("method", "layer", "head", "patch", "target", "image", "colormap")


class PhotoView(MapView):
    """A model's maps over one or more photos, predictions beside them; see the module's docstring."""

    mode = t.Unicode("photo").tag(sync=True)
    method = t.Unicode(ATTENTION).tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    head = t.Union([t.Int(), t.Unicode()], default_value="mean").tag(sync=True)
    patch = t.Tuple(t.Int(), t.Int(), default_value=None, allow_none=True).tag(sync=True)
    image = t.Int(0).tag(sync=True)
    target = t.Union([t.Int(), t.Unicode()], default_value=None, allow_none=True).tag(sync=True)
    # set once: what the script draws the pickers and predictions with
    predictions = t.List().tag(sync=True)  # per image [[class name, probability], ...]
    methods = t.List().tag(sync=True)
    class_methods = t.List().tag(sync=True)  # the methods whose map depends on ``target`` (its frame key holds it)
    num_layers = t.Int(1).tag(sync=True)
    num_heads = t.Int(1).tag(sync=True)
    classes = t.List().tag(sync=True)

    SETTINGS = SETTINGS
    SUBJECT = "show"

    def __init__(self, photos: PhotoAnalyses, **state):
        self._photos = photos
        self.refuse_unknown(state)
        defaults = {name: self.trait_defaults(name) for name in SETTINGS} | {"layer": photos.num_layers - 1}
        self.check_settings(defaults | state)  # before anything is made: a bad setting is one line
        self._batch = True  # the settings below draw once, in set_state_checked
        super().__init__(
            photos=fit_photos(photos.images, [{"box": list(box)} for box in photos.boxes()]),
            predictions=[[list(p) for p in one] for one in photos.predictions()],
            methods=list(METHOD_NAMES),
            class_methods=[m for m in METHOD_NAMES if m != ATTENTION and get_method(m).class_specific],
            num_layers=photos.num_layers,
            num_heads=photos.num_heads,
            classes=photos.class_names,
            layer=photos.num_layers - 1,
        )
        self._batch = False
        self.set_state_checked(**state)
        self._check_payload()

    @property
    def analyses(self) -> PhotoAnalyses:
        """The analysis the view draws from (the model, the images and every map computed so far)."""
        return self._photos

    @t.validate("method", "layer", "head", "patch", "target", "image")
    def _valid(self, proposal):
        return self._validate_setting(proposal)

    def normalized(self, name: str, value):
        if name == "patch" and isinstance(value, list | tuple) and len(value) == 2:
            if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value):
                return (int(value[0]), int(value[1]))
        return value

    def check_settings(self, state: dict) -> None:
        photos = self._photos
        head, patch = state["head"], state["patch"]
        if head != "mean" and (
            isinstance(head, bool) or not isinstance(head, int | np.integer) or not 0 <= head < photos.num_heads
        ):
            raise ValueError(f"head must be 'mean' or in [0, {photos.num_heads - 1}]; got {head!r}")
        check_index("layer", state["layer"], photos.num_layers)
        rows, cols = photos.grid
        if patch is not None and not (
            isinstance(patch, list | tuple)
            and len(patch) == 2
            and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in patch)
        ):
            raise ValueError(f"patch must be (row, col) inside the {rows}x{cols} grid, or None; got {patch!r}")
        if not isinstance(state["method"], str):
            raise ValueError(f"unknown method {state['method']!r}; choose from {', '.join(METHOD_NAMES)}")
        photos.check(state["method"], state["layer"], head, None if patch is None else tuple(patch))
        if isinstance(state["target"], bool):
            raise ValueError(f"target is a class index, a class name or None; got {state['target']!r}")
        photos.target_index(state["target"])
        check_index("image", state["image"], len(photos.images), " (a photo's place)")
        check_colormap(state["colormap"])

    def current_maps(self) -> list[np.ndarray]:
        return list(self._photos.maps(self.method, self.layer, self.head, self.patch, self.target))

    def current_values(self, maps: list[np.ndarray]) -> np.ndarray:
        return maps[self.image]

    def label(self) -> str:
        head = "mean of heads" if self.head == "mean" else f"head {self.head}"
        if self.patch is not None:
            return f"what patch {tuple(self.patch)} attends to · block {self.layer} · {head}"
        if self.method == ATTENTION:
            return f"what the head's tokens attend to · block {self.layer} · {head}"
        index = self._photos.target_index(self.target)
        target = "top class" if index is None else repr(self._photos.class_names[index])
        return f"{self.method} · {target}"

    def frame_key(self) -> str:
        patch = None if self.patch is None else tuple(self.patch)
        target = self._photos.target_index(self.target)
        return export.key_of(self.method, self.layer, self.head, patch, target, self.method in self.class_methods)

    def offline_frames(self, budget: int) -> dict[str, dict]:
        return export.photo_frames(self, budget)

    def static_layers(self) -> list[tuple[Image.Image, np.ndarray, tuple[float, float, float, float]]]:
        photos = self._photos
        return [
            (im, values, (b[0] * im.width, b[1] * im.height, b[2] * im.width, b[3] * im.height))
            for im, values, b in zip(photos.images, self._maps, photos.boxes(), strict=True)
        ]
