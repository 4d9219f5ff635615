"""The Ask page's cached results: the loaded vision-language model, its answers, and what each answer's views run.

Keys follow results.py's convention with the VLM's own typed keys: ``VLMKey`` (the spec as checked and the precision)
fixes the model, ``AnswerKey`` (the model's key, the photo's digest, the question, a given answer, the token limit)
fixes an answer. The model is kept by Streamlit's resource cache (two at most: loading one again takes seconds to
minutes), and so is its vision tower's checkpoint; answers, relevance, the logit lens, the knock-out curves and the
attention rows that a view asks for on demand (the prompt's tokens on chosen patches, the answer's on the words)
live in budget.STORE, bounded in bytes, and are passed unhashed (``_model``, ``_answer``, ``_photo``) since their
keys fix them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st
from PIL import Image

from vitviz.loading.checkpoint import save_checkpoint
from vitviz.vlm import VLM, Answer, VLMError, image_relevance, load_vlm
from vitviz.vlm.attention_rows import PatchAttention, WordAttention, patch_attention, word_attention
from vitviz.vlm.knockout import KnockoutCurve, knockout_curves, token_logprobs
from vitviz.vlm.lens import LensWords, logit_lens
from vitviz_dashboard.cache.budget import kept


@dataclass(frozen=True)
class VLMKey:
    """What fixes a loaded VLM: the spec load_vlm gets (a checked folder's real path, or "hf:<org>/<name>") and the
    precision (None: as stored, "fp32", "bf16", "auto")."""

    spec: str
    precision: str | None = None


@dataclass(frozen=True)
class AnswerKey:
    """What fixes an answer: the model, the photo (its digest), the question, the answer given (None: generated)
    and the most tokens it may generate."""

    model: VLMKey
    image: str
    question: str
    answer: str | None
    max_new_tokens: int


@st.cache_resource(max_entries=2, show_spinner=False)
def get_vlm(key: VLMKey) -> VLM:
    """The model, loaded once per process and key (a VLMError is not kept: the next run tries again)."""
    return load_vlm(key.spec, key.precision)


@kept()
def ask(key: AnswerKey, *, _model: VLM, _photo: Image.Image) -> Answer:
    """The answer and its recorded attention (VLM.answer), once per key: every control of the page reads it."""
    return _model.answer(_photo, key.question, answer=key.answer, max_new_tokens=key.max_new_tokens)


@kept(spinner="Computing the relevance (a backward pass)...")
def token_relevance(key: AnswerKey, token: int, *, _answer: Answer) -> np.ndarray:
    """Chefer et al.'s relevance of answer token ``token`` over the image tokens (N,)."""
    return image_relevance(_answer, token)


def answer_relevance(key: AnswerKey, *, _answer: Answer) -> np.ndarray:
    """The whole answer's relevance over the image tokens (N,): the mean over its tokens of each token's relevance
    (token_relevance, kept per token, so a token shown before costs nothing here); one backward pass per token."""
    rows = [token_relevance(key, token, _answer=_answer) for token in range(len(_answer.token_ids))]
    return np.mean(rows, axis=0, dtype=np.float64).astype(np.float32)


@kept(spinner="Recording which tokens look at the chosen patches (one pass of the model)...")
def patches_attention(key: AnswerKey, patches: tuple[int, ...], *, _answer: Answer) -> PatchAttention:
    """The attention of every prompt text token and every answer token on the image tokens ``patches``, per layer
    and head (vitviz.vlm.attention_rows)."""
    return patch_attention(_answer, list(patches))


@kept(spinner="Recording where the answer looks in the text (one pass of the model)...")
def words_attention(key: AnswerKey, *, _answer: Answer) -> WordAttention:
    """The attention of every answer token on every text position it can see, per layer and head."""
    return word_attention(_answer)


@kept(spinner="Knocking the chosen patches out of the answer's view...")
def knocked_out(key: AnswerKey, removed: tuple[int, ...], *, _answer: Answer) -> np.ndarray:
    """Each answer token's log-probability (T,), teacher-forced, with the image tokens ``removed`` blocked from the
    view of every position after the image (vitviz.vlm.knockout.token_logprobs; () : none removed)."""
    return token_logprobs(_answer, list(removed))


@kept(spinner="Reading the image tokens through the unembedding...")
def lens_words(key: AnswerKey, layer: int, k: int, deepstack: str = "before", *, _answer: Answer) -> LensWords:
    """The logit lens's top-``k`` words of every image token at hidden state ``layer``, read before or after
    Qwen3-VL's deepstack features are added (``deepstack``, vitviz.vlm.lens)."""
    return logit_lens(_answer, layer, k, deepstack)


@kept(spinner="Knocking image tokens out of the answer's view, step by step...")
def knockout(
    key: AnswerKey, scores: np.ndarray, token: int | None = None, *, _answer: Answer
) -> dict[str, KnockoutCurve]:
    """The log-probability of answer token ``token`` (None: the whole answer's, summed) as image tokens are knocked
    out in the order of ``scores`` (a map, one value per image token), most relevant first and least relevant first;
    keyed by the map's values and the token."""
    return knockout_curves(_answer, scores, token=token)


@dataclass(frozen=True)
class Tower:
    """A VLM's vision tower as a vitviz checkpoint's bytes (``data``), or ``reason``: why vitviz cannot read it."""

    data: bytes = b""
    reason: str = ""


@st.cache_resource(max_entries=2, show_spinner="Converting the vision tower to a vitviz ViT...")
def tower_checkpoint(key: VLMKey, _model: VLM) -> Tower:
    """The model's vision tower (VLM.vision_tower: float32, a backbone, the processor's preprocessing of the base
    image) saved as a vitviz checkpoint, once per model; or the VLMError's reason where the tower is not readable.
    Kept beside the model in the resource cache (as many as models): a large tower's bytes (CLIP-L's 1.2 GB) pass
    the byte store's share for one entry, and would be converted again in every run."""
    try:
        tower = _model.vision_tower()
    except VLMError as error:
        return Tower(reason=str(error))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tower.pt"
        save_checkpoint(path, tower, [], tower.transform)
        return Tower(data=path.read_bytes())
