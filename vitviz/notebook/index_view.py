"""IndexView: a dataset index in the notebook (``vitviz.show(index, where="label = 'cat'")``): a grid of the images
a SQL condition selects, each with its stored map on one colour scale; a click opens one image, drawn large.

Settings (synced traitlets): ``kind``, the stored map ("rollout", "readout" for the last block's heads averaged,
"readout:<head>", "relevance" where indexed with it: ``DatasetIndex.maps``), and ``image``, the opened image's place
in the grid. ``values`` is the opened image's map, one float per patch token in row-major order, as the index stores
it. The selection is fixed when the view is made (``where``, at most ``limit`` images, by image_id); the photos are
read back from the index's source (dataset.photos) and sent as thumbnails of at most ``THUMB_SIDE`` pixels.
"""

from __future__ import annotations

import numpy as np
import traitlets as t

from vitviz.dataset import DatasetIndex
from vitviz.dataset.photos import photo_reader
from vitviz.notebook.base import MapView, check_colormap, check_index
from vitviz.notebook.export import Frames
from vitviz.notebook.packing import fit_photos
from vitviz.preprocessing import Preprocessing, load_image

THUMB_SIDE = 160  # pixels: the longest side of a grid's photo as sent
MOST = 100  # images a grid shows at most


def map_kinds(index: DatasetIndex, some_id: int) -> list[str]:
    """The stored maps this index has: rollout, readout and each head's, and relevance where it was indexed."""
    heads = int(index.manifest["model"]["config"]["num_heads"])
    kinds = ["rollout", "readout", *(f"readout:{h}" for h in range(heads))]
    try:
        index.maps([some_id], "relevance")
        kinds.append("relevance")
    except (ValueError, KeyError, OSError):
        pass
    return kinds


class IndexView(MapView):
    """A grid of an index's selection with its maps; see the module's docstring."""

    SETTINGS = ("kind", "image", "colormap")
    SUBJECT = "show(index)"
    mode = t.Unicode("index").tag(sync=True)
    kind = t.Unicode("rollout").tag(sync=True)
    image = t.Int(0).tag(sync=True)
    kinds = t.List().tag(sync=True)
    where = t.Unicode("").tag(sync=True)

    def __init__(self, index: DatasetIndex, where: str = "true", limit: int = 24, **state):
        if not isinstance(where, str) or not where.strip():
            raise ValueError("where is a SQL condition on the images table, e.g. \"label = 'cat'\"")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MOST:
            raise ValueError(f"limit must be 1 to {MOST} images; got {limit!r}")
        self.refuse_unknown(state, "where, limit, kind, image and colormap")
        rows = index.query(f"SELECT * FROM images WHERE {where} ORDER BY image_id", limit=limit)
        if rows.empty:
            raise ValueError(f"no image of the index matches where {where!r}")
        self._index, self._ids = index, [int(i) for i in rows["image_id"]]
        read = photo_reader(index.manifest)
        preprocessing = Preprocessing.from_dict(index.manifest["model"]["preprocessing"])
        self._photos, entries = [], []
        for image_id, path, caption in zip(self._ids, rows["path"], _captions(rows), strict=True):
            photo = load_image(read(image_id, str(path)))
            photo.thumbnail((THUMB_SIDE, THUMB_SIDE))
            box = preprocessing.crop_box(*photo.size)
            self._photos.append((photo, box))
            fractions = [box[0] / photo.width, box[1] / photo.height, box[2] / photo.width, box[3] / photo.height]
            entries.append({"box": fractions, "caption": caption})
        self._kinds = map_kinds(index, self._ids[0])
        self.check_settings({"kind": "rollout", "image": 0, "colormap": "inferno"} | state)
        self._batch = True  # the settings below draw once, in set_state_checked
        super().__init__(
            photos=fit_photos([photo for photo, _ in self._photos], entries, THUMB_SIDE),
            kinds=self._kinds,
            where=where,
        )
        self._batch = False
        self.set_state_checked(**state)
        self._check_payload()

    @property
    def image_ids(self) -> list[int]:
        """The selected images' ids, in the grid's order."""
        return list(self._ids)

    @t.validate("kind", "image")
    def _valid(self, proposal):
        return self._validate_setting(proposal)

    def check_settings(self, state: dict) -> None:
        if state["kind"] not in self._kinds:
            raise ValueError(f"kind must be one of {', '.join(self._kinds)}; got {state['kind']!r}")
        check_index("image", state["image"], len(self._ids), " (a place in the grid)")
        check_colormap(state["colormap"])

    def current_maps(self) -> list[np.ndarray]:
        return list(self._index.maps(self._ids, self.kind).astype(np.float32))

    def current_values(self, maps: list[np.ndarray]) -> np.ndarray:
        return maps[self.image]

    def label(self) -> str:
        return f"{self.kind} · {len(self._ids)} images where {self.where}"

    def frame_key(self) -> str:
        return f"index|{self.kind}"

    def offline_frames(self, budget: int) -> dict[str, dict]:
        table = Frames(self, budget)
        for kind in self.kinds:
            if not table.add(f"index|{kind}", self._index.maps(self._ids, kind).astype(np.float32)):
                break
        return table.frames

    def static_layers(self):
        return [(photo, values, box) for (photo, box), values in zip(self._photos, self._maps, strict=True)]


def _captions(rows) -> list[str]:
    """Each row's caption: its id, and its label and prediction where the index has them."""
    found = []
    for _, row in rows.iterrows():
        parts = [f"#{int(row['image_id'])}"]
        for column in ("label", "predicted", "prediction"):
            if column in rows.columns and row[column] is not None and str(row[column]) != "nan":
                parts.append(f"{column} {row[column]}")
        found.append(" · ".join(parts))
    return found
