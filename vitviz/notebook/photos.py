"""The analysis a photo view holds: every image through the model once (analysis.analyse_image), and each map the
view can draw read from it, cached, so that a click, a head or a layer answers without running the model.

    photos = PhotoAnalyses(model, [image], prompts=None)
    photos.maps("attention", layer=2, head="mean", patch=None, target=None)   # (B, rows, cols) float32
    photos.maps("rollout", ...)                      # from explain.method_maps, computed once per (method, target)
    photos.maps(..., patch=(1, 2))                   # what patch (1, 2) attends to in block ``layer``, per image

"attention" is what the tokens the head reads attend to in one block and head (the Photo page's "Attention" tab:
``ImageAnalysis.readout_attention``); every other name is a method of explain.registry, drawn as
``method_maps`` gives it (its layer and head do not apply). A patch reads the block's kept attentions
(``analysis.patch_attention``); where the model's attentions were too large to keep (``max_attention_bytes``) it runs
a pass that stops after that block, once per (layer, patch); the patch rows are kept up to PATCH_CACHE_BYTES (the least
recently used dropped first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from functools import cached_property

import numpy as np
import torch
from PIL import Image

from vitviz import analysis as photo_analysis
from vitviz.explain.registry import METHODS, get_method, method_maps
from vitviz.model import Swin, ViT

ATTENTION = "attention"  # the view's own method: the readout's attention in one block and head
METHOD_NAMES: tuple[str, ...] = (ATTENTION, *METHODS)
MAX_ATTENTION_BYTES = 512 * 2**20  # per image: above this the attentions are not kept, a patch click runs a pass
PATCH_CACHE_BYTES = 64 * 2**20  # the patch rows kept (every image, block and patch together), least recent dropped
Head = int | str  # a head's index, or "mean"


def check_images(images: Image.Image | Sequence[Image.Image]) -> list[Image.Image]:
    """One PIL image or several -> a list of RGB images; anything else is a one-line ValueError."""
    found = [images] if isinstance(images, Image.Image) else list(images) if isinstance(images, Sequence) else None
    if not found or not all(isinstance(image, Image.Image) for image in found):
        raise ValueError("show takes a PIL image or a list of PIL images (vitviz.load_image reads a file)")
    return [image.convert("RGB") for image in found]


def check_shown_model(model: torch.nn.Module) -> None:
    """A one-line ValueError for a model the photo view does not draw: a Swin, a video model, a module of another
    library; checked before the photos, so a clip given to a video model is told where clips go."""
    if isinstance(model, Swin):
        raise ValueError(
            "vitviz.show draws a ViT's maps; a Swin's maps across windows and stages are on the dashboard's Photo "
            "page and in vitviz.explain (rollout_across_stages, relevance_across_stages): the view does not draw "
            "them yet"
        )
    if not isinstance(model, ViT):
        raise ValueError(
            f"vitviz.show draws a vitviz ViT (vitviz.load_model or vitviz.from_timm etc. make one); got "
            f"{type(model).__name__}"
        )
    if getattr(model.config, "is_video", False):
        raise ValueError(
            "vitviz.show draws image models; this is a video model: its maps over a clip are the dashboard's Video "
            "page and vitviz.explain.video_rollout (vitviz.load_video reads the clip)"
        )


class PhotoAnalyses:
    """Several photos through one ViT, and every map of them the view draws, each computed once."""

    def __init__(self, model: torch.nn.Module, images: Sequence[Image.Image], precision: str = "fp32"):
        check_shown_model(model)
        if model.transform is None:
            raise ValueError("this model has no preprocessing: set model.transform = vitviz.Preprocessing(...)")
        self.model = model.eval()
        self.images = list(images)
        self.precision = precision
        self.analyses = [
            photo_analysis.analyse_image(model, image, precision, MAX_ATTENTION_BYTES) for image in self.images
        ]
        self._method_cache: dict[tuple[int, str, int | None], np.ndarray] = {}  # (image, method, target) -> map
        # (image, layer, patch) -> its heads' rows; least recently used first, at most PATCH_CACHE_BYTES together
        self._patch_cache: OrderedDict[tuple[int, int, tuple[int, int]], np.ndarray] = OrderedDict()
        self._patch_bytes = 0

    @property
    def grid(self) -> tuple[int, int]:
        return self.analyses[0].grid_size

    @property
    def num_layers(self) -> int:
        return self.model.config.num_layers

    @property
    def num_heads(self) -> int:
        return self.model.config.num_heads

    @property
    def class_names(self) -> list[str]:
        return list(self.model.class_names)

    @cached_property
    def readout_attention(self) -> np.ndarray:
        """(B, layers, heads, rows, cols) float32: what the head's tokens attend to, every block and head."""
        return np.stack([a.readout_attention.cpu().numpy() for a in self.analyses]).astype(np.float32)

    def boxes(self) -> list[tuple[float, float, float, float]]:
        """Each photo's crop box as fractions (left, top, right, bottom) of its width and height."""
        return [
            (b[0] / im.width, b[1] / im.height, b[2] / im.width, b[3] / im.height)
            for b, im in zip((a.box for a in self.analyses), self.images, strict=True)
        ]

    def predictions(self, top: int = 5) -> list[list[tuple[str, float]]]:
        """Each image's ``top`` classes with their probabilities, most likely first; empty for a backbone."""
        names = self.class_names
        found = []
        for a in self.analyses:
            order = np.argsort(-a.probabilities)[:top] if a.probabilities.size else []
            found.append([(names[i], float(a.probabilities[i])) for i in order])
        return found

    def target_index(self, target: int | str | None) -> int | None:
        """A class index, a class name (a prompt) -> its index; None stays None (each image's top class)."""
        if isinstance(target, bool) or not (target is None or isinstance(target, int | np.integer | str)):
            raise ValueError(f"target is a class index, a class name or None; got {target!r}")
        if target is None or isinstance(target, int | np.integer):
            if target is not None and not 0 <= int(target) < len(self.class_names):
                raise ValueError(f"target must be in [0, {len(self.class_names) - 1}]; got {target}")
            return None if target is None else int(target)
        if target not in self.class_names:
            raise ValueError(f"target {target!r} is none of the classes; choose from {', '.join(self.class_names)}")
        return self.class_names.index(target)

    def check(self, method: str, layer: int, head: Head, patch: tuple[int, int] | None) -> None:
        """A one-line ValueError for a method, layer, head or patch this model has not."""
        if method not in METHOD_NAMES:
            raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHOD_NAMES)}")
        if isinstance(layer, bool) or not isinstance(layer, int | np.integer) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers - 1}]; got {layer!r}")
        if head != "mean" and not (isinstance(head, int) and not isinstance(head, bool) and 0 <= head < self.num_heads):
            raise ValueError(f"head must be 'mean' or in [0, {self.num_heads - 1}]; got {head!r}")
        rows, cols = self.grid
        if patch is not None and not (0 <= patch[0] < rows and 0 <= patch[1] < cols):
            raise ValueError(f"patch must be (row, col) inside the {rows}x{cols} grid; got {tuple(patch)}")

    def maps(
        self, method: str, layer: int, head: Head, patch: tuple[int, int] | None, target: int | str | None
    ) -> np.ndarray:
        """Every image's map now drawn, (B, rows, cols) float32: the patch's attention where a patch is chosen, else
        ``method``'s map (see the module's docstring)."""
        self.check(method, layer, head, patch)
        if patch is not None:
            query = (int(patch[0]), int(patch[1]))
            per_head = np.stack([self._patch(i, layer, query) for i in range(len(self.images))])
            return _pick_head(per_head, head)
        if method == ATTENTION:
            return _pick_head(self.readout_attention[:, layer], head)
        index = self.target_index(target)
        return np.stack([self._method(i, method, index) for i in range(len(self.images))])

    def _patch(self, i: int, layer: int, patch: tuple[int, int]) -> np.ndarray:
        key, cache = (i, layer, patch), self._patch_cache
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        found = photo_analysis.patch_attention(self.model, self.analyses[i], layer, patch).cpu().numpy()
        cache[key] = found = found.astype(np.float32)
        self._patch_bytes += found.nbytes
        while len(cache) > 1 and self._patch_bytes > PATCH_CACHE_BYTES:
            self._patch_bytes -= cache.popitem(last=False)[1].nbytes  # the least recently used
        return found

    @property
    def patch_cache_bytes(self) -> int:
        """What the kept patch rows weigh now (at most PATCH_CACHE_BYTES, or one entry)."""
        return sum(v.nbytes for v in self._patch_cache.values())

    def _method(self, i: int, method: str, target: int | None) -> np.ndarray:
        key = (i, method, target)
        if key not in self._method_cache:
            if get_method(method).class_specific and not self.class_names:
                raise ValueError(f"{method!r} explains a class; this model is a backbone (no classes)")
            found = method_maps(self.model, self.analyses[i].pixel_values, [method], target, self.precision)
            self._method_cache[key] = found.maps[method].cpu().numpy().astype(np.float32)
        return self._method_cache[key]


def _pick_head(per_head: np.ndarray, head: Head) -> np.ndarray:
    """(B, heads, rows, cols) -> (B, rows, cols): one head, or the mean over heads."""
    return per_head.mean(axis=1) if head == "mean" else per_head[:, head]
