"""Vision-language models: where an answer's tokens look in the photo.

    loading.py     load_vlm(spec, precision): a save_pretrained folder or "hf:<id>", checked, into a VLM
    model.py       VLM: the transformers model and processor, prompts, greedy generation, the recorded pass, answer()
    answer.py      Answer: the answer's tokens, their attention on the image tokens, and what later methods re-run
    recording.py   the attention function (AttentionInterface) that records the answer rows, memory-light
    attention_rows.py  any text rows on any key columns, one pass on demand: who looks at a patch, a token's words
    layouts.py     per-family layouts (registry by model_type): image tokens' (tile, row, col) and the tiles
    tiles.py       Tile (token grid and box in the photo) and Frame (a canvas through resize, crop and pad)
    tiling.py      the layouts that cut a photo into tiles: LLaVA-NeXT / OneVision any-res, Idefics3 / SmolVLM splits
    errors.py      VLMError, the one error, one line
    maps.py        one token's map per tile and over the photo, image shares; the selection checks (token, layers, head)
    relevance.py   Chefer et al. 2021b's relevance of one answer token over the image tokens, during the backward pass
    lens.py        the logit lens on image tokens: each image token's top words at a chosen layer
    knockout.py    knock-outs: image tokens taken out of the answer's view in a map's order, log-probability curves
    passes.py      intercepted (a relevance or knock-out pass takes the layer calls over) and hooked: per thread
    tower.py       vision_tower: the vision tower as a vitviz ViT (CLIP, SigLIP, Idefics3's), Qwen's refused by name

``from vitviz.vlm import load_vlm`` is the way in: ``load_vlm(spec).answer(image, question)``.
"""

from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.knockout import KnockoutCurve, answer_logprob, knockout_curve, knockout_curves
from vitviz.vlm.layouts import FAMILIES
from vitviz.vlm.lens import LensWords, logit_lens
from vitviz.vlm.loading import load_vlm
from vitviz.vlm.maps import (
    ImageShares,
    answer_photo_map,
    image_shares,
    photo_map,
    tile_maps,
    token_attention,
    token_map,
)
from vitviz.vlm.model import VLM
from vitviz.vlm.relevance import image_relevance, relevance_row
from vitviz.vlm.tiles import Tile

__all__ = [
    "FAMILIES",
    "VLM",
    "Answer",
    "ImageShares",
    "KnockoutCurve",
    "LensWords",
    "Tile",
    "VLMError",
    "answer_logprob",
    "answer_photo_map",
    "image_relevance",
    "image_shares",
    "knockout_curve",
    "knockout_curves",
    "load_vlm",
    "logit_lens",
    "photo_map",
    "relevance_row",
    "tile_maps",
    "token_attention",
    "token_map",
]
