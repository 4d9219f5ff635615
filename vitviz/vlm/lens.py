"""The logit lens on image tokens (Neo et al. 2024, "Towards interpreting visual information processing in VLMs"):
which words the language model reads in each image token at a chosen layer.

Each image token's hidden state after ``layer`` language-model layers (0: the input of the first layer, the
embeddings with the image features in place; L, the number of layers: the last layer's output) goes through the
language model's final norm and the unembedding (``lm_head``, and the final logit soft-cap where the family has one),
as the model's own last layer does; the softmax over the vocabulary gives each token's top-k words. At layer L this
is the model's own prediction at the image positions.

Deepstack (Qwen3-VL). After each of its first few layers, Qwen3-VL adds features of its vision tower's intermediate
blocks to the image positions' hidden states. By default (``deepstack="before"``) the lens reads a layer's output
before they are added, the hidden state ``output_hidden_states`` reports; ``deepstack="after"`` reads the sum, what
the next layer reads (after the last layer: what the final norm reads). At the layers without deepstack features the
two are the same; a family without deepstack refuses "after".

One forward pass runs up to the chosen layer only: a hook keeps the image positions' hidden states there and stops
the pass (``passes.hooked``: in this thread's pass only, since sessions share the model). The vocabulary's logits
are formed LENS_BLOCK_TOKENS image tokens at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.maps import tile_maps
from vitviz.vlm.passes import hooked

LENS_BLOCK_TOKENS = 256  # image tokens whose vocabulary logits are formed at once
MAX_TOP_K = 100
Deepstack = Literal["before", "after"]
DEEPSTACK = ("before", "after")  # the hidden state read where Qwen3-VL adds deepstack features: before or after


@dataclass(frozen=True)
class LensWords:
    """The logit lens at one layer: per image token (in sequence order, N of them) its top-k token ``ids`` (int64
    (N, k)), ``words`` (each id decoded alone, object (N, k)) and ``probabilities`` (float32 (N, k)), most probable
    first; ``top_words`` holds each tile's (rows, cols) grid of its tokens' top-1 words ("" where no token);
    ``deepstack``: read before or after Qwen3-VL's deepstack features are added (the module's docstring)."""

    layer: int
    ids: np.ndarray
    words: np.ndarray
    probabilities: np.ndarray
    top_words: list[np.ndarray]
    deepstack: Deepstack = "before"


class _Reached(Exception):
    """Raised by the hook once the chosen layer's hidden states are kept: the rest of the pass is not needed."""


def lens_layer(answer: Answer, layer: int) -> int:
    """``layer`` checked as a hidden-state index, 0 to L (negative counts from the end: -1 is L)."""
    count = answer.model.num_layers + 1
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -count <= layer < count:
        raise VLMError(f"layer must be a hidden state of the language model, 0 to {count - 1}; got {layer!r}")
    return int(layer) % count


def has_deepstack(answer: Answer) -> bool:
    """Whether the model adds deepstack features of its vision tower to the decoder's hidden states (Qwen3-VL)."""
    vision = getattr(answer.model.model.config, "vision_config", None)
    return bool(getattr(vision, "deepstack_visual_indexes", None))


def lens_deepstack(answer: Answer, deepstack: str) -> Deepstack:
    """``deepstack`` checked: "before", or "after" for a model that adds deepstack features."""
    if deepstack not in DEEPSTACK:
        raise VLMError(f"deepstack must be one of {', '.join(DEEPSTACK)}; got {deepstack!r}")
    if deepstack == "after" and not has_deepstack(answer):
        raise VLMError(f"{answer.model.model_type} adds no deepstack features; deepstack='after' is for Qwen3-VL")
    return deepstack


