"""The attention of any text rows on any key columns, one recorded pass on demand: what LVLM-Interpret shows both
ways, memory-light.

``VLM.answer`` records the answer's rows over the image tokens only. Two views need more, and share one core,
``attention_rows(answer, rows, columns)``: one forward pass of the Answer's whole sequence (no cache) under a
``Recording`` (recording.py: a context variable, so sessions sharing the model never mix) that keeps, per
language-model layer and head, the weights of the query ``rows`` on the key ``columns`` only, (R, L, H, C) float32,
never a row over every key:

- ``patch_attention(answer, patches)``: which tokens look at some patches of the photo. The rows are every text
  token of the prompt (the chat template's tokens and the question's words; not the image tokens) and every answer
  row, the columns the chosen image tokens.
- ``word_attention(answer)``: where the answer's tokens look in the text. The rows are the answer's rows, the
  columns every text position before the last answer row (the prompt's words and the answer's earlier tokens).

As in ``Answer.image_attention``, answer token i is read at the row that predicts it (the position before it); a
prompt token at its own position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.recording import Recording, recording

MAX_VALUES = 64 * 2**20  # rows x layers x heads x columns kept by one pass (256 MB of float32)


def attention_rows(answer: Answer, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """float32 (R, L, H, C): the attention of query positions ``rows`` on key positions ``columns`` in every
    language-model layer and head, from one forward pass of the Answer's sequence (prompt and answer)."""
    from vitviz.vlm.model import model_errors

    vlm = answer.model
    length = int(answer.input_ids.shape[1])
    rows, columns = (np.asarray(v, dtype=np.int64).reshape(-1) for v in (rows, columns))
    for name, values in (("rows", rows), ("columns", columns)):
        if values.size and (values.min() < 0 or values.max() >= length):
            raise VLMError(f"{name} must be positions of the sequence, 0 to {length - 1}")
    size = rows.size * vlm.num_layers * answer.image_attention.shape[2] * columns.size
    if size > MAX_VALUES:
        raise VLMError(
            f"{rows.size} rows x {columns.size} columns over {vlm.num_layers} layers are {size:,} weights, above the "
            f"limit of {MAX_VALUES:,}: choose fewer patches"
        )
    layers = {id(module): index for index, module in enumerate(vlm.attention_modules)}
    record = Recording(
        torch.as_tensor(rows),
        torch.zeros(0, dtype=torch.long),  # no image columns: only ``columns`` are kept
        layers,
        answer.sink,
        columns=torch.as_tensor(columns),
    )
    with torch.inference_mode(), recording(record), model_errors("the pass that records attention rows"):
        vlm.model(**answer.inputs, use_cache=False, logits_to_keep=1)
    missing = sorted(set(layers.values()) - set(record.column_weights))
    if missing:
        raise VLMError(f"the attention of layers {', '.join(map(str, missing))} was not recorded")
    return torch.stack([record.column_weights[layer] for layer in sorted(record.column_weights)], dim=1).numpy()


def text_positions(answer: Answer, end: int) -> np.ndarray:
    """int64: the positions before ``end`` that hold no image token, in order."""
    positions = np.arange(end, dtype=np.int64)
    return positions[~np.isin(positions, answer.image_positions)]


def position_words(answer: Answer, positions: np.ndarray) -> list[str]:
    """Each position's token, decoded alone (special tokens as the tokenizer writes them)."""
    ids = answer.input_ids[0, torch.as_tensor(np.asarray(positions, dtype=np.int64))].tolist()
    tokenizer = answer.model.tokenizer
    return [tokenizer.decode([i]) or str(tokenizer.convert_ids_to_tokens(i) or f"<id {i}>") for i in ids]


@dataclass(frozen=True)
class PatchAttention:
    """Which tokens look at chosen image tokens: ``prompt`` (P,) positions of the prompt's text tokens and their
    ``prompt_words``; ``prompt_weights`` float32 (P, L, H, K) and ``answer_weights`` float32 (n, L, H, K): the
    attention of each prompt token (at its own row) and of each answer token (at the row that predicts it) on each
    of the ``patches`` (K indices into the image tokens)."""

    patches: np.ndarray
    prompt: np.ndarray
    prompt_words: list[str]
    prompt_weights: np.ndarray
    answer_weights: np.ndarray


def patch_attention(answer: Answer, patches: np.ndarray | list[int]) -> PatchAttention:
    """The attention of every prompt text token and every answer token on the image tokens ``patches`` (indices 0
    to N - 1), per layer and head: one recorded pass."""
    count = len(answer.image_positions)
    patches = np.unique(np.asarray(patches, dtype=np.int64).reshape(-1))
    if not patches.size or patches.min() < 0 or patches.max() >= count:
        raise VLMError(f"patches must be one or more image tokens' indices, 0 to {count - 1}")
    prompt = text_positions(answer, answer.answer_start)
    rows = np.union1d(prompt, answer.rows)
    weights = attention_rows(answer, rows, answer.image_positions[patches])
    return PatchAttention(
        patches,
        prompt,
        position_words(answer, prompt),
        weights[np.searchsorted(rows, prompt)],
        weights[np.searchsorted(rows, answer.rows)],
    )


@dataclass(frozen=True)
class WordAttention:
    """Where the answer's tokens look in the text: ``positions`` (C,) the text positions before the last answer row
    (the prompt's words, then the answer's earlier tokens) and their ``words``; ``weights`` float32 (n, L, H, C): the
    attention of each answer token (at the row that predicts it) on each of them (0 where a row cannot see one)."""

    positions: np.ndarray
    words: list[str]
    weights: np.ndarray


def word_attention(answer: Answer) -> WordAttention:
    """The attention of every answer token on every text position it can see, per layer and head: one recorded
    pass."""
    if not len(answer.token_ids):
        raise VLMError("the answer has no token")
    positions = text_positions(answer, int(answer.rows[-1]) + 1)
    weights = attention_rows(answer, answer.rows, positions)
    return WordAttention(positions, position_words(answer, positions), weights)
