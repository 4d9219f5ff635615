"""Vision-language models: where an answer's tokens look in the photo.

    loading.py     load_vlm(spec, precision): a save_pretrained folder or "hf:<id>", checked, into a VLM
    model.py       VLM: the transformers model and processor, prompts, greedy generation, the recorded pass, answer()
    answer.py      Answer: the answer's tokens, their attention on the image tokens, and what later methods re-run
    recording.py   the attention function (AttentionInterface) that records the answer rows, memory-light
    layouts.py     per-family layouts (registry by model_type): image tokens' (tile, row, col) and the tiles
    tiles.py       Tile (token grid and box in the photo) and Frame (a canvas through resize, crop and pad)
    errors.py      VLMError, the one error, one line

``from vitviz.vlm import load_vlm`` is the way in: ``load_vlm(spec).answer(image, question)``.
"""

from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.layouts import FAMILIES
from vitviz.vlm.loading import load_vlm
from vitviz.vlm.model import VLM
from vitviz.vlm.tiles import Tile

__all__ = ["FAMILIES", "VLM", "Answer", "Tile", "VLMError", "load_vlm"]
