"""Shared pieces of the VLM tests: the tiny families that vitviz.vlm supports, a seeded random photo, the eager
transformers model of a tiny folder (the reference the recorded passes are checked against), and a teacher-forced
answer on that photo."""

from pathlib import Path

import numpy as np
from PIL import Image
from tiny_vlms import FAMILIES
from transformers import AutoModelForImageTextToText

from vitviz.vlm import FAMILIES as SUPPORTED
from vitviz.vlm import VLM

MODEL_TYPES = {"paligemma2": "paligemma"}  # tiny families named apart from their model_type
TESTED = [family for family in FAMILIES if MODEL_TYPES.get(family, family) in SUPPORTED]
QUESTION = "what is in the picture ?"


def photo(width: int = 70, height: int = 50, seed: int = 0) -> Image.Image:
    """A (height, width) RGB photo of seeded uniform noise."""
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def eager_model(folder: Path):
    """The folder's transformers model with eager attention, in eval mode."""
    return AutoModelForImageTextToText.from_pretrained(folder, attn_implementation="eager").eval()


def red_cat(vlm: VLM):
    """The VLM's teacher-forced answer "a red cat" to QUESTION on the default photo."""
    return vlm.answer(photo(), QUESTION, answer="a red cat")
