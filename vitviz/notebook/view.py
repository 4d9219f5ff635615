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

from vitviz.notebook import export
from vitviz.notebook.base import MapView
from vitviz.notebook.packing import photo_data_url
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
    num_layers = t.Int(1).tag(sync=True)
    num_heads = t.Int(1).tag(sync=True)
    classes = t.List().tag(sync=True)

    def __init__(self, photos: PhotoAnalyses, **state):
        self._photos = photos
        unknown = set(state) - set(SETTINGS)
        if unknown:
            raise ValueError(f"show takes {', '.join(SETTINGS)}; got {', '.join(sorted(unknown))}")
        super().__init__(
            photos=[
                {"src": photo_data_url(im), "box": list(box)}
                for im, box in zip(photos.images, photos.boxes(), strict=True)
            ],
            predictions=[[list(p) for p in one] for one in photos.predictions()],
            methods=list(METHOD_NAMES),
            num_layers=photos.num_layers,
            num_heads=photos.num_heads,
            classes=photos.class_names,
            layer=photos.num_layers - 1,
        )
        self.set_state_checked(**state)
        if not self.frame:  # no setting changed the default layer's map
            self._redraw()

    @property
    def analyses(self) -> PhotoAnalyses:
        """The analysis the view draws from (the model, the images and every map computed so far)."""
        return self._photos

    def set_state_checked(self, **state) -> None:
        """Set several settings at once; a bad one is a one-line ValueError and nothing changes."""
        current = {name: getattr(self, name) for name in SETTINGS}
        self._check(current | state)
        with self.hold_trait_notifications():
            for name, value in state.items():
                setattr(self, name, value)

    @t.validate("method", "layer", "head", "patch", "target", "image")
    def _valid(self, proposal):
        value = proposal["value"]
        if proposal["trait"].name == "patch" and value is not None:
            value = (int(value[0]), int(value[1]))
        state = {name: getattr(self, name) for name in SETTINGS}
        try:
            self._check(state | {proposal["trait"].name: value})
        except ValueError as error:
            raise t.TraitError(str(error)) from None
        return value

    def _check(self, state: dict) -> None:
        photos = self._photos
        head = state["head"]
        if isinstance(head, str) and head != "mean":
            raise ValueError(f"head must be 'mean' or in [0, {photos.num_heads - 1}]; got {head!r}")
        photos.check(state["method"], state["layer"], head, state["patch"])
        photos.target_index(state["target"])
        if not 0 <= state["image"] < len(photos.images):
            raise ValueError(f"image must be in [0, {len(photos.images) - 1}]; got {state['image']}")
        self._valid_colormap({"value": state["colormap"]})

    @t.observe(*SETTINGS)
    def _changed(self, change) -> None:
        self._redraw()

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
        return export.key_of(self.method, self.layer, self.head, None if self.patch is None else tuple(self.patch))

    def offline_frames(self, budget: int) -> dict[str, dict]:
        return export.photo_frames(self, budget)

    def static_layers(self) -> list[tuple[Image.Image, np.ndarray, tuple[float, float, float, float]]]:
        photos = self._photos
        return [
            (im, values, (b[0] * im.width, b[1] * im.height, b[2] * im.width, b[3] * im.height))
            for im, values, b in zip(photos.images, self._maps, photos.boxes(), strict=True)
        ]
