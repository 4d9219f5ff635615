"""AnswerView: a VLM's answer in the notebook (``vitviz.show(answer, photo)``): the answer's tokens to click, the
chosen token's map over the photo, its layers and heads, attention or relevance.

Settings (synced traitlets, set by clicks and code alike): ``token`` (an answer token's index, or None: the mean over
the answer), ``layer`` (a language-model layer, or None: the mean over every layer), ``head`` (an index or "mean")
and ``kind`` ("attention", what the answer's rows recorded, or "relevance", Chefer et al.'s relevance of the token's
logit, one backward pass per token, kept). ``values`` is the map now drawn, one float per image token in sequence
order, as vitviz.vlm computes it (``token_attention``, ``image_relevance``); relevance has no layer or head.

The browser gets the map drawn over the photo (vlm.photo_map: every tile in its box, overlapping tiles averaged) at
``MAP_SIDE`` cells a side, one byte each: 16 kB a token whatever the number of image tokens (2,304 or more).
"""

from __future__ import annotations

import numpy as np
import traitlets as t
from PIL import Image

from vitviz.notebook.base import MapView, check_colormap
from vitviz.notebook.export import Frames
from vitviz.notebook.packing import fit_photos
from vitviz.vlm import Answer, image_relevance, photo_map, tile_maps, token_attention
from vitviz.vlm.maps import answer_token, head_index, layer_range

MAP_SIDE = 128  # cells: the longest side of the map drawn over the photo, as sent
KINDS = ("attention", "relevance")
SETTINGS = ("token", "layer", "head", "kind", "colormap")


def _name(value: object) -> str:
    """A setting in a frame's key: None is "all" (view.js: keyPart)."""
    return "all" if value is None else str(value)


class AnswerView(MapView):
    """One answer over its photo; see the module's docstring."""

    SETTINGS = SETTINGS
    SUBJECT = "show(answer)"
    mode = t.Unicode("answer").tag(sync=True)
    token = t.Int(None, allow_none=True).tag(sync=True)
    layer = t.Int(None, allow_none=True).tag(sync=True)
    head = t.Union([t.Int(), t.Unicode()], default_value="mean").tag(sync=True)
    kind = t.Unicode("attention").tag(sync=True)
    # set once
    tokens = t.List().tag(sync=True)  # the answer's tokens as strings
    question = t.Unicode("").tag(sync=True)
    num_layers = t.Int(1).tag(sync=True)
    num_heads = t.Int(1).tag(sync=True)

    def __init__(self, answer: Answer, photo: Image.Image, **state):
        if not isinstance(photo, Image.Image):
            raise ValueError("show(answer, photo) takes the photo the answer is about, as a PIL image")
        if tuple(photo.size) != tuple(answer.photo_size):
            raise ValueError(
                f"the photo is {photo.size[0]}x{photo.size[1]}; the answer was given about a "
                f"{answer.photo_size[0]}x{answer.photo_size[1]} photo"
            )
        self.refuse_unknown(state)
        self._answer, self._photo = answer, photo.convert("RGB")
        self._relevance: dict[int | None, np.ndarray] = {}
        _, layers, heads, _ = answer.image_attention.shape
        self._layers, self._heads = layers, heads
        defaults = {name: self.trait_defaults(name) for name in SETTINGS} | {"token": 0}
        self.check_settings(defaults | state)  # before anything is made: a bad setting is one line
        self._batch = True  # the settings below draw once, in set_state_checked
        super().__init__(
            photos=fit_photos([self._photo], [{"box": [0.0, 0.0, 1.0, 1.0]}]),
            tokens=list(answer.tokens),
            question=answer.question,
            num_layers=layers,
            num_heads=heads,
            token=0,
        )
        self._batch = False
        self.set_state_checked(**state)
        self._check_payload()

    @property
    def answer(self) -> Answer:
        return self._answer

    @t.validate("token", "layer", "head", "kind")
    def _valid(self, proposal):
        return self._validate_setting(proposal)

    def check_settings(self, state: dict) -> None:
        token, layer, head, kind = state["token"], state["layer"], state["head"], state["kind"]
        for name, value in (("token", token), ("layer", layer)):
            if isinstance(value, bool) or not (value is None or isinstance(value, int | np.integer)):
                raise ValueError(f"{name} is an index or None; got {value!r}")
        answer_token(self._answer, token)
        if layer is not None:
            layer_range(layer, self._layers)
            if layer < 0:
                raise ValueError(f"layer must be in [0, {self._layers - 1}] or None (every layer); got {layer}")
        if head != "mean" and (isinstance(head, bool) or not isinstance(head, int | np.integer)):
            raise ValueError(f"head must be one of the {self._heads} heads or 'mean'; got {head!r}")
        head_index(None if head == "mean" else head, self._heads)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
        check_colormap(state["colormap"])

    def current_values(self, maps: list[np.ndarray]) -> np.ndarray:
        return self._values

    def current_maps(self) -> list[np.ndarray]:
        self._values = self.token_values(self.kind, self.token, self.layer, self.head)
        return [self.photo_map(self._values)]

    def token_values(self, kind: str, token: int | None, layer: int | None, head: int | str) -> np.ndarray:
        """One float per image token, in sequence order: the library's attention or relevance for these settings."""
        if kind == "relevance":
            if token not in self._relevance:
                self._relevance[token] = image_relevance(self._answer, token)
            return self._relevance[token]
        return token_attention(self._answer, token, layer, None if head == "mean" else head)

    def photo_map(self, values: np.ndarray) -> np.ndarray:
        """Per-image-token values drawn over the photo at MAP_SIDE cells a side (NaN where no tile covers it)."""
        width, height = self._answer.photo_size
        scale = min(1.0, MAP_SIDE / max(width, height))
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        return photo_map(self._answer.tiles, tile_maps(self._answer, values), self._answer.photo_size, size)

    def label(self) -> str:
        token = "every answer token" if self.token is None else f"token {self.token} {self.tokens[self.token]!r}"
        if self.kind == "relevance":
            return f"relevance of {token}"
        layer = "every layer" if self.layer is None else f"layer {self.layer}"
        head = "mean of heads" if self.head == "mean" else f"head {self.head}"
        return f"attention of {token} · {layer} · {head}"

    def frame_key(self) -> str:
        return key_of(self.kind, self.token, self.layer, self.head)

    def offline_frames(self, budget: int) -> dict[str, dict]:
        """The current frame; then attention at the current layer and head for every token, then every layer and
        head of the current token; relevance of the tokens already computed; while they fit in ``budget``."""
        table = Frames(self, budget)
        tokens = [None, *range(len(self.tokens))]
        layers = [None, *range(self.num_layers)]
        heads = ["mean", *range(self.num_heads)]
        for token in self._relevance:
            table.add(key_of("relevance", token, None, "mean"), [self.photo_map(self._relevance[token])])
        plan = [(token, self.layer, self.head) for token in tokens]
        plan += [(self.token, layer, head) for layer in layers for head in heads]
        for token, layer, head in plan:
            values = self.token_values("attention", token, layer, head)
            if not table.add(key_of("attention", token, layer, head), [self.photo_map(values)]):
                break
        return table.frames

    def static_layers(self):
        width, height = self._photo.size
        return [(self._photo, self._maps[0], (0.0, 0.0, float(width), float(height)))]


def key_of(kind: str, token: int | None, layer: int | None, head: int | str) -> str:
    """A frame's key (view.js: frameKey, in answer mode): relevance has no layer or head."""
    if kind == "relevance":
        return f"relevance|{_name(token)}"
    return f"answer|{_name(token)}|{_name(layer)}|{head}"
