"""A notebook view out of the kernel: one offline HTML file (``write_html``) and one PNG (``static_picture``).

The HTML file holds the view's script and style inline (no ``http(s)://`` source, nothing fetched), its synced state,
and the frames it can draw without Python: for the current method and target, the current frame; "attention" in every
block and head; and, where the model's attentions were kept, what every patch attends to in the current block (the
current head, then the mean of heads, then each other head) for as long as the file stays under
packing.PAYLOAD_LIMIT (an answer view: notebook.answers). A setting whose frame is not in the file says so in the
view. The key of a frame (``MapView.frame_key``) is computed the same way by the script (view.js: frameKey).

The PNG is what a saved notebook shows where no kernel draws the widget: every photo with its map, side by side on
the one colour scale, and the scale with its values and what the maps show under them (render.overlays.with_scale).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from vitviz.notebook.packing import PAYLOAD_LIMIT, PHOTO_SIDE, pack_maps, payload_bytes
from vitviz.render.overlays import overlay, with_scale

if TYPE_CHECKING:
    from vitviz.notebook.base import MapView
    from vitviz.notebook.view import PhotoView

HERE = Path(__file__).parent


def synced_state(view: MapView) -> dict:
    """The view's synced traits that its script reads (every one but the widget machinery's), as JSON values."""
    state = {name: getattr(view, name) for name in view.keys if not name.startswith("_") and name not in _MACHINERY}
    return {name: list(value) if isinstance(value, tuple) else value for name, value in state.items()}


_MACHINERY = {"comm", "keys", "log", "layout", "tabbable", "tooltip"}


def key_of(
    method: str,
    layer: int,
    head: int | str,
    patch: tuple[int, int] | None,
    target: int | None = None,
    class_specific: bool = False,
) -> str:
    """``frame_key`` from the settings themselves (view.js: frameKey builds the same string). A class-specific
    method's key holds its target (a class index, "top" for each image's top class): another class is another frame."""
    if patch is not None:
        return f"patch|{layer}|{head}|{patch[0]},{patch[1]}"
    if method == "attention":
        return f"attention|{layer}|{head}"
    if class_specific:
        return f"{method}|{'top' if target is None else int(target)}"
    return method


class Frames:
    """Frames by key, added while they fit in ``budget`` bytes: an exported file's ``offline`` table."""

    def __init__(self, view: MapView, budget: int):
        self.frames = {view.frame_key(): view.frame}
        self.used, self.budget = payload_bytes(self.frames), budget

    def add(self, key: str, maps) -> bool:
        """Pack ``maps`` as frame ``key`` if it fits; False once the budget is spent."""
        if key in self.frames:
            return True
        frame = pack_maps(list(maps))
        size = payload_bytes({key: frame}) + 1
        if self.used + size > self.budget:
            return False
        self.frames[key], self.used = frame, self.used + size
        return True


def photo_frames(view: PhotoView, budget: int) -> dict[str, dict]:
    """A photo view's offline frames (see the module's docstring), at most ``budget`` bytes of them."""
    photos = view.analyses
    table = Frames(view, budget)
    add, frames = table.add, table.frames

    heads = ["mean", *range(photos.num_heads)]
    for layer in range(photos.num_layers):
        for head in heads:
            add(key_of("attention", layer, head, None), photos.maps("attention", layer, head, None, None))
    if any(a.attentions is None for a in photos.analyses):
        return frames  # a patch's attention would take a pass per patch
    rows, cols = photos.grid
    first = [view.head, *(h for h in heads if h != view.head)]
    for head in first:
        for r in range(rows):
            for c in range(cols):
                maps = photos.maps("attention", view.layer, head, (r, c), None)
                if not add(key_of("", view.layer, head, (r, c)), maps):
                    return frames
    return frames


def write_html(view: MapView, path: Path) -> Path:
    """The view as one HTML file: its style, state and frames inline, its script inline as a module that draws it
    with a stand-in for the kernel's model (it looks frames up instead of asking Python)."""
    state = synced_state(view)
    state["offline"] = view.offline_frames(PAYLOAD_LIMIT - payload_bytes(state))
    script = (HERE / "view.js").read_text(encoding="utf-8")
    style = (HERE / "view.css").read_text(encoding="utf-8")
    data = inline_json(state)
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vitviz view</title>
<style>{style}</style></head>
<body><div id="vitviz-view"></div>
<script type="application/json" id="vitviz-state">{data}</script>
<script type="module">
{script}
const state = JSON.parse(document.getElementById("vitviz-state").textContent);
render({{ model: offlineModel(state), el: document.getElementById("vitviz-view") }});
</script></body></html>
"""
    path.write_text(html, encoding="utf-8")
    return path


def inline_json(state: dict) -> str:
    """``state`` as JSON safe inside a <script> element: ``<``, ``>`` and ``&`` written as \\u escapes, so that no
    text of the view (a class name, a prompt, an answer token such as ``<!--<script>``) can end or comment out the
    element; JSON.parse reads the same strings back."""
    text = json.dumps(state, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def static_picture(view: MapView) -> Image.Image:
    """The photos with their maps side by side (each at most PHOTO_SIDE pixels a side), the colour scale below."""
    if not view.frame.get("maps"):  # this setting draws nothing (view.error says why): the photos as sent, alone
        return side_by_side([_sent_photo(p["src"]) for p in view.photos])
    low, high = float(view.frame["low"]), float(view.frame["high"])
    pictures = []
    for image, values, box in view.static_layers():
        scale = min(1.0, PHOTO_SIDE / max(image.size))
        small = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
        values = np.where(np.isnan(values), low, values)  # cells no token covers: the scale's low end
        scaled_box = (box[0] * scale, box[1] * scale, box[2] * scale, box[3] * scale)
        pictures.append(overlay(small, values, view.colormap, 0.6, scaled_box, (low, high) if high > low else None))
    return with_scale(side_by_side(pictures), view.colormap, low, high, view.frame.get("label", ""))


def side_by_side(pictures: list[Image.Image], gap: int = 8) -> Image.Image:
    whole = Image.new(
        "RGB", (sum(p.width for p in pictures) + gap * (len(pictures) - 1), max(p.height for p in pictures)), "white"
    )
    x = 0
    for picture in pictures:
        whole.paste(picture.convert("RGB"), (x, 0))
        x += picture.width + gap
    return whole


def _sent_photo(src: str) -> Image.Image:
    """A photo as the view sent it (a base64 data URL) -> the image."""
    return Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))


def png_base64(picture: Image.Image) -> str:
    """A picture as base64 PNG: the "image/png" entry of a mimebundle."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
