"""``Answer``: what a VLM answered about a photo, and where in the photo each of its tokens looked.

``VLM.answer`` (model.py) builds the prompt, generates the answer greedily (or takes the one given, teacher-forced),
then runs one forward pass of the whole sequence that records, layer by layer, the attention of the rows that predict
the answer's tokens (recording.py). Everything later methods need to run the model again stays on the Answer: the
model, the full inputs, the image tokens' positions and the layout.

``image_attention[i, l, h, j]`` is the weight that head h of language-model layer l gives, from the position just
before answer token i (whose output predicts it), to the j-th image token in sequence order.

Every token has a string: an id its tokenizer has none for (``convert_ids_to_tokens`` gives None; a vocabulary padded
past its tokenizer, as Qwen's embedding matrix is, has such ids) is written "<id 151665>" (``token_string``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.vlm.tiles import Tile

if TYPE_CHECKING:
    from vitviz.vlm.model import VLM


@dataclass
class Answer:
    """One answer and its attention on the image. Arrays are numpy; shapes use n answer tokens, L layers, H heads,
    N image tokens."""

    question: str
    text: str  # the answer decoded (special tokens skipped)
    token_ids: list[int]  # the answer's tokens only
    tokens: list[str]  # each token's string
    image_attention: np.ndarray  # float32 (n, L, H, N)
    image_share: np.ndarray  # float32 (n, L, H): the row's attention on all image tokens
    first_share: np.ndarray  # float32 (n, L, H): on the first token that is not an image token (the attention sink)
    logprobs: np.ndarray  # float32 (n,): log-probability of each answer token given the tokens before it
    image_token_grid: np.ndarray  # int64 (N, 3): (tile, row, col) of each image token
    tiles: list[Tile]  # per tile: its token grid (rows, cols) and its box in the photo's pixels
    photo_size: tuple[int, int]  # (width, height) of the photo
    generated: bool  # True when the model generated the answer, False when it was given
    # what later methods need to run the model again
    model: VLM = field(repr=False)
    inputs: dict[str, torch.Tensor] = field(repr=False)  # the processor's outputs for prompt + answer
    image_positions: np.ndarray  # int64 (N,): where the image tokens stand in the sequence
    sink: int  # position of the attention sink: the first token that is not an image token
    answer_start: int  # position of the first answer token

    def __post_init__(self) -> None:
        self.tokens = [token_string(i, t) for i, t in zip(self.token_ids, self.tokens, strict=True)]

    @property
    def input_ids(self) -> torch.Tensor:
        return self.inputs["input_ids"]

    @property
    def rows(self) -> np.ndarray:
        """The positions whose outputs predict the answer's tokens (one before each)."""
        return np.arange(len(self.token_ids)) + self.answer_start - 1

    @property
    def text_share(self) -> np.ndarray:
        """float32 (n, L, H): the attention on the other text tokens (neither image tokens nor the sink)."""
        return np.clip(1.0 - self.image_share - self.first_share, 0.0, 1.0)


def token_string(token_id: int, token: str | None) -> str:
    """A token's string as the tokenizer gives it, or "<id N>" for an id the tokenizer has no string for."""
    return token if isinstance(token, str) else f"<id {int(token_id)}>"
