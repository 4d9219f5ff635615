"""Prompts become classes: ``zero_shot(model, prompts)`` gives the image tower a head that scores the prompts.

    zs = vitviz.zero_shot(model, ["a photo of a dog", "a photo of a cat"])
    zs(pixels).logits            # (B, 2): logit_scale * cos(image, text) (+ SigLIP's logit_bias)
    zs.class_names               # the prompts
    zs.probabilities(logits)     # softmax over the prompts (CLIP) or a sigmoid per prompt (SigLIP)

The head is linear in the normalised image embedding, as open_clip's ``build_zero_shot_classifier`` makes it, so
every explanation written for classes (rollout read out, relevance, LeGrad, TAM, Grad-CAM, the logit lens, which
becomes a text lens, faithfulness, the sanity check) works for a prompt with no special case. The returned ViT
shares every module of the image tower: new prompts cost only their text embeddings, never a reload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from vitviz.model import ViT
from vitviz.text.embeddings import Progress, class_embeddings
from vitviz.text.prompts import PromptError

NO_TEXT_TOWER = (
    "this model has no text tower, so prompts cannot become classes. Load CLIP or SigLIP with theirs: a "
    "Hugging Face CLIPModel or SiglipModel (hf:openai/clip-vit-base-patch16, hf:google/siglip-base-patch16"
    "-224, or such a folder) or an open_clip model (open_clip:ViT-B-16/openai, open_clip:hf-hub:<org>/"
    "<name>); timm's CLIP and SigLIP names whose Hub repository holds open_clip weights load with it too"
)


class PromptHead(nn.Module):
    """Prompts as a linear classifier on the pooled image vector (B, D) -> (B, C):
    ``logit_scale * normalise(projection(pooled)) @ text.T + logit_bias``."""

    def __init__(
        self,
        text_embeddings: torch.Tensor,
        logit_scale: torch.Tensor,
        logit_bias: torch.Tensor | None,
        projection: nn.Linear | None,
    ):
        super().__init__()
        self.projection = projection  # shared with the text tower and every other prompt head of this model
        self.register_buffer("text_embeddings", F.normalize(text_embeddings.float(), dim=-1))  # (C, E), unit rows
        self.register_buffer("logit_scale", logit_scale.float().reshape(()))
        self.register_buffer("logit_bias", None if logit_bias is None else logit_bias.float().reshape(()))

    @property
    def out_features(self) -> int:
        return self.text_embeddings.shape[0]

    def linear_readout(self, pooled: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each image's target logit as u . pooled + k, the image embedding's length frozen at its value for this
        pooled vector (B, D): (u (B, D), k (B,)). What direct logit attribution reads the prompts through."""
        image = self.projection(pooled) if self.projection is not None else pooled  # (B, E)
        length = image.norm(dim=-1).clamp(min=1e-12)  # as F.normalize
        text = self.text_embeddings[targets].to(image.dtype) * (self.logit_scale / length)[:, None]  # (B, E)
        weight = self.projection.weight if self.projection is not None else None
        vector = text @ weight if weight is not None else text
        bias = self.projection.bias if self.projection is not None else None
        constant = (text * bias).sum(dim=-1) if bias is not None else pooled.new_zeros(len(targets))
        return vector, constant + (self.logit_bias if self.logit_bias is not None else 0.0)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        image = self.projection(pooled) if self.projection is not None else pooled  # (..., E)
        image = F.normalize(image, dim=-1)
        logits = self.logit_scale * image @ self.text_embeddings.to(image.dtype).T  # (..., C)
        return logits + self.logit_bias if self.logit_bias is not None else logits


def zero_shot(
    model: ViT,
    prompts: Sequence[str],
    templates: Sequence[str] | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    use_cache: bool = True,
) -> ViT:
    """A ViT whose classes are ``prompts``, sharing ``model``'s image tower (``model`` itself is not changed).

    ``templates`` (e.g. ``["a photo of a {}."]``) turn each prompt into several texts, averaged as CLIP's ImageNet
    recipe does; without them each prompt is read as it is. Two classes may share a text (ImageNet's two
    'missile' classes); ``check_prompts`` refuses that for typed prompts. Text embeddings are cached on disk
    (``vitviz.text.embeddings``). Raises ValueError (PromptError for bad prompts) with a message.
    """
    tower = model.text_tower
    if tower is None:
        raise PromptError(NO_TEXT_TOWER)
    projection = tower.image_projection
    if projection is not None and projection.in_features != model.config.pooled_size:
        raise ValueError(
            f"the text tower's image projection reads {projection.in_features} features; the image "
            f"tower pools {model.config.pooled_size}"
        )
    text = class_embeddings(tower, prompts, templates, cache_dir=cache_dir, progress=progress, use_cache=use_cache)
    image_width = projection.out_features if projection is not None else model.config.pooled_size
    if text.shape[1] != image_width:
        raise ValueError(
            f"text embeddings of width {text.shape[1]} cannot meet image embeddings of width {image_width}"
        )
    head = PromptHead(text, tower.logit_scale, tower.logit_bias, projection)
    return with_head(model, head, list(prompts), tower.probabilities)


def with_head(model: ViT, head: nn.Module, class_names: list[str], probabilities: str) -> ViT:
    """A ViT that shares every module of ``model`` but reads out through ``head``. The copy has its own module
    table (so ``model.head`` is untouched) and its own config (``num_classes``, ``probabilities``)."""
    new = model.sharing_copy()  # the same modules and attributes (text_tower...), tables of its own
    new.config = replace(model.config, num_classes=len(class_names), probabilities=probabilities)
    new.head = head
    new.head_dist = None
    new.class_names = list(class_names)
    return new.train(model.training)