def image_hidden_states(answer: Answer, layer: int, deepstack: Deepstack = "before") -> torch.Tensor:
    """The image tokens' hidden states after ``layer`` language-model layers (before the final norm; with
    ``deepstack="after"``, with Qwen3-VL's deepstack features added, as the next layer reads them): (N, width), from
    a pass that stops there."""
    layer = lens_layer(answer, layer)
    deepstack = lens_deepstack(answer, deepstack)
    vlm = answer.model
    blocks = vlm.language_model.layers
    positions = torch.as_tensor(answer.image_positions, device=vlm.device)
    kept: list[torch.Tensor] = []

    def keep(hidden: torch.Tensor) -> None:
        kept.append(hidden[0, positions].detach())
        raise _Reached

    def read(_module, args, kwargs) -> None:
        keep(args[0] if args else kwargs["hidden_states"])

    if layer == 0 or deepstack == "after":  # what the next layer reads (after the last one: the final norm)
        watch = hooked(blocks[layer] if layer < len(blocks) else vlm.language_model.norm, read, pre=True)
    else:
        watch = hooked(blocks[layer - 1], lambda _m, _a, out: keep(out[0] if isinstance(out, tuple) else out))
    try:  # the hook acts in this thread's pass only: another session's pass through the shared model runs whole
        with torch.inference_mode(), watch:
            vlm.model(**answer.inputs, use_cache=False, logits_to_keep=1)
    except _Reached:
        pass
    if not kept:
        raise VLMError(f"the pass never reached language-model layer {layer} of {type(vlm.model).__name__}")
    return kept[0]


def lens_logits(answer: Answer, hidden: torch.Tensor) -> torch.Tensor:
    """float32 vocabulary logits of hidden states (rows, width): the final norm, the unembedding and the final
    logit soft-cap, as the model's last layer applies them."""
    vlm = answer.model
    norm = getattr(vlm.language_model, "norm", None)
    unembedding = vlm.model.get_output_embeddings()
    if not isinstance(norm, torch.nn.Module) or unembedding is None:
        raise VLMError(f"{type(vlm.model).__name__} has no final norm or no unembedding to read the lens through")
    with torch.inference_mode():
        logits = unembedding(norm(hidden)).float()
    softcap = getattr(vlm.text_config, "final_logit_softcapping", None)
    if softcap is None:
        softcap = getattr(vlm.model.config, "final_logit_softcapping", None)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def logit_lens(answer: Answer, layer: int, k: int = 5, deepstack: Deepstack = "before") -> LensWords:
    """The top-``k`` words of every image token at hidden state ``layer`` (0 to L), read before Qwen3-VL's deepstack
    features are added or ``"after"`` (see the module's docstring)."""
    vocabulary = answer.model.model.get_output_embeddings()
    size = int(vocabulary.weight.shape[0]) if vocabulary is not None else MAX_TOP_K
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= min(MAX_TOP_K, size):
        raise VLMError(f"k must be from 1 to {min(MAX_TOP_K, size)} words; got {k!r}")
    layer = lens_layer(answer, layer)
    hidden = image_hidden_states(answer, layer, deepstack)
    ids, probabilities = [], []
    for start in range(0, hidden.shape[0], LENS_BLOCK_TOKENS):
        probs = torch.softmax(lens_logits(answer, hidden[start : start + LENS_BLOCK_TOKENS]), dim=-1)
        top = probs.topk(int(k), dim=-1)
        ids.append(top.indices.cpu())
        probabilities.append(top.values.cpu())
    top_ids = torch.cat(ids).numpy().astype(np.int64).reshape(-1, int(k))
    tokenizer = answer.model.tokenizer
    decoded = tokenizer.batch_decode([[int(i)] for i in top_ids.ravel()])
    words = np.array(decoded, dtype=object).reshape(top_ids.shape)
    return LensWords(
        layer=layer,
        ids=top_ids,
        words=words,
        probabilities=torch.cat(probabilities).numpy().astype(np.float32).reshape(top_ids.shape),
        top_words=tile_maps(answer, words[:, 0], fill=""),
        deepstack=lens_deepstack(answer, deepstack),
    )
