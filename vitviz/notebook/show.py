"""``vitviz.show``: the one way into the notebook views, picking the view by what it is given."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from PIL import Image

from vitviz.dataset import DatasetIndex
from vitviz.notebook.base import MapView
from vitviz.notebook.photos import PhotoAnalyses, check_images, check_shown_model
from vitviz.notebook.view import PhotoView


def show(
    subject: object,
    images: Image.Image | Sequence[Image.Image] | None = None,
    *,
    prompts: Sequence[str] | None = None,
    precision: str = "fp32",
    **state,
) -> MapView:
    """An interactive view of what ``subject`` looks at.

    - ``show(model, images)``: a ViT's maps over one PIL image or several (side by side on one colour scale), its
      predictions beside them (notebook.view). ``prompts`` make a CLIP or SigLIP model's classes of these texts
      (text.zero_shot), so that ``target`` can name one.
    - ``show(answer, photo)``: a VLM's answer (vitviz.vlm.Answer) and the photo it is about (notebook.answers).
    - ``show(index, where="label = 'cat'", limit=24)``: a grid of a dataset index's selection with its stored maps
      (notebook.index_view).

    ``state`` sets the view's settings (method, layer, head, patch, target...). Bad input is a one-line ValueError.
    """
    if isinstance(subject, DatasetIndex):
        from vitviz.notebook.index_view import IndexView

        if images is not None:
            raise ValueError("show(index, where=...) takes no photos: the index reads them from its source")
        return IndexView(subject, **state)
    answers = sys.modules.get("vitviz.vlm.answer")  # an Answer exists only once vitviz.vlm is imported
    if answers is not None and isinstance(subject, answers.Answer):
        from vitviz.notebook.answers import AnswerView

        return AnswerView(subject, images, **state)
    if not isinstance(subject, torch.nn.Module):
        raise ValueError(
            f"show takes a vitviz model and photos, or a VLM answer and its photo; got {type(subject).__name__}"
        )
    check_shown_model(subject)  # before the photos: a clip given to a video model is told where clips go
    if images is None:
        raise ValueError("show(model, images) needs the photos: a PIL image or a list of them")
    model = subject
    if prompts is not None:
        from vitviz.text import zero_shot

        model = zero_shot(model, list(prompts))
    return PhotoView(PhotoAnalyses(model, check_images(images), precision), **state)
