"""Per-family layouts: which image tokens a processor's output holds, their (tile, row, col), and the tiles' boxes.

Each supported ``model_type`` has a ``Family`` record in ``FAMILIES``: its layout function (processor outputs ->
``ImageLayout``), and how the answer's tokens are marked in the per-token inputs a teacher-forced pass extends
(PaliGemma's answer is its causal "suffix", token type 1; everywhere else 0). Any other model type is refused with
a message that names the supported ones (``family_for``).

A layout reads the processor's own outputs (Qwen's ``image_grid_thw``, the pixel tensor's size, LLaVA-NeXT's
``image_sizes``, Idefics3's split rows and columns) and its settings (resize, crop, pad), never guesses from the
count alone, and checks that it accounts for every image-token position of the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vitviz.vlm.errors import VLMError
from vitviz.vlm.tiles import Frame, ImageLayout, LayoutInputs, Tile, setting, shortest_edge_size
from vitviz.vlm.tiling import anyres_layout, onevision_layout, split_layout


@dataclass(frozen=True)
class Family:
    model_type: str
    layout: Callable[[LayoutInputs], ImageLayout]
    answer_token_types: dict[str, int] = field(default_factory=lambda: {"token_type_ids": 0, "mm_token_type_ids": 0})
    chat_template: bool = True  # False: the processor builds the prompt from the question itself (PaliGemma)


def _patch_size(config: Any) -> int:
    return int(config.vision_config.patch_size)


def _whole_image(tiles: list[Tile], slots: int, family: str) -> ImageLayout:
    """The layout of tiles read one after the other, every position an image token; refused when the counts differ."""
    count = sum(tile.count for tile in tiles)
    if count != slots:
        raise VLMError(
            f"the {family} layout expects {count} image tokens ({' + '.join(str(t.count) for t in tiles)}) but the "
            f"prompt holds {slots}: the processor and the model's config disagree"
        )
    grid = np.concatenate([tile.token_grid(index) for index, tile in enumerate(tiles)])
    return ImageLayout(tiles, grid, np.ones(slots, dtype=bool))


def _resize_crop(frame: Frame, image_processor: Any) -> Frame:
    """The CLIP / LLaVA processor's steps: pad to a square (LLaVA's ``do_pad``), resize, centre crop."""
    if getattr(image_processor, "do_pad", False):
        frame = frame.pad_to_square()
    if getattr(image_processor, "do_resize", True):
        size = image_processor.size
        edge = setting(size, "shortest_edge")
        if edge:
            frame = frame.resize(*shortest_edge_size(frame.width, frame.height, int(edge)))
        else:
            frame = frame.resize(setting(size, "width"), setting(size, "height"))
    if getattr(image_processor, "do_center_crop", False):
        crop = image_processor.crop_size
        frame = frame.center_crop(setting(crop, "width"), setting(crop, "height"))
    return frame


def llava_layout(x: LayoutInputs) -> ImageLayout:
    """LLaVA-1.5: one tile, the patch grid of the resized and cropped (or padded) photo; with the "full" feature
    strategy the vision tower's [CLS] comes first, outside the grid."""
    height, width = x.inputs["pixel_values"].shape[-2:]
    patch = _patch_size(x.config)
    frame = _resize_crop(Frame.photo(*x.photo_size), x.processor.image_processor)
    tile = frame.tile((height // patch, width // patch))
    extra = x.slots - tile.count
    if extra not in (0, 1):
        return _whole_image([tile], x.slots, "llava")  # refused, with the counts
    grid = np.concatenate([np.array([[0, -1, -1]] * extra, dtype=np.int64).reshape(-1, 3), tile.token_grid(0)])
    return ImageLayout([tile], grid, np.ones(x.slots, dtype=bool))


def qwen_layout(x: LayoutInputs) -> ImageLayout:
    """Qwen2-VL, Qwen2.5-VL, Qwen3-VL: the photo resized (never cropped) to multiples of patch x merge, read as
    ``image_grid_thw`` patches merged merge x merge into one token each."""
    frames, rows, cols = (int(v) for v in x.inputs["image_grid_thw"][0])
    merge = int(x.config.vision_config.spatial_merge_size)
    tile = Frame.photo(*x.photo_size).tile((rows // merge, cols // merge))
    return _whole_image([tile] * frames, x.slots, "Qwen")


def squashed_layout(x: LayoutInputs) -> ImageLayout:
    """PaliGemma: the photo squashed to the vision tower's square, read as its patch grid."""
    height, width = x.inputs["pixel_values"].shape[-2:]
    patch = _patch_size(x.config)
    return _whole_image([Frame.photo(*x.photo_size).tile((height // patch, width // patch))], x.slots, "PaliGemma")


def gemma3_layout(x: LayoutInputs) -> ImageLayout:
    """Gemma 3: the photo squashed to the tower's square, its patch grid average-pooled to ``mm_tokens_per_image``
    tokens (16 x 16). vitviz asks without pan and scan (the processor's default), so there is one tile."""
    side = math.isqrt(int(x.config.mm_tokens_per_image))
    if x.inputs["pixel_values"].shape[0] != 1:
        raise VLMError("Gemma 3's processor made pan-and-scan crops; vitviz reads the whole photo only")
    return _whole_image([Frame.photo(*x.photo_size).tile((side, side))], x.slots, "Gemma 3")


FAMILIES: dict[str, Family] = {
    "llava": Family("llava", llava_layout),
    "llava_next": Family("llava_next", anyres_layout),
    "llava_onevision": Family("llava_onevision", onevision_layout),
    "qwen2_vl": Family("qwen2_vl", qwen_layout),
    "qwen2_5_vl": Family("qwen2_5_vl", qwen_layout),
    "qwen3_vl": Family("qwen3_vl", qwen_layout),
    # the answer is PaliGemma's "suffix", attended causally (token type 1), after the processor's own prompt
    "paligemma": Family("paligemma", squashed_layout, {"token_type_ids": 1}, chat_template=False),
    "idefics3": Family("idefics3", split_layout),
    "smolvlm": Family("smolvlm", split_layout),
    "gemma3": Family("gemma3", gemma3_layout),
}


def family_for(model_type: object) -> Family:
    """The Family of ``model_type``, or a VLMError that names the supported ones."""
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise VLMError(
            f"vision-language models of type {str(model_type)[:80]!r} are not supported; supported types: "
            f"{', '.join(sorted(FAMILIES))}"
        )
    return family
