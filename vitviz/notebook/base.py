"""MapView: what every notebook view shares, whatever it draws maps of (photos through a ViT, a VLM's answer).

One script (view.js) draws every view; ``mode`` says which. A view holds its analysis, reads the maps of its current
settings from it (``current_maps``), and sends them packed on one colour scale as ``frame`` (notebook.packing). Out of
the kernel it is one offline HTML file (``to_html``, notebook.export) and, in its mimebundle, a PNG of its last state
with its colour scale (``picture``), for nbviewer, GitHub and saved notebooks.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import numpy as np
import traitlets as t
from PIL import Image

from vitviz.notebook import export
from vitviz.notebook.packing import colormap_base64, pack_maps
from vitviz.render.overlays import COLORMAPS

HERE = Path(__file__).parent


class MapView(anywidget.AnyWidget):
    """The traits, redraw, export and static fallback every view shares; subclasses say what they draw."""

    _esm = HERE / "view.js"
    _css = HERE / "view.css"

    mode = t.Unicode("photo").tag(sync=True)  # which of view.js's modes draws this view
    colormap = t.Unicode("inferno").tag(sync=True)
    colours = t.Unicode().tag(sync=True)  # the colour map's 256 RGB entries, base64
    photos = t.List().tag(sync=True)  # per photo {"src": PNG data URL, "box": [l, t, r, b] fractions}, sent once
    frame = t.Dict().tag(sync=True)  # the maps now drawn, on their one colour scale, and what they are
    error = t.Unicode("").tag(sync=True)  # why the last setting drew nothing, in one line
    values = t.List(t.Float(), read_only=True)  # Python only: the browser draws ``frame``

    _maps: list[np.ndarray] = []

    @t.validate("colormap")
    def _valid_colormap(self, proposal):
        if proposal["value"] not in COLORMAPS:
            raise t.TraitError(f"colormap must be one of {', '.join(COLORMAPS)}; got {proposal['value']!r}")
        return proposal["value"]

    # what a subclass gives
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
    def _redraw(self) -> None:
        """Read the maps for the current settings and send them packed; a setting with no map sets ``error``."""
        try:
            maps = self.current_maps()
            values = self.current_values(maps)
        except ValueError as error:  # a method this model cannot give (a backbone's class-specific map...)
            self.error = str(error).splitlines()[0]
            return
        self._maps = maps
        self.set_trait("values", [float(v) for v in np.asarray(values).reshape(-1)])
        self.colours = colormap_base64(self.colormap)
        self.frame = pack_maps(maps) | {"label": self.label(), "key": self.frame_key()}
        self.error = ""

    @property
    def maps(self) -> np.ndarray | list[np.ndarray]:
        """The maps drawn now: (photos, rows, cols) float32 where they share a shape, else a list."""
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
