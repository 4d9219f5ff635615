"""MapView: what every notebook view shares, whatever it draws maps of (photos through a ViT, a VLM's answer).

One script (view.js) draws every view; ``mode`` says which. A view holds its analysis, reads the maps of its current
settings from it (``current_maps``), and sends them packed on one colour scale as ``frame`` (notebook.packing). Out of
the kernel it is one offline HTML file (``to_html``, notebook.export) and, in its mimebundle, a PNG of its last state
with its colour scale (``picture``), for nbviewer, GitHub and saved notebooks.

Settings are set through one check (``check_settings``, a subclass's): ``set_state_checked`` (and ``show``'s keyword
arguments) raise a one-line ValueError before anything is set; a trait set alone raises it as a TraitError. A setting
that draws nothing clears the maps, ``values`` and ``frame`` and says why in ``error``. A view checks when it is made
that its synced state is at most packing.PAYLOAD_LIMIT bytes (its photos shrunk to fit by packing.fit_photos).
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import numpy as np
import traitlets as t
from PIL import Image

from vitviz.notebook import export
from vitviz.notebook.packing import PAYLOAD_LIMIT, colormap_base64, pack_maps, payload_bytes
from vitviz.render.overlays import COLORMAPS

HERE = Path(__file__).parent


class MapView(anywidget.AnyWidget):
    """The traits, redraw, export and static fallback every view shares; subclasses say what they draw."""

    _esm = HERE / "view.js"
    _css = HERE / "view.css"

    mode = t.Unicode("photo").tag(sync=True)  # which of view.js's modes draws this view
    colormap = t.Unicode("inferno").tag(sync=True)
    colours = t.Unicode().tag(sync=True)  # the colour map's 256 RGB entries, base64
    photos = t.List().tag(sync=True)  # per photo {"src": JPEG data URL, "box": [l, t, r, b] fractions}, sent once
    frame = t.Dict().tag(sync=True)  # the maps now drawn, on their one colour scale, and what they are
    error = t.Unicode("").tag(sync=True)  # why the last setting drew nothing, in one line
    values = t.List(t.Float(), read_only=True)  # Python only: the browser draws ``frame``

    SETTINGS: tuple[str, ...] = ("colormap",)  # what code and clicks set; a change redraws
    SUBJECT = "show"  # how the error for an unknown setting names the call
    _maps: list[np.ndarray] = []
    _batch = False  # set_state_checked sets several settings, then redraws once

    # what a subclass gives
    def check_settings(self, state: dict) -> None:
        """A one-line ValueError for any setting of ``state`` (every setting, as it would be) this view cannot take."""
        check_colormap(state["colormap"])

    def normalized(self, name: str, value):
        """A setting's value as the view keeps it (a patch as a tuple of ints)."""
        return value

    def current_maps(self) -> list[np.ndarray]:
        """The maps drawn now, one per photo (or tile), each 2-D; ValueError where this setting has none."""
        raise NotImplementedError

    def current_values(self, maps: list[np.ndarray]) -> np.ndarray:
        """``values``: the numbers the view's settings stand for, one per token."""
        raise NotImplementedError

    def label(self) -> str:
        """What the drawn maps show, in words: the legend's title."""
        raise NotImplementedError

    def frame_key(self) -> str:
        """The name of the current frame (view.js: frameKey builds the same from the synced settings)."""
        raise NotImplementedError

    def offline_frames(self, budget: int) -> dict[str, dict]:
        """The frames an exported file holds besides the current one, at most ``budget`` bytes of them."""
        return {self.frame_key(): self.frame}

    def static_layers(self) -> list[tuple[Image.Image, np.ndarray, tuple[float, float, float, float]]]:
        """Per photo drawn: (photo, its map, the map's box in the photo's pixels), for ``picture``."""
        raise NotImplementedError

    # shared
    def set_state_checked(self, **state) -> None:
        """Set several settings at once and redraw once; a bad or unknown one is a one-line ValueError, raised
        before anything is set (nothing changes)."""
        self.refuse_unknown(state)
        current = {name: getattr(self, name) for name in self.SETTINGS}
        self.check_settings(current | state)
        self._batch = True
        try:
            with self.hold_trait_notifications():
                for name, value in state.items():
                    setattr(self, name, self.normalized(name, value))
        finally:
            self._batch = False
        self._redraw()

    def refuse_unknown(self, state: dict, takes: str = "") -> None:
        """A one-line ValueError naming what ``state`` holds that is no setting of this view."""
        unknown = set(state) - set(self.SETTINGS)
        if unknown:
            takes = takes or ", ".join(self.SETTINGS)
            raise ValueError(f"{self.SUBJECT} takes {takes}; got {', '.join(sorted(unknown))}")

    def _validate_setting(self, proposal):
        """A trait's validator (one setting set alone, by code or a click): check_settings, as a TraitError."""
        name = proposal["trait"].name
        value = self.normalized(name, proposal["value"])
        try:
            self.check_settings({n: getattr(self, n) for n in self.SETTINGS} | {name: value})
        except ValueError as error:
            raise t.TraitError(str(error).splitlines()[0]) from None
        return value

    @t.validate("colormap")
    def _valid_colormap(self, proposal):
        return self._validate_setting(proposal)

    @t.observe(t.All)
    def _setting_changed(self, change) -> None:
        if change["name"] in self.SETTINGS and not self._batch:
            self._redraw()

    def _redraw(self) -> None:
        """Read the maps for the current settings and send them packed. A setting with no map (a backbone's
        class-specific map...) clears the maps, ``values`` and the frame, and says why in ``error``."""
        try:
            maps = self.current_maps()
            values = [float(v) for v in np.asarray(self.current_values(maps)).reshape(-1)]
            frame = pack_maps(maps) | {"label": self.label(), "key": self.frame_key()}
        except ValueError as error:
            self._maps = []
            self.set_trait("values", [])
            self.frame = {}
            self.error = str(error).splitlines()[0] or "this setting draws nothing"
            return
        self._maps = maps
        self.set_trait("values", values)
        self.colours = colormap_base64(self.colormap)
        self.frame = frame
        self.error = ""

    def _check_payload(self) -> None:
        """The bound on what one view sends: its synced state at most PAYLOAD_LIMIT bytes, else a one-line error."""
        size = payload_bytes(export.synced_state(self))
        if size > PAYLOAD_LIMIT:
            raise ValueError(
                f"this view would send {size / 1e6:.1f} MB to the browser, over its {PAYLOAD_LIMIT / 1e6:.0f} MB "
                "bound even with its photos shrunk: show fewer photos"
            )

    @property
    def maps(self) -> np.ndarray | list[np.ndarray]:
        """The maps drawn now: (photos, rows, cols) float32 where they share a shape, else a list (empty where the
        setting draws nothing)."""
        shapes = {m.shape for m in self._maps}
        return np.stack(self._maps) if len(shapes) == 1 else list(self._maps)

    def picture(self) -> Image.Image:
        """The current state as one picture: the photos with their maps side by side, the colour scale below."""
        return export.static_picture(self)

    def to_html(self, path: str | Path) -> Path:
        """Write the view as one self-contained, offline, interactive HTML file (notebook.export); returns the path."""
        return export.write_html(self, Path(path))

    def _repr_mimebundle_(self, **kwargs):
        """The widget, and a PNG of the current state for where no kernel draws it (nbviewer, GitHub, a saved file)."""
        found = super()._repr_mimebundle_(**kwargs)
        if found is None:
            return None
        data, metadata = found
        return data | {"image/png": export.png_base64(self.picture())}, metadata


def check_colormap(name: object) -> None:
    if not isinstance(name, str) or name not in COLORMAPS:
        raise ValueError(f"colormap must be one of {', '.join(COLORMAPS)}; got {name!r}")


def check_index(name: str, value: object, count: int, what: str = "") -> None:
    """A one-line ValueError unless ``value`` is an int (not a bool) in [0, count)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value < count:
        raise ValueError(f"{name} must be in [0, {count - 1}]{what}; got {value!r}")
